/* The soft switch's port I/O in C: a PACKET_MMAP receive ring per port and
 * sendmmsg straight from the frames' own buffers.
 *
 * Built by scripts/build_fastpath.py (make setup) next to this file; used by
 * testbed/switch/soft/dataplane.py when the switch's io_impl is "mmap_ring".
 *
 * RxRing(fd, frame_size, frame_nr): TPACKET_V2 receive ring on an AF_PACKET
 *   socket that is not bound yet (bind after, so that no frame lands in the
 *   ordinary receive queue, where nobody would read it). The kernel writes
 *   each frame into the next slot and flips its status to TP_STATUS_USER;
 *   recv() walks the slots without a system call, copies each frame into a
 *   bytes object (the same bytes recvmmsg gives) and hands the slot back.
 *   Why V2 and not V3: V3 hands over whole blocks, and a block that is not
 *   full is only handed over when its retire timer fires (tp_retire_blk_tov,
 *   at least 1 ms): at low rates frames would wait up to that long in the
 *   switch, where a hardware switch adds microseconds; V2 hands over each
 *   frame at once. (Not measured here: chosen from the kernel's design.)
 *   The kernel wakes poll/epoll per frame, as for a plain socket.
 * wait_any(rings, spin_ns): bounded busy poll: True as soon as one ring has a
 *   frame, False after spin_ns nanoseconds without one (then the caller sleeps
 *   in epoll).
 * send_frames(fd, frames, start, count): one sendmmsg of frames[start:start+count]
 *   (bytes-like), non-blocking; returns how many the kernel took, or -errno.
 * Engine(ports): the loop's per-frame work in C over the rings (io_impl
 *   ring_fastpath; see its comment below and testbed/switch/soft/fastloop.py).
 * pcap_records(frames, ts, snaplen) -> bytes: the classic-pcap records the
 *   Engine writes (pcap.py PcapWriter's format), for tests of that format.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <poll.h>
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ring_program.h"

#define MAX_SEND 1024

/* --- pcap records (the format of testbed/switch/soft/pcap.py) ------------------ */

typedef struct {
    uint8_t *p;
    size_t len, cap;
    long long frames;
} PcapBuf;

static inline void put_le32(uint8_t *d, uint32_t v) {
    d[0] = (uint8_t)v; d[1] = (uint8_t)(v >> 8); d[2] = (uint8_t)(v >> 16); d[3] = (uint8_t)(v >> 24);
}

/* The batch time as PcapWriter.write_batch splits it: int(ts), int((ts - sec) * 1e6). */
static inline void pcap_split_ts(double ts, uint32_t *sec, uint32_t *usec) {
    long long s = (long long)ts;
    *sec = (uint32_t)s;
    *usec = (uint32_t)(long long)((ts - (double)s) * 1e6);
}

/* One record: header (sec, usec, captured, original length), then at most snaplen bytes. */
static int pcap_record(PcapBuf *b, const uint8_t *f, size_t len, uint32_t snap,
                       uint32_t sec, uint32_t usec) {
    size_t cap_len = len > snap ? snap : len;
    size_t need = b->len + 16 + cap_len;
    if (need > b->cap) {
        size_t c = b->cap ? b->cap : (64u << 10);
        while (c < need) c *= 2;
        uint8_t *np = realloc(b->p, c);
        if (!np) return -1;
        b->p = np;
        b->cap = c;
    }
    uint8_t *d = b->p + b->len;
    put_le32(d, sec);
    put_le32(d + 4, usec);
    put_le32(d + 8, (uint32_t)cap_len);
    put_le32(d + 12, (uint32_t)len);
    memcpy(d + 16, f, cap_len);
    b->len = need;
    b->frames++;
    return 0;
}

static PyObject *pcap_records(PyObject *mod, PyObject *args) {
    PyObject *seq;
    double ts;
    unsigned snap;
    if (!PyArg_ParseTuple(args, "OdI", &seq, &ts, &snap)) return NULL;
    PyObject *fast = PySequence_Fast(seq, "pcap_records: frames must be a sequence of bytes");
    if (!fast) return NULL;
    uint32_t sec, usec;
    pcap_split_ts(ts, &sec, &usec);
    PcapBuf b = {0};
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        Py_buffer v;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, i), &v, PyBUF_SIMPLE) < 0) goto done;
        int r = pcap_record(&b, v.buf, (size_t)v.len, snap, sec, usec);
        PyBuffer_Release(&v);
        if (r < 0) { PyErr_NoMemory(); goto done; }
    }
    out = PyBytes_FromStringAndSize((const char *)b.p, (Py_ssize_t)b.len);
done:
    free(b.p);
    Py_DECREF(fast);
    return out;
}

/* Ingress link shaping (RxRing.shape): the port's ring is the far end of a link
 * that serializes at `rate` bit/s, so the frame at the head is handed out only
 * once the link would have delivered it whole: finish = max(its arrival, the
 * previous frame's finish) + its bits / rate. The arrival is the kernel's receive
 * timestamp of the frame (CLOCK_REALTIME), so a switch that reads late does not
 * slow the link down. A frame may go up to `slack` early (one MTU's time, as
 * htb's default cburst lets one packet through), so one wakeup releases
 * several; the finish times, and so the rate, are exact. The frames waiting in
 * the ring are the link's queue (its slots bound it). Unshaped: rate 0. */
typedef struct {
    PyObject_HEAD
    int fd;
    uint8_t *map;
    size_t map_len;
    unsigned frame_size, frame_nr, head;
    unsigned long long truncated;   /* frames longer than a slot: dropped, counted */
    double ns_per_byte;             /* shaping: 8e9 / rate; 0: unshaped */
    long long slack_ns;
    long long free_ns;              /* when the link finished the last frame handed out */
    long long head_fin;             /* the head frame's finish, once computed; 0: not yet */
    unsigned long long shaped, queued;  /* frames through the shaper; those that waited for the link */
} RxRing;

