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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <linux/if_packet.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SEND 1024

typedef struct {
    PyObject_HEAD
    int fd;
    uint8_t *map;
    size_t map_len;
    unsigned frame_size, frame_nr, head;
    unsigned long long truncated;   /* frames longer than a slot: dropped, counted */
} RxRing;

static inline struct tpacket2_hdr *slot(RxRing *r, unsigned i) {
    return (struct tpacket2_hdr *)(r->map + (size_t)i * r->frame_size);
}

static inline int slot_ready(RxRing *r) {
    return (__atomic_load_n(&slot(r, r->head)->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) != 0;
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
    long long nbytes = 0;
    for (long n = 0; n < max; ) {
        struct tpacket2_hdr *h = slot(self, self->head);
        if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
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
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        self->head = self->head + 1 == self->frame_nr ? 0 : self->head + 1;
    }
    return Py_BuildValue("(NL)", out, nbytes);
}

static PyObject *RxRing_ready(RxRing *self, PyObject *unused) {
    return PyBool_FromLong(self->map && slot_ready(self));
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
    {"ready", (PyCFunction)RxRing_ready, METH_NOARGS, "a frame waits in the ring"},
    {"close", (PyCFunction)RxRing_close, METH_NOARGS, "unmap the ring (the socket stays open)"},
    {NULL}};

static PyGetSetDef RxRing_getset[] = {
    {"truncated", (getter)RxRing_get_truncated, NULL, "frames dropped: longer than a slot", NULL},
    {"frames", (getter)RxRing_get_frames, NULL, "slots in the ring", NULL},
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
            found = slot_ready((RxRing *)items[i]);
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

static PyMethodDef module_methods[] = {
    {"wait_any", wait_any, METH_VARARGS, "wait_any(rings, spin_ns) -> bool: a frame is ready"},
    {"send_frames", send_frames, METH_VARARGS,
     "send_frames(fd, frames, start, count) -> sent or -errno (one sendmmsg, MSG_DONTWAIT)"},
    {NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_pktio",
                                       "PACKET_MMAP receive rings and sendmmsg for the soft switch",
                                       -1, module_methods};

PyMODINIT_FUNC PyInit__pktio(void) {
    if (PyType_Ready(&RxRingType) < 0)
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
    PyModule_AddIntConstant(m, "MAX_SEND", MAX_SEND);
    return m;
}