static inline struct tpacket2_hdr *slot(RxRing *r, unsigned i) {
    return (struct tpacket2_hdr *)(r->map + (size_t)i * r->frame_size);
}

static inline int slot_ready(RxRing *r) {
    return (__atomic_load_n(&slot(r, r->head)->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) != 0;
}

static inline long long real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* When the link has delivered the (ready) head frame h whole (shaped rings only). */
static inline long long head_finish(RxRing *r, const struct tpacket2_hdr *h) {
    if (!r->head_fin) {
        long long arrived = (long long)h->tp_sec * 1000000000LL + h->tp_nsec;
        long long start = arrived;
        if (r->free_ns > arrived) { start = r->free_ns; r->queued++; }
        r->head_fin = start + (long long)(h->tp_len * r->ns_per_byte + 0.5);
    }
    return r->head_fin;
}

/* The ready head frame h may be handed out at real time `now` (ns; 0 for an unshaped
 * ring, which never reads the clock). */
static inline int head_due(RxRing *r, const struct tpacket2_hdr *h, long long now) {
    if (r->ns_per_byte == 0) return 1;
    return head_finish(r, h) <= now + r->slack_ns;
}

/* The head frame was handed out (or dropped): the link is busy until its finish. */
static inline void head_taken(RxRing *r) {
    if (r->ns_per_byte != 0) {
        r->free_ns = r->head_fin;
        r->head_fin = 0;
        r->shaped++;
    }
}

static inline long long shaper_now(const RxRing *r) {
    return r->ns_per_byte != 0 ? real_ns() : 0;
}

static int RxRing_init(RxRing *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"fd", "frame_size", "frame_nr", NULL};
    int fd;
    unsigned frame_size, frame_nr;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iII", names, &fd, &frame_size, &frame_nr))
        return -1;
    if (self->map) {
        PyErr_SetString(PyExc_RuntimeError, "RxRing already initialised");
        return -1;
    }
    /* Slots and blocks are powers of two, so slot i sits at i * frame_size. */
    if (frame_size < 2048 || (frame_size & (frame_size - 1)) || frame_nr == 0) {
        PyErr_Format(PyExc_ValueError, "frame_size %u must be a power of two >= 2048, frame_nr > 0",
                     frame_size);
        return -1;
    }
    unsigned block_size = frame_size > (1u << 16) ? frame_size : (1u << 16);
    unsigned per_block = block_size / frame_size;
    unsigned block_nr = (frame_nr + per_block - 1) / per_block;
    int version = TPACKET_V2;
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &version, sizeof version) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    struct tpacket_req req = {.tp_block_size = block_size, .tp_block_nr = block_nr,
                              .tp_frame_size = frame_size, .tp_frame_nr = block_nr * per_block};
    if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    size_t len = (size_t)block_size * block_nr;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->fd = fd;
    self->map = m;
    self->map_len = len;
    self->frame_size = frame_size;
    self->frame_nr = req.tp_frame_nr;
    self->head = 0;
    self->truncated = 0;
    self->ns_per_byte = 0;
    self->slack_ns = self->free_ns = self->head_fin = 0;
    self->shaped = self->queued = 0;
    return 0;
}

static void RxRing_dealloc(RxRing *self) {
    if (self->map)
        munmap(self->map, self->map_len);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* recv(max_frames) -> (list[bytes], total bytes) */
static PyObject *RxRing_recv(RxRing *self, PyObject *arg) {
    long max = PyLong_AsLong(arg);
    if (max == -1 && PyErr_Occurred())
        return NULL;
    if (!self->map) {
        PyErr_SetString(PyExc_ValueError, "RxRing is closed");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    long long nbytes = 0, now = shaper_now(self);
    for (long n = 0; n < max; ) {
        struct tpacket2_hdr *h = slot(self, self->head);
        if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
            break;
        if (!head_due(self, h, now))
            break;
        if (h->tp_snaplen < h->tp_len) {
            self->truncated++;           /* as MSG_TRUNC on the recvmmsg path: dropped */
        } else {
            PyObject *b = PyBytes_FromStringAndSize((const char *)h + h->tp_mac, h->tp_snaplen);
            if (!b || PyList_Append(out, b) < 0) {
                Py_XDECREF(b);
                Py_DECREF(out);
                return NULL;     /* the slot stays ours: read again next time */
            }
            Py_DECREF(b);
            nbytes += h->tp_snaplen;
            n++;
        }
        head_taken(self);
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        self->head = self->head + 1 == self->frame_nr ? 0 : self->head + 1;
    }
    return Py_BuildValue("(NL)", out, nbytes);
}

/* A frame is waiting and (shaped) due now. */
static inline int ring_due(RxRing *r) {
    if (!slot_ready(r)) return 0;
    return head_due(r, slot(r, r->head), shaper_now(r));
}

static PyObject *RxRing_ready(RxRing *self, PyObject *unused) {
    return PyBool_FromLong(self->map && ring_due(self));
}

static PyObject *RxRing_shape(RxRing *self, PyObject *args) {
    double rate_bps, slack_s;
    if (!PyArg_ParseTuple(args, "dd", &rate_bps, &slack_s))
        return NULL;
    if (!(rate_bps >= 0) || !(slack_s >= 0) || slack_s > 1.0) {
        PyErr_Format(PyExc_ValueError, "shape(rate_bps >= 0, 0 <= slack_s <= 1), got (%g, %g)",
                     rate_bps, slack_s);
        return NULL;
    }
    self->ns_per_byte = rate_bps > 0 ? 8e9 / rate_bps : 0;
    self->slack_ns = (long long)(slack_s * 1e9);
    self->head_fin = 0;
    Py_RETURN_NONE;
}

/* Seconds until the held head frame may go (0: one is due now), or None: no frame
 * waits, or the ring is unshaped and one does (then: due). */
static PyObject *RxRing_due_in(RxRing *self, PyObject *unused) {
    if (!self->map || !slot_ready(self)) Py_RETURN_NONE;
    if (self->ns_per_byte == 0) return PyFloat_FromDouble(0.0);
    long long wait = head_finish(self, slot(self, self->head)) - self->slack_ns - real_ns();
    return PyFloat_FromDouble(wait > 0 ? wait * 1e-9 : 0.0);
}

static PyObject *RxRing_get_shaper(RxRing *self, void *c) {
    if (self->ns_per_byte == 0) Py_RETURN_NONE;
    return Py_BuildValue("{s:d,s:d,s:K,s:K}", "rate_bps", 8e9 / self->ns_per_byte,
                         "slack_s", self->slack_ns * 1e-9, "frames", self->shaped, "queued", self->queued);
}

/* Frames waiting, from the head on (tests: know that the kernel delivered them). */
static PyObject *RxRing_pending(RxRing *self, PyObject *unused) {
    unsigned n = 0;
    if (self->map) {
        unsigned i = self->head;
        while (n < self->frame_nr
               && (__atomic_load_n(&slot(self, i)->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) {
            n++;
            i = i + 1 == self->frame_nr ? 0 : i + 1;
        }
    }
    return PyLong_FromUnsignedLong(n);
}

static PyObject *RxRing_close(RxRing *self, PyObject *unused) {
    if (self->map) {
        munmap(self->map, self->map_len);
        self->map = NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *RxRing_get_truncated(RxRing *self, void *c) {
    return PyLong_FromUnsignedLongLong(self->truncated);
}

static PyObject *RxRing_get_frames(RxRing *self, void *c) {
    return PyLong_FromUnsignedLong(self->frame_nr);
}

static PyMethodDef RxRing_methods[] = {
    {"recv", (PyCFunction)RxRing_recv, METH_O, "recv(max_frames) -> (list[bytes], nbytes)"},
    {"ready", (PyCFunction)RxRing_ready, METH_NOARGS, "a frame waits in the ring (shaped: and is due)"},
    {"shape", (PyCFunction)RxRing_shape, METH_VARARGS,
     "shape(rate_bps, slack_s): hand frames out at the rate of the link they come over (0: unshaped)"},
    {"due_in", (PyCFunction)RxRing_due_in, METH_NOARGS,
     "seconds until the waiting head frame is due (0: now), None: no frame waits"},
    {"pending", (PyCFunction)RxRing_pending, METH_NOARGS, "frames waiting in the ring"},
    {"close", (PyCFunction)RxRing_close, METH_NOARGS, "unmap the ring (the socket stays open)"},
    {NULL}};

static PyGetSetDef RxRing_getset[] = {
    {"truncated", (getter)RxRing_get_truncated, NULL, "frames dropped: longer than a slot", NULL},
    {"frames", (getter)RxRing_get_frames, NULL, "slots in the ring", NULL},
    {"shaper", (getter)RxRing_get_shaper, NULL,
     "None (unshaped) or {rate_bps, slack_s, frames, queued}", NULL},
    {NULL}};

static PyTypeObject RxRingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "testbed.switch.soft._pktio.RxRing",
    .tp_basicsize = sizeof(RxRing),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RxRing_init,
    .tp_dealloc = (destructor)RxRing_dealloc,
    .tp_methods = RxRing_methods,
    .tp_getset = RxRing_getset,
};

static inline long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static PyObject *wait_any(PyObject *mod, PyObject *args) {
    PyObject *seq;
    long long spin_ns;
    if (!PyArg_ParseTuple(args, "OL", &seq, &spin_ns))
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "wait_any: rings must be a sequence");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyObject_TypeCheck(items[i], &RxRingType) || !((RxRing *)items[i])->map) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_TypeError, "wait_any: every item must be an open RxRing");
            return NULL;
        }
    }
    long long deadline = now_ns() + spin_ns;
    int found = 0;
    for (unsigned k = 0; !found; k++) {
        for (Py_ssize_t i = 0; i < n && !found; i++)
            found = ring_due((RxRing *)items[i]);
        if (found || ((k & 15) == 15 && now_ns() >= deadline) || spin_ns <= 0)
            break;
        __builtin_ia32_pause();
    }
    Py_DECREF(fast);
    return PyBool_FromLong(found);
}

static PyObject *send_frames(PyObject *mod, PyObject *args) {
    int fd;
    PyObject *frames;
    Py_ssize_t start, count;
    if (!PyArg_ParseTuple(args, "iO!nn", &fd, &PyList_Type, &frames, &start, &count))
        return NULL;
    Py_ssize_t len = PyList_GET_SIZE(frames);
    if (start < 0 || count < 0 || start + count > len) {
        PyErr_Format(PyExc_IndexError, "send_frames: [%zd, %zd) outside a list of %zd",
                     start, start + count, len);
        return NULL;
    }
    if (count > MAX_SEND)
        count = MAX_SEND;
    if (count == 0)
        return PyLong_FromLong(0);
    struct mmsghdr msgs[MAX_SEND];
    struct iovec iov[MAX_SEND];
    Py_buffer views[MAX_SEND];
    Py_ssize_t nviews = 0;
    memset(msgs, 0, sizeof(struct mmsghdr) * count);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *f = PyList_GET_ITEM(frames, start + i);
        if (PyBytes_Check(f)) {
            iov[i].iov_base = PyBytes_AS_STRING(f);
            iov[i].iov_len = PyBytes_GET_SIZE(f);
        } else {
            if (PyObject_GetBuffer(f, &views[nviews], PyBUF_SIMPLE) < 0) {
                for (Py_ssize_t j = 0; j < nviews; j++)
                    PyBuffer_Release(&views[j]);
                return NULL;
            }
            iov[i].iov_base = views[nviews].buf;
            iov[i].iov_len = views[nviews].len;
            nviews++;
        }
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int r = sendmmsg(fd, msgs, (unsigned)count, MSG_DONTWAIT);
    int e = errno;
    for (Py_ssize_t j = 0; j < nviews; j++)
        PyBuffer_Release(&views[j]);
    return PyLong_FromLong(r >= 0 ? r : -e);
}

/* --- Engine: the switch loop's per-frame work, compiled ----------------------
 *
 * Engine(ports, tx_fd): ports = [(port_no, RxRing, ifindex)], the switch's
 *   ring ports; tx_fd: one AF_PACKET socket, not bound, that sends for all of
 *   them (each message names its interface), so one loop pass makes one
 *   sendmmsg whatever the number of ports. (Measured against a sendmmsg per
 *   port: bench/switch_ringpath.py, results/bench/ring_fastpath.md.)
 * run(max_per_ring, program, api, args[, ts]): for each ring in order, up to
 *   max_per_ring frames, read in place in their slots (no bytes object): a
 *   program (a RING_PROGRAM_CAPSULE `api`, e.g. the INA datapath) sees each
 *   frame first; the frames it does not take, and every frame when program is
 *   None, go through the L2 table (the forward program: dst MAC -> port,
 *   hairpin dropped, a miss flooded or dropped). What leaves is copied into a
 *   send buffer, sent with one sendmmsg at the end (or when the buffer fills),
 *   in arrival order. Returns the frames read, or (frames read, [(port_no,
 *   errno)]) when a send found a port gone (the Python side decides down or not).
 * set_l2(table, flood, flood_ports): table = bytes of (u64 MAC, i64 port)
 *   pairs sorted by MAC (the MAC as a big-endian number); flood_ports = the
 *   forward program's ports.
 * set_down(port_no): frames to it are counted as tx_dropped from now on.
 * take_counters() -> ({port_no: (rx, rx_bytes, tx, tx_bytes, tx_dropped)},
 *   (hits, misses, flooded, flood_copies, dropped_miss, hairpin), bad_port):
 *   the counts since the last call (then zeroed), for the Python objects that
 *   report them.
 * set_pcap({port_no: (snaplen_in, snaplen_out)} or None): record the frames
 *   each port receives (as read) and sends (as the kernel took them) as pcap
 *   records stamped with run()'s `ts`, into per-port buffers; take_pcap() ->
 *   [(port_no, in_records, in_frames, out_records, out_frames)] hands them to
 *   Python (pcap.PcapWriter.write_records, the one writer of each file), so
 *   that batches of either path land in a file in the order they ran.
 */
#define PORT_INDEX 4096            /* port numbers the engine maps directly */
#define STAGE_BYTES (1u << 20)     /* the send buffer */

enum { F_HITS, F_MISSES, F_FLOODED, F_FLOOD_COPIES, F_DROPPED_MISS, F_HAIRPIN, N_FWD };

/* Loss (impairments.PortImpairment with loss only) in the compiled path. numpy
 * draws a port direction's uniforms in blocks (PortImpairment.reserve, fastloop.py)
 * and the engine takes one per frame, in the order the Python path draws them
 * (its frames in arrival order per port), so both paths drop the same frames. */
typedef struct {
    double p;                            /* drop probability; 0: no loss here */
    Py_buffer u;                         /* float64 uniforms, held while u.obj is set */
    Py_ssize_t n, pos;                   /* uniforms in the block, taken */
    long long seen, dropped;
} Loss;

static void loss_clear(Loss *l) {
    if (l->u.obj) PyBuffer_Release(&l->u);
    l->u.obj = NULL;
    l->p = 0.0;
    l->n = l->pos = 0;
}

/* 1: drop this frame, 0: keep it, -1: the block ran out (an exception is set;
 * run() checks the blocks before a pass, so this is a bug, not a draw). */
static inline int loss_drop(Loss *l) {
    if (l->p <= 0.0) return 0;
    if (l->pos >= l->n) {
        PyErr_SetString(PyExc_RuntimeError, "loss: the block of uniforms ran out within a pass");
        return -1;
    }
    double u = ((const double *)l->u.buf)[l->pos++];
    l->seen++;
    if (u < l->p) { l->dropped++; return 1; }     /* as PortImpairment.decide: keep u >= p */
    return 0;
}

typedef struct {
    long no;
    int down, gone_errno;
    Loss loss_in, loss_out;              /* before the program / before the send */
    struct sockaddr_ll to;               /* its interface, for the shared send socket */
    RxRing *ring;                        /* owned reference */
    long long rx, rx_bytes, tx, tx_bytes, tx_dropped;
    uint32_t snap_in, snap_out;          /* pcap snaplens; 0: this port is not recorded */
    PcapBuf pcap_in, pcap_out;           /* records not yet taken by Python */
} EPort;

typedef struct {
    PyObject_HEAD
    int nports;
    EPort *ports;
    int16_t index[PORT_INDEX];           /* port number -> ports[], -1 none */
    uint64_t *macs;
    long *mac_port;
    Py_ssize_t nmac;
    int flood;
    long *flood_ports;
    Py_ssize_t nflood;
    long long fwd[N_FWD];
    long long bad_port;                  /* frames to a port number the switch lacks */
    int gone;                            /* a port-gone errno is waiting for Python */
    int pcap;                            /* some port is recorded (set_pcap) */
    int pcap_nomem;                      /* a record did not fit in memory: run() raises */
    uint32_t ts_sec, ts_usec;            /* this run's pcap timestamp */
    int tx_fd;
    uint8_t *buf;                        /* staged frames, STAGE_BYTES */
    size_t used;
    unsigned n;
    int16_t msg_port[MAX_SEND];          /* ports[] index of each staged message */
    struct iovec iov[MAX_SEND];
    struct mmsghdr msgs[MAX_SEND];
} Engine;

static void Engine_free_ports(Engine *e) {
    for (int i = 0; i < e->nports; i++) {
        loss_clear(&e->ports[i].loss_in);
        loss_clear(&e->ports[i].loss_out);
        Py_XDECREF(e->ports[i].ring);
        free(e->ports[i].pcap_in.p);
        free(e->ports[i].pcap_out.p);
    }
    free(e->ports);
    e->ports = NULL;
    e->nports = 0;
}

static void Engine_dealloc(Engine *e) {
    Engine_free_ports(e);
    free(e->macs);
    free(e->mac_port);
    free(e->flood_ports);
    free(e->buf);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static int Engine_init(Engine *e, PyObject *args, PyObject *kw) {
    PyObject *seq;
    int tx_fd;
    if (!PyArg_ParseTuple(args, "Oi", &seq, &tx_fd)) return -1;
    if (e->ports) { PyErr_SetString(PyExc_RuntimeError, "Engine already initialised"); return -1; }
    e->buf = malloc(STAGE_BYTES);
    if (!e->buf) { PyErr_NoMemory(); return -1; }
    e->tx_fd = tx_fd;
    PyObject *fast = PySequence_Fast(seq, "Engine(ports, tx_fd): ports must be a sequence of (port_no, RxRing, ifindex)");
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    for (int i = 0; i < PORT_INDEX; i++) e->index[i] = -1;
    e->ports = calloc(n ? n : 1, sizeof(EPort));
    if (!e->ports) { Py_DECREF(fast); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        long no;
        PyObject *ring;
        int ifindex;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "lO!i;Engine: each port is (port_no, RxRing, ifindex)",
                              &no, &RxRingType, &ring, &ifindex))
            goto fail;
        if (no < 0 || no >= PORT_INDEX || e->index[no] >= 0) {
            PyErr_Format(PyExc_ValueError, "Engine: port number %ld repeated or outside 0..%d", no, PORT_INDEX - 1);
            goto fail;
        }
        EPort *p = &e->ports[i];
        p->no = no;
        /* As a socket bound to the interface with ETH_P_ALL sends (the mmsg path). */
        p->to.sll_family = AF_PACKET;
        p->to.sll_protocol = htons(ETH_P_ALL);
        p->to.sll_ifindex = ifindex;
        Py_INCREF(ring);
        p->ring = (RxRing *)ring;
        e->nports = (int)i + 1;
        e->index[no] = (int16_t)i;
    }
    Py_DECREF(fast);
    return 0;
fail:
    Py_DECREF(fast);
    Engine_free_ports(e);
    return -1;
}

static PyObject *Engine_set_l2(Engine *e, PyObject *args) {
    Py_buffer t;
    int flood;
    PyObject *fl;
    if (!PyArg_ParseTuple(args, "y*pO", &t, &flood, &fl)) return NULL;
    PyObject *fast = PySequence_Fast(fl, "set_l2: flood_ports must be a sequence of ints");
    if (!fast) { PyBuffer_Release(&t); return NULL; }
    Py_ssize_t n = t.len / 16, nf = PySequence_Fast_GET_SIZE(fast);
    uint64_t *macs = malloc((n ? n : 1) * sizeof *macs);
    long *mp = malloc((n ? n : 1) * sizeof *mp), *fp = malloc((nf ? nf : 1) * sizeof *fp);
    if (!macs || !mp || !fp) { PyErr_NoMemory(); goto fail; }
    if (t.len % 16) { PyErr_SetString(PyExc_ValueError, "set_l2: table must be (u64, i64) pairs"); goto fail; }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t pair[2];
        memcpy(pair, (const uint8_t *)t.buf + 16 * i, 16);
        macs[i] = (uint64_t)pair[0];
        mp[i] = (long)pair[1];
        if (i && macs[i] <= macs[i - 1]) {
            PyErr_SetString(PyExc_ValueError, "set_l2: table must be sorted by MAC, no repeats");
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < nf; i++) {
        fp[i] = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (fp[i] == -1 && PyErr_Occurred()) goto fail;
    }
    free(e->macs); free(e->mac_port); free(e->flood_ports);
    e->macs = macs; e->mac_port = mp; e->nmac = n;
    e->flood_ports = fp; e->nflood = nf; e->flood = flood;
    PyBuffer_Release(&t);
    Py_DECREF(fast);
    Py_RETURN_NONE;
fail:
    free(macs); free(mp); free(fp);
    PyBuffer_Release(&t);
    Py_DECREF(fast);
    return NULL;
}

static inline EPort *engine_port(Engine *e, long no) {
    return no >= 0 && no < PORT_INDEX && e->index[no] >= 0 ? &e->ports[e->index[no]] : NULL;
}

static inline int port_gone_errno(int err) {
    return err == ENETDOWN || err == ENXIO || err == ENODEV || err == EBADF;
}

/* The staged frames out, as dataplane.AfPacketPort._send_mmsg does it per
 * port: a full socket buffer waits once (5 ms), then tail-drops; a port gone
 * drops that frame and is reported; any other error drops that one frame. */
static void flush(Engine *e) {
    unsigned pos = 0, n = e->n;
    int waited = 0;
    while (pos < n) {
        int r = sendmmsg(e->tx_fd, e->msgs + pos, n - pos, MSG_DONTWAIT);
        if (r > 0) {
            for (unsigned i = pos; i < pos + (unsigned)r; i++) {
                EPort *p = &e->ports[e->msg_port[i]];
                p->tx++;
                p->tx_bytes += e->iov[i].iov_len;
                /* pcap out: as sent (the Python path records what send_batch took) */
                if (p->snap_out && pcap_record(&p->pcap_out, e->iov[i].iov_base, e->iov[i].iov_len,
                                               p->snap_out, e->ts_sec, e->ts_usec) < 0)
                    e->pcap_nomem = 1;
            }
            pos += r;
            continue;
        }
        int err = r < 0 ? errno : EAGAIN;
        if (err == EINTR) continue;
        if (err == EAGAIN && !waited) {
            waited = 1;
            struct pollfd pf = {.fd = e->tx_fd, .events = POLLOUT};
            Py_BEGIN_ALLOW_THREADS
            poll(&pf, 1, 5);
            Py_END_ALLOW_THREADS
            continue;
        }
        if (err == EAGAIN) {
            for (unsigned i = pos; i < n; i++) e->ports[e->msg_port[i]].tx_dropped++;
            break;
        }
        EPort *p = &e->ports[e->msg_port[pos]];
        if (port_gone_errno(err)) {
            p->gone_errno = err;
            e->gone = 1;
        }
        p->tx_dropped++;            /* ENOBUFS, EMSGSIZE, a port gone, ...: this frame */
        pos++;
    }
    e->n = 0;
    e->used = 0;
}

static int engine_emit(void *ctx, long port, const uint8_t *prefix, Py_ssize_t pl,
                       const uint8_t *payload, Py_ssize_t plen) {
    Engine *e = ctx;
    EPort *p = engine_port(e, port);
    if (!p) { e->bad_port++; return 0; }
    int lost = loss_drop(&p->loss_out);   /* first, as the Python path impairs before it sends */
    if (lost) return lost < 0 ? -1 : 0;
    if (p->down) { p->tx_dropped++; return 0; }
    size_t need = (size_t)pl + (size_t)plen;
    if (need > STAGE_BYTES) { p->tx_dropped++; return 0; }
    if (e->n == MAX_SEND || e->used + need > STAGE_BYTES) flush(e);
    uint8_t *dst = e->buf + e->used;
    if (pl) memcpy(dst, prefix, pl);
    memcpy(dst + pl, payload, plen);
    unsigned k = e->n;
    e->iov[k].iov_base = dst;
    e->iov[k].iov_len = need;
    e->msgs[k].msg_hdr.msg_iov = &e->iov[k];
    e->msgs[k].msg_hdr.msg_iovlen = 1;
    e->msgs[k].msg_hdr.msg_name = &p->to;
    e->msgs[k].msg_hdr.msg_namelen = sizeof p->to;
    e->msg_port[k] = (int16_t)(p - e->ports);
    e->used += need;
    e->n++;
    return 0;
}

/* The forward program (pipeline.ForwardingPipeline.process_batch), one frame. */
static int l2_forward(Engine *e, const uint8_t *f, Py_ssize_t len, long in_port) {
    long out = -1;
    if (len >= 6) {
        uint64_t key = 0;
        for (int i = 0; i < 6; i++) key = key << 8 | f[i];
        Py_ssize_t lo = 0, hi = e->nmac;
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (e->macs[mid] < key) lo = mid + 1; else hi = mid;
        }
        if (lo < e->nmac && e->macs[lo] == key) out = e->mac_port[lo];
    }
    if (out >= 0) {
        e->fwd[F_HITS]++;
        if (out == in_port) { e->fwd[F_HAIRPIN]++; return 0; }
        return engine_emit(e, out, NULL, 0, f, len);
    }
    e->fwd[F_MISSES]++;
    if (!e->flood) { e->fwd[F_DROPPED_MISS]++; return 0; }
    e->fwd[F_FLOODED]++;
    for (Py_ssize_t i = 0; i < e->nflood; i++) {
        if (e->flood_ports[i] == in_port) continue;
        e->fwd[F_FLOOD_COPIES]++;
        if (engine_emit(e, e->flood_ports[i], NULL, 0, f, len) < 0) return -1;
    }
    return 0;
}

static PyObject *Engine_run(Engine *e, PyObject *args) {
    long max;
    PyObject *program, *api_o, *pargs, *ts_o = Py_None;
    if (!PyArg_ParseTuple(args, "lOOO|O", &max, &program, &api_o, &pargs, &ts_o)) return NULL;
    if (e->pcap) {
        if (ts_o == Py_None) {
            PyErr_SetString(PyExc_ValueError, "run: pcaps are on (set_pcap): pass the batch time ts");
            return NULL;
        }
        double ts = PyFloat_AsDouble(ts_o);
        if (ts == -1.0 && PyErr_Occurred()) return NULL;
        pcap_split_ts(ts, &e->ts_sec, &e->ts_usec);
    }
    const RingProgramAPI *api = NULL;
    if (program != Py_None) {
        api = PyCapsule_GetPointer(api_o, RING_PROGRAM_CAPSULE);
        if (!api) return NULL;
        if (api->abi != RING_PROGRAM_ABI) {
            PyErr_Format(PyExc_ImportError, "ring program ABI %d, this switch speaks %d: rebuild (make setup)",
                         api->abi, RING_PROGRAM_ABI);
            return NULL;
        }
    }
    for (int i = 0; i < e->nports; i++) {
        /* A port sends at most one frame per frame read in the pass (multicast and
         * flooding send one copy per port), so nports x max uniforms always suffice. */
        EPort *p = &e->ports[i];
        if ((p->loss_in.p > 0 && p->loss_in.n - p->loss_in.pos < max)
            || (p->loss_out.p > 0 && p->loss_out.n - p->loss_out.pos < max * e->nports))
            return PyErr_Format(PyExc_ValueError, "run: port %ld's loss block has too few uniforms left "
                                "for a pass of %ld frames per ring (set_loss a longer one)", p->no, max);
    }
    RingProgramMemo memo = {-1, NULL};
    long long got = 0;
    int failed = 0;
    for (int i = 0; i < e->nports && !failed; i++) {
        EPort *p = &e->ports[i];
        RxRing *r = p->ring;
        if (!r->map) continue;
        long long now = shaper_now(r);
        for (long k = 0; k < max; ) {
            struct tpacket2_hdr *h = slot(r, r->head);
            if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) break;
            if (!head_due(r, h, now)) break;
            if (h->tp_snaplen < h->tp_len) {
                r->truncated++;       /* as RxRing.recv: dropped, counted */
            } else {
                const uint8_t *f = (const uint8_t *)h + h->tp_mac;
                Py_ssize_t len = h->tp_snaplen;
                /* pcap in: as received, before the program sees it */
                if (p->snap_in && pcap_record(&p->pcap_in, f, (size_t)len, p->snap_in,
                                              e->ts_sec, e->ts_usec) < 0)
                    e->pcap_nomem = 1;
                p->rx++;
                p->rx_bytes += len;
                k++;
                got++;
                int res = loss_drop(&p->loss_in);    /* lost on the link: the program never sees it */
                if (res == 0) {
                    res = api ? api->frame(program, pargs, &memo, f, len, p->no, engine_emit, e) : 1;
                    if (res == 1) res = l2_forward(e, f, len, p->no);
                }
                if (res < 0) failed = 1;
            }
            /* Everything it sends is copied out: the slot goes back at once. */
            head_taken(r);
            __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
            r->head = r->head + 1 == r->frame_nr ? 0 : r->head + 1;
            if (failed) break;
        }
    }
    /* Staged frames leave even when a program failed (they were decided). */
    if (e->n) flush(e);
    if (failed) return NULL;
    if (e->pcap_nomem) {
        e->pcap_nomem = 0;
        return PyErr_NoMemory();
    }
    if (!e->gone) return PyLong_FromLongLong(got);
    e->gone = 0;
    PyObject *ev = PyList_New(0);
    if (!ev) return NULL;
    for (int i = 0; i < e->nports; i++) {
        EPort *p = &e->ports[i];
        if (!p->gone_errno) continue;
        PyObject *t = Py_BuildValue("(li)", p->no, p->gone_errno);
        p->gone_errno = 0;
        if (!t || PyList_Append(ev, t) < 0) { Py_XDECREF(t); Py_DECREF(ev); return NULL; }
        Py_DECREF(t);
    }
    return Py_BuildValue("(LN)", got, ev);
}

static PyObject *Engine_set_down(Engine *e, PyObject *arg) {
    long no = PyLong_AsLong(arg);
    if (no == -1 && PyErr_Occurred()) return NULL;
    EPort *p = engine_port(e, no);
    if (!p) return PyErr_Format(PyExc_KeyError, "set_down: no port %ld", no);
    p->down = 1;
    Py_RETURN_NONE;
}

static void pcap_off(Engine *e) {
    for (int i = 0; i < e->nports; i++) e->ports[i].snap_in = e->ports[i].snap_out = 0;
    e->pcap = 0;
}

static PyObject *Engine_set_pcap(Engine *e, PyObject *arg) {
    pcap_off(e);
    if (arg == Py_None) Py_RETURN_NONE;
    if (!PyDict_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "set_pcap: {port_no: (snaplen_in, snaplen_out)} or None");
        return NULL;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(arg, &pos, &k, &v)) {
        long no = PyLong_AsLong(k);
        if (no == -1 && PyErr_Occurred()) goto fail;
        unsigned si, so;
        if (!PyArg_ParseTuple(v, "II;set_pcap: each value is (snaplen_in, snaplen_out)", &si, &so))
            goto fail;
        EPort *p = engine_port(e, no);
        if (!p) { PyErr_Format(PyExc_KeyError, "set_pcap: no port %ld", no); goto fail; }
        if (!si || !so) { PyErr_Format(PyExc_ValueError, "set_pcap: port %ld: snaplen 0", no); goto fail; }
        p->snap_in = si;
        p->snap_out = so;
        e->pcap = 1;
    }
    Py_RETURN_NONE;
fail:
    pcap_off(e);                         /* all or nothing */
    return NULL;
}

static PyObject *Engine_take_pcap(Engine *e, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (int i = 0; i < e->nports; i++) {
        EPort *p = &e->ports[i];
        if (!p->pcap_in.len && !p->pcap_out.len) continue;
        /* "" for a buffer never filled: y# makes None of a NULL pointer */
        PyObject *t = Py_BuildValue("(ly#Ly#L)", p->no,
                                    p->pcap_in.p ? (const char *)p->pcap_in.p : "",
                                    (Py_ssize_t)p->pcap_in.len, p->pcap_in.frames,
                                    p->pcap_out.p ? (const char *)p->pcap_out.p : "",
                                    (Py_ssize_t)p->pcap_out.len, p->pcap_out.frames);
        if (!t || PyList_Append(out, t) < 0) { Py_XDECREF(t); Py_DECREF(out); return NULL; }
        Py_DECREF(t);
        p->pcap_in.len = p->pcap_out.len = 0;
        p->pcap_in.frames = p->pcap_out.frames = 0;
    }
    return out;
}

static PyObject *Engine_take_counters(Engine *e, PyObject *unused) {
    PyObject *ports = PyDict_New();
    if (!ports) return NULL;
    for (int i = 0; i < e->nports; i++) {
        EPort *p = &e->ports[i];
        PyObject *k = PyLong_FromLong(p->no);
        PyObject *v = Py_BuildValue("(LLLLL)", p->rx, p->rx_bytes, p->tx, p->tx_bytes, p->tx_dropped);
        if (!k || !v || PyDict_SetItem(ports, k, v) < 0) {
            Py_XDECREF(k); Py_XDECREF(v); Py_DECREF(ports);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(v);
        p->rx = p->rx_bytes = p->tx = p->tx_bytes = p->tx_dropped = 0;
    }
    PyObject *ret = Py_BuildValue("(N(LLLLLL)L)", ports, e->fwd[0], e->fwd[1], e->fwd[2], e->fwd[3],
                                  e->fwd[4], e->fwd[5], e->bad_port);
    if (ret) {
        memset(e->fwd, 0, sizeof e->fwd);
        e->bad_port = 0;
    }
    return ret;
}

static PyObject *Engine_set_loss(Engine *e, PyObject *args) {
    long no;
    int out;
    double prob;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "lpdO", &no, &out, &prob, &obj)) return NULL;
    EPort *p = engine_port(e, no);
    if (!p) return PyErr_Format(PyExc_KeyError, "set_loss: no port %ld", no);
    if (!(prob >= 0.0 && prob <= 1.0))
        return PyErr_Format(PyExc_ValueError, "set_loss: probability %g is not within [0, 1]", prob);
    if (obj == Py_None && prob > 0.0)
        return PyErr_Format(PyExc_ValueError, "set_loss: a probability > 0 needs uniforms");
    Loss fresh = {0};
    if (obj != Py_None) {
        if (PyObject_GetBuffer(obj, &fresh.u, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
        if (fresh.u.itemsize != 8 || !fresh.u.format || strcmp(fresh.u.format, "d") != 0) {
            PyBuffer_Release(&fresh.u);
            return PyErr_Format(PyExc_TypeError, "set_loss: uniforms must be contiguous float64");
        }
        fresh.n = fresh.u.len / 8;
    }
    fresh.p = prob;
    Loss *l = out ? &p->loss_out : &p->loss_in;
    fresh.seen = l->seen;                 /* counters carry over until taken */
    fresh.dropped = l->dropped;
    loss_clear(l);
    *l = fresh;
    Py_RETURN_NONE;
}

static PyObject *Engine_loss_used(Engine *e, PyObject *args) {
    long no;
    int out;
    if (!PyArg_ParseTuple(args, "lp", &no, &out)) return NULL;
    EPort *p = engine_port(e, no);
    if (!p) return PyErr_Format(PyExc_KeyError, "loss_used: no port %ld", no);
    return PyLong_FromSsize_t(out ? p->loss_out.pos : p->loss_in.pos);
}

static PyObject *Engine_take_loss_counters(Engine *e, PyObject *unused) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int i = 0; i < e->nports; i++) {
        EPort *p = &e->ports[i];
        if (!(p->loss_in.seen || p->loss_out.seen)) continue;
        PyObject *k = PyLong_FromLong(p->no);
        PyObject *v = Py_BuildValue("(LLLL)", p->loss_in.seen, p->loss_in.dropped,
                                    p->loss_out.seen, p->loss_out.dropped);
        if (!k || !v || PyDict_SetItem(d, k, v) < 0) {
            Py_XDECREF(k); Py_XDECREF(v); Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(v);
        p->loss_in.seen = p->loss_in.dropped = p->loss_out.seen = p->loss_out.dropped = 0;
    }
    return d;
}

static PyMethodDef Engine_methods[] = {
    {"set_loss", (PyCFunction)Engine_set_loss, METH_VARARGS,
     "set_loss(port_no, egress, probability, uniforms float64 or None): drop frames with u < p, "
     "one uniform per frame from this block (a new block starts at its first)"},
    {"loss_used", (PyCFunction)Engine_loss_used, METH_VARARGS,
     "loss_used(port_no, egress) -> uniforms taken from the current block"},
    {"take_loss_counters", (PyCFunction)Engine_take_loss_counters, METH_NOARGS,
     "take_loss_counters() -> {port: (in_seen, in_dropped, out_seen, out_dropped)} since the last call"},
    {"run", (PyCFunction)Engine_run, METH_VARARGS,
     "run(max_per_ring, program, api, args[, ts]) -> frames read, or (frames read, [(port, errno)])"},
    {"set_pcap", (PyCFunction)Engine_set_pcap, METH_O,
     "set_pcap({port_no: (snaplen_in, snaplen_out)} or None): record frames as pcap records"},
    {"take_pcap", (PyCFunction)Engine_take_pcap, METH_NOARGS,
     "take_pcap() -> [(port_no, in_records, in_frames, out_records, out_frames)] since the last call"},
    {"set_l2", (PyCFunction)Engine_set_l2, METH_VARARGS,
     "set_l2(table, flood, flood_ports): the forward program's table"},
    {"set_down", (PyCFunction)Engine_set_down, METH_O, "set_down(port_no): drop what goes to it"},
    {"take_counters", (PyCFunction)Engine_take_counters, METH_NOARGS,
     "take_counters() -> ({port: (rx, rx_bytes, tx, tx_bytes, tx_dropped)}, forward counters, bad_port)"},
    {NULL}};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "testbed.switch.soft._pktio.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The soft switch loop's per-frame work over its receive rings, compiled.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
};

static PyMethodDef module_methods[] = {
    {"wait_any", wait_any, METH_VARARGS, "wait_any(rings, spin_ns) -> bool: a frame is ready (shaped: due)"},
    {"pcap_records", pcap_records, METH_VARARGS,
     "pcap_records(frames, ts, snaplen) -> bytes: the pcap records the Engine writes"},
    {"send_frames", send_frames, METH_VARARGS,
     "send_frames(fd, frames, start, count) -> sent or -errno (one sendmmsg, MSG_DONTWAIT)"},
    {NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_pktio",
                                       "PACKET_MMAP receive rings and sendmmsg for the soft switch",
                                       -1, module_methods};

PyMODINIT_FUNC PyInit__pktio(void) {
    if (PyType_Ready(&RxRingType) < 0 || PyType_Ready(&EngineType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    Py_INCREF(&RxRingType);
    if (PyModule_AddObject(m, "RxRing", (PyObject *)&RxRingType) < 0) {
        Py_DECREF(&RxRingType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "MAX_SEND", MAX_SEND);
    return m;
}
