/* The INA worker's per-value and per-packet loops in C (hosts/ina/hostpath.py
 * loads it; the numpy code in hosts/ina/ is the reference these must match
 * bit for bit: tests/unit/test_ina_hostpath.py).
 *
 *   quantize(src, k, lim, dst) -> n_saturated | -1 - first_nonfinite_index
 *       dst[i] = clip(rint(double(src[i]) * 2^k), -lim, lim) as int32 (src: float32
 *       or float64 buffer); fixed_point.quantize(..., "saturate").
 *   build_run(buf, ints, lo, hi, seq0, n, window, job, worker, op, last, exps, exp)
 *       n packets (header + 64 big-endian lanes, PKT_SIZE apart) of the values
 *       ints[lo:hi], seqs seq0.., the run's last packet carrying `last` values;
 *       header exponents exps[i] (int64 buffer) or `exp` when exps is None;
 *       chunks.build_packets for a run of n > 1.
 *   accept_block(rec, lens, n, job, window, hseq, out_slots, out_rows)
 *       -> (accepted, foreign, duplicates): the receive.py burst check
 *       (valid result of this job, head seq of its slot, first copy in the burst).
 *   rtt_fold(srtt, rttvar, rtts) -> (srtt, rttvar): Jacobson/Karels over samples.
 *   scatter(rec, rows, dst, dst_rows): dst[dst_rows[i]] = the 64 lanes of rec row
 *       rows[i], byte-swapped (receive.py's h.ints2d[...] = rec["v"][rows]).
 *   from_fixed(ints, k, dst): dst = float32(ints * 2^-k) (fixed_point.from_fixed).
 *
 * Built by scripts/build_fastpath.py (make setup) with -ffp-contract=off, so
 * double arithmetic rounds as numpy/Python's does. Wire layout: testbed/wire.py
 * (constants() lets hostpath.py check it). */
#define _GNU_SOURCE            /* recvmmsg, sendmmsg, ppoll */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define INA_HLEN 16
#define LANES 64
#define PKT_SIZE (INA_HLEN + 4 * LANES)
#define RX_STRIDE 320
#define INA_VERSION 1
#define FLAG_RESULT 0x01

static inline void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline uint32_t get_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static int get_buf(PyObject *o, Py_buffer *b, int writable, const char *what) {
    if (PyObject_GetBuffer(o, b, (writable ? PyBUF_WRITABLE : 0) | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Format(PyExc_TypeError, "_hostpath: %s must be a C-contiguous%s buffer", what,
                     writable ? " writable" : "");
        return -1;
    }
    return 0;
}

static int fmt_is(Py_buffer *b, char c, Py_ssize_t size) {
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    return f[0] == c && f[1] == 0 && b->itemsize == size;
}

static PyObject *quantize(PyObject *self, PyObject *args) {
    PyObject *so, *dobj;
    int k;
    double lim;
    if (!PyArg_ParseTuple(args, "OidO", &so, &k, &lim, &dobj)) return NULL;
    Py_buffer s, d;
    if (get_buf(so, &s, 0, "src") < 0) return NULL;
    if (get_buf(dobj, &d, 1, "dst") < 0) { PyBuffer_Release(&s); return NULL; }
    int is32 = fmt_is(&s, 'f', 4), is64 = fmt_is(&s, 'd', 8);
    Py_ssize_t n = s.len / (s.itemsize ? s.itemsize : 1);
    if ((!is32 && !is64) || !fmt_is(&d, 'i', 4) || d.len / 4 != n) {
        PyBuffer_Release(&s); PyBuffer_Release(&d);
        PyErr_SetString(PyExc_TypeError, "_hostpath.quantize: src float32/float64, dst int32 of the same length");
        return NULL;
    }
    int32_t *out = (int32_t *)d.buf;
    long long nsat = 0, bad = -1;
    /* x * 2^k is exact (correctly rounded where it underflows) as ldexp is, when
     * 2^k is a normal double; rint by the 1.5 x 2^52 trick (round to nearest even,
     * the default mode) for |v| < 2^50; anything larger is above lim (< 2^32). */
    const int exact = k >= -1022 && k <= 1023;
    const double scale = exact ? ldexp(1.0, k) : 0.0, magic = 6755399441055744.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double a = is32 ? (double)((const float *)s.buf)[i] : ((const double *)s.buf)[i];
        if (!isfinite(a)) { bad = i; break; }
        double v = exact ? a * scale : ldexp(a, k);
        if (fabs(v) < 0x1p50) {
            v = (v + magic) - magic;
            if (fabs(v) <= lim) { out[i] = (int32_t)v; continue; }
        }
        out[i] = (int32_t)(v < 0 ? -lim : lim);
        nsat++;
    }
    PyBuffer_Release(&s); PyBuffer_Release(&d);
    return PyLong_FromLongLong(bad >= 0 ? -1 - bad : nsat);
}

static PyObject *build_run(PyObject *self, PyObject *args) {
    PyObject *bo, *io, *eo;
    Py_ssize_t lo, hi, n;
    unsigned long long seq0;
    unsigned int window, job, worker, op, last;
    int exp;
    if (!PyArg_ParseTuple(args, "OOnnKnIIIIIOi", &bo, &io, &lo, &hi, &seq0, &n, &window, &job,
                          &worker, &op, &last, &eo, &exp))
        return NULL;
    Py_buffer b, iv, ev = {0};
    int have_e = eo != Py_None;
    if (get_buf(bo, &b, 1, "buf") < 0) return NULL;
    if (get_buf(io, &iv, 0, "ints") < 0) { PyBuffer_Release(&b); return NULL; }
    if (have_e && get_buf(eo, &ev, 0, "exps") < 0) {
        PyBuffer_Release(&b); PyBuffer_Release(&iv); return NULL;
    }
    const char *err = NULL;
    if (b.len < n * PKT_SIZE) err = "buf shorter than n packets";
    else if (!fmt_is(&iv, 'i', 4) || lo < 0 || hi > iv.len / 4 || hi < lo || hi - lo > n * LANES)
        err = "ints int32 holding [lo, hi)";
    else if (have_e && (!fmt_is(&ev, 'l', 8) && !fmt_is(&ev, 'q', 8))) err = "exps int64";
    else if (have_e && ev.len / 8 < n) err = "exps shorter than n";
    else if (window == 0 || last > LANES) err = "window >= 1, last <= 64";
    if (err) {
        PyBuffer_Release(&b); PyBuffer_Release(&iv);
        if (have_e) PyBuffer_Release(&ev);
        PyErr_Format(PyExc_ValueError, "_hostpath.build_run: %s", err);
        return NULL;
    }
    uint8_t *p = (uint8_t *)b.buf;
    const int32_t *vals = (const int32_t *)iv.buf + lo;
    const int64_t *exps = have_e ? (const int64_t *)ev.buf : NULL;
    Py_ssize_t left = hi - lo;
    for (Py_ssize_t i = 0; i < n; i++, p += PKT_SIZE) {
        uint64_t seq = seq0 + (uint64_t)i;
        unsigned cnt = i == n - 1 ? last : LANES;
        p[0] = INA_VERSION; p[1] = (uint8_t)op; p[2] = 0; p[3] = (uint8_t)job;
        uint32_t slot = (uint32_t)(seq % window);
        p[4] = (uint8_t)(slot >> 8); p[5] = (uint8_t)slot;
        p[6] = (uint8_t)((seq / window) & 1); p[7] = (uint8_t)worker;
        put_be32(p + 8, (uint32_t)seq);
        p[12] = (uint8_t)cnt;
        p[13] = (uint8_t)(int8_t)(have_e ? exps[i] : exp);
        p[14] = p[15] = 0;
        Py_ssize_t take = left < LANES ? left : LANES;
        uint8_t *q = p + INA_HLEN;
        for (Py_ssize_t j = 0; j < take; j++) {      /* vectorizes: a byte swap per lane */
            uint32_t v = __builtin_bswap32((uint32_t)vals[j]);
            memcpy(q + 4 * j, &v, 4);
        }
        if (take < LANES) memset(q + 4 * take, 0, 4 * (LANES - take));
        vals += take;
        left -= take;
    }
    PyBuffer_Release(&b); PyBuffer_Release(&iv);
    if (have_e) PyBuffer_Release(&ev);
    Py_RETURN_NONE;
}

static PyObject *accept_block(PyObject *self, PyObject *args) {
    PyObject *ro, *lo_, *ho, *so, *wo;
    Py_ssize_t n;
    unsigned int job, window;
    if (!PyArg_ParseTuple(args, "OOnIIOOO", &ro, &lo_, &n, &job, &window, &ho, &so, &wo)) return NULL;
    Py_buffer r, l, h, s, w;
    if (get_buf(ro, &r, 0, "rec") < 0) return NULL;
    if (get_buf(lo_, &l, 0, "lens") < 0) { PyBuffer_Release(&r); return NULL; }
    if (get_buf(ho, &h, 0, "hseq") < 0) { PyBuffer_Release(&r); PyBuffer_Release(&l); return NULL; }
    if (get_buf(so, &s, 1, "out_slots") < 0) {
        PyBuffer_Release(&r); PyBuffer_Release(&l); PyBuffer_Release(&h); return NULL;
    }
    if (get_buf(wo, &w, 1, "out_rows") < 0) {
        PyBuffer_Release(&r); PyBuffer_Release(&l); PyBuffer_Release(&h); PyBuffer_Release(&s); return NULL;
    }
    PyObject *res = NULL;
    if (r.len < n * RX_STRIDE || l.len / 8 < n || l.itemsize != 8 || h.itemsize != 8
            || h.len / 8 < window || s.len / 8 < n || w.len / 8 < n || s.itemsize != 8 || w.itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "_hostpath.accept_block: buffer sizes (rec n x 320, "
                                          "int64 lens/out >= n, int64 hseq >= window)");
        goto done;
    }
    const uint8_t *rec = (const uint8_t *)r.buf;
    const int64_t *lens = (const int64_t *)l.buf, *hseq = (const int64_t *)h.buf;
    int64_t *oslot = (int64_t *)s.buf, *orow = (int64_t *)w.buf;
    /* a slot accepted earlier in this burst: its later copies are duplicates */
    uint8_t stack_seen[1024], *seen = window <= sizeof stack_seen ? stack_seen : PyMem_Calloc(window, 1);
    if (!seen) { PyErr_NoMemory(); goto done; }
    if (seen == stack_seen) memset(seen, 0, window);
    Py_ssize_t k = 0, foreign = 0, dups = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *p = rec + i * RX_STRIDE;
        unsigned slot = ((unsigned)p[4] << 8) | p[5], cnt = p[12];
        if (p[0] != INA_VERSION || !(p[2] & FLAG_RESULT) || p[3] != job || slot >= window
                || cnt > LANES || lens[i] < INA_HLEN + 4 * (int64_t)cnt) {
            foreign++;
            continue;
        }
        if (hseq[slot] != (int64_t)get_be32(p + 8) || seen[slot]) {
            dups++;
            continue;
        }
        seen[slot] = 1;
        oslot[k] = slot;
        orow[k++] = i;
    }
    if (seen != stack_seen) PyMem_Free(seen);
    res = Py_BuildValue("nnn", k, foreign, dups);
done:
    PyBuffer_Release(&r); PyBuffer_Release(&l); PyBuffer_Release(&h);
    PyBuffer_Release(&s); PyBuffer_Release(&w);
    return res;
}

static PyObject *rtt_fold(PyObject *self, PyObject *args) {
    double srtt, var;
    PyObject *ro;
    if (!PyArg_ParseTuple(args, "ddO", &srtt, &var, &ro)) return NULL;
    Py_buffer r;
    if (get_buf(ro, &r, 0, "rtts") < 0) return NULL;
    if (!fmt_is(&r, 'd', 8)) {
        PyBuffer_Release(&r);
        PyErr_SetString(PyExc_TypeError, "_hostpath.rtt_fold: rtts float64");
        return NULL;
    }
    const double *x = (const double *)r.buf;
    for (Py_ssize_t i = 0; i < r.len / 8; i++) {
        var += 0.25 * (fabs(srtt - x[i]) - var);
        srtt += 0.125 * (x[i] - srtt);
    }
    PyBuffer_Release(&r);
    return Py_BuildValue("dd", srtt, var);
}

static PyObject *scatter(PyObject *self, PyObject *args) {
    PyObject *ro, *wo, *do_, *go;
    if (!PyArg_ParseTuple(args, "OOOO", &ro, &wo, &do_, &go)) return NULL;
    Py_buffer r, w, d, g;
    if (get_buf(ro, &r, 0, "rec") < 0) return NULL;
    if (get_buf(wo, &w, 0, "rows") < 0) { PyBuffer_Release(&r); return NULL; }
    if (get_buf(do_, &d, 1, "dst") < 0) { PyBuffer_Release(&r); PyBuffer_Release(&w); return NULL; }
    if (get_buf(go, &g, 0, "dst_rows") < 0) {
        PyBuffer_Release(&r); PyBuffer_Release(&w); PyBuffer_Release(&d); return NULL;
    }
    PyObject *res = NULL;
    Py_ssize_t k = w.len / 8, nrec = r.len / RX_STRIDE, ndst = d.len / (4 * LANES);
    if (w.itemsize != 8 || g.itemsize != 8 || g.len / 8 != k || d.itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "_hostpath.scatter: int64 rows/dst_rows of one length, int32 dst");
        goto done;
    }
    const int64_t *rows = (const int64_t *)w.buf, *drows = (const int64_t *)g.buf;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (rows[i] < 0 || rows[i] >= nrec || drows[i] < 0 || drows[i] >= ndst) {
            PyErr_SetString(PyExc_IndexError, "_hostpath.scatter: row out of range");
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        const uint8_t *p = (const uint8_t *)r.buf + rows[i] * RX_STRIDE + INA_HLEN;
        int32_t *q = (int32_t *)d.buf + drows[i] * LANES;
        for (int j = 0; j < LANES; j++) {
            uint32_t v;
            memcpy(&v, p + 4 * j, 4);
            q[j] = (int32_t)__builtin_bswap32(v);
        }
    }
    Py_INCREF(Py_None);
    res = Py_None;
done:
    PyBuffer_Release(&r); PyBuffer_Release(&w); PyBuffer_Release(&d); PyBuffer_Release(&g);
    return res;
}

static PyObject *from_fixed(PyObject *self, PyObject *args) {
    PyObject *so, *dobj;
    int k;
    if (!PyArg_ParseTuple(args, "OiO", &so, &k, &dobj)) return NULL;
    Py_buffer s, d;
    if (get_buf(so, &s, 0, "ints") < 0) return NULL;
    if (get_buf(dobj, &d, 1, "dst") < 0) { PyBuffer_Release(&s); return NULL; }
    Py_ssize_t n = s.len / 4;
    if (!fmt_is(&s, 'i', 4) || !fmt_is(&d, 'f', 4) || d.len / 4 != n) {
        PyBuffer_Release(&s); PyBuffer_Release(&d);
        PyErr_SetString(PyExc_TypeError, "_hostpath.from_fixed: int32 ints, float32 dst of the same length");
        return NULL;
    }
    /* int32 * 2^-k is exact in double (ldexp's value) when 2^-k is normal; then
     * rounded once to float32, as numpy's ldexp(float64).astype(float32). */
    const int exact = -k >= -1022 && -k <= 1023;
    const double scale = exact ? ldexp(1.0, -k) : 0.0;
    const int32_t *x = (const int32_t *)s.buf;
    float *out = (float *)d.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = (float)(exact ? (double)x[i] * scale : ldexp((double)x[i], -k));
    PyBuffer_Release(&s); PyBuffer_Release(&d);
    Py_RETURN_NONE;
}

/* ---- the steady-state receive/send loop (hosts/ina/hostloop.py) -------------------
 * Loop(hseq, hci, head_tag, first, order, dl, rto, retries, sc, cnt, txo, txl, window, job,
 *      fd, dest, rec, lens)
 *   holds the client's per-slot arrays (hosts/ina/window.py, timers.py) for its
 *   life; `sc` float64 carries the timer scalars in and out (SC_* below), `cnt`
 *   int64 the counters (CNT_*), txo/txl (int64, >= batch) a burst's sends when
 *   the caller sends them. fd >= 0: a UDP socket sending to `dest` (16-byte
 *   sockaddr_in), received into `rec` (batch x RX_STRIDE bytes, lens int64).
 * set_run(tag, seq0, n, c0, op, last_ci, last, buf, dst) / clear_run()
 *   the run (Seg) whose results this loop takes in: its packets (buf) and the
 *   handle's int32 rows (dst).
 * burst(rec, lens, n, vec_min, clock, lat) -> (status, nsend)
 *   one received burst, as receive.py takes it in (n >= vec_min: the burst
 *   path of _on_block_compiled/_accept_many; below: _on_packet per datagram),
 *   when every accepted result heads a slot of the run and its slot's next chunk
 *   is in the run (so no handle completes, no run ends): then status 0, the
 *   next chunks armed and their (offset, length) in txo/txl[:nsend]. Anything
 *   else (another run's result, a mismatch, the run's last window): status 2,
 *   nothing changed, for the Python path. clock: None (CLOCK_MONOTONIC, as
 *   time.monotonic) or the client's clock, read where the Python path reads it.
 * run(stop_at, keep, max_pkts, vec_min, lat, coalesce, gso) -> (status, n, t_empty)
 *   fd mode: recvmmsg bursts into rec, burst() on each, sendmmsg of its sends
 *   (gso=1: runs of equal-length datagrams as UDP GSO messages, below),
 *   until: the socket is empty (keep=0), or with keep=1 until a timer is due
 *   (sc next_dl) or stop_at passes with the socket empty (waiting in ppoll
 *   without the GIL in between), max_pkts taken, or a burst is not the run's
 *   (status 2: n datagrams left in rec/lens for the Python path). t_empty: the
 *   clock before the read that found the socket empty (timers are judged then).
 *   coalesce > 0: nap for about that many answers before reading a trickle (below). */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
/* Datagrams per UDP GSO message: the kernel's UDP_MAX_SEGMENTS is 64 up to Linux 6.8. */
#define GSO_MAX_SEGS 64
#define GSO_CMSG CMSG_SPACE(sizeof(uint16_t))

enum { SC_SRTT, SC_RTTVAR, SC_RACK, SC_RTO_CACHE, SC_NEXT_DL, SC_LAST_RX, SC_PROBES, SC_PROBE_AT,
       SC_SENDS, SC_TIMEOUT, SC_MIN_TIMEOUT, SC_ADAPTIVE, SC_FLOOR_BASE, SC_FLOOR_FRAME, SC_N };
enum { CNT_RESULTS, CNT_SENT, CNT_FOREIGN, CNT_DUPS, CNT_REMAINING, CNT_MAX_EXP, CNT_SEND_ERRORS,
       CNT_BURSTS, CNT_SLEEPS, CNT_NAPS, CNT_GSO_MSGS, CNT_GSO_REFUSED, CNT_N };
/* bursts taken in, ppoll waits, naps, GSO messages sent, GSO messages the kernel refused (diagnostics) */
enum { ST_IDLE = 0, ST_TIMER = 1, ST_OTHER = 2, ST_BUDGET = 3 };
#define NBUF 16                 /* buffers a Loop holds: 14 with a socket */

typedef struct {
    PyObject_HEAD
    Py_buffer bufs[NBUF];
    int nbufs;
    int64_t *hseq, *hci, *tag, *retries, *cnt, *txo, *txl, *lens;
    double *first, *order, *dl, *rto, *sc;
    uint8_t *rec;
    Py_ssize_t W, batch;
    unsigned job;
    int fd;
    struct sockaddr_in dest;
    struct mmsghdr *rh, *sh, *gh;     /* gh: the burst's GSO messages */
    struct iovec *riov, *siov;
    uint8_t *gcm;                      /* their control messages (GSO_CMSG bytes each) */
    int64_t *gfirst;                   /* each GSO message's first datagram */
    uint8_t *seen;
    int64_t *acc_slot, *acc_row;
    /* the run */
    int have_run;
    int64_t rtag, seq0, rn, c0, last_ci, dst_rows;
    unsigned op, last;
    Py_buffer b_buf, b_dst;
    uint8_t *pkts;
    int32_t *dst;
} Loop;

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) / 1e9;
}

/* the clock: -1 on a Python error */
static int read_clock(PyObject *clock, double *now) {
    if (clock == Py_None) { *now = mono_now(); return 0; }
    PyObject *r = PyObject_CallNoArgs(clock);
    if (!r) return -1;
    *now = PyFloat_AsDouble(r);
    Py_DECREF(r);
    return (*now == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static void loop_clear_run(Loop *L) {
    if (L->have_run) { PyBuffer_Release(&L->b_buf); PyBuffer_Release(&L->b_dst); }
    L->have_run = 0;
}

static void loop_dealloc(Loop *L) {
    loop_clear_run(L);
    for (int i = 0; i < L->nbufs; i++) PyBuffer_Release(&L->bufs[i]);
    PyMem_Free(L->rh); PyMem_Free(L->sh); PyMem_Free(L->riov); PyMem_Free(L->siov);
    PyMem_Free(L->gh); PyMem_Free(L->gcm); PyMem_Free(L->gfirst);
    PyMem_Free(L->seen); PyMem_Free(L->acc_slot); PyMem_Free(L->acc_row);
    Py_TYPE(L)->tp_free((PyObject *)L);
}

/* a held buffer of at least `min_items` items of `size` bytes */
static void *hold(Loop *L, PyObject *o, const char *what, Py_ssize_t size, Py_ssize_t min_items) {
    if (L->nbufs >= NBUF) { PyErr_SetString(PyExc_RuntimeError, "_hostpath.Loop: NBUF too small"); return NULL; }
    Py_buffer *b = &L->bufs[L->nbufs];
    if (get_buf(o, b, 1, what) < 0) return NULL;
    L->nbufs++;
    if (b->itemsize != size && !(size == 1)) {
        PyErr_Format(PyExc_TypeError, "_hostpath.Loop: %s needs %zd-byte items", what, size);
        return NULL;
    }
    if (b->len < size * min_items) {
        PyErr_Format(PyExc_ValueError, "_hostpath.Loop: %s shorter than %zd items", what, min_items);
        return NULL;
    }
    return b->buf;
}

static int loop_init(Loop *L, PyObject *args, PyObject *kw) {
    PyObject *o[12], *dest, *reco, *lenso;
    Py_ssize_t W;
    unsigned job;
    int fd;
    if (L->nbufs) { PyErr_SetString(PyExc_RuntimeError, "_hostpath.Loop: initialized twice"); return -1; }
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOnIiOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10], &o[11], &W, &job, &fd, &dest, &reco, &lenso))
        return -1;
    if (W < 1 || W > 0xFFFF) { PyErr_SetString(PyExc_ValueError, "_hostpath.Loop: window 1..65535"); return -1; }
    L->W = W; L->job = job; L->fd = fd;
    if (!(L->hseq = hold(L, o[0], "hseq", 8, W)) || !(L->hci = hold(L, o[1], "hci", 8, W))
            || !(L->tag = hold(L, o[2], "head_tag", 8, W)) || !(L->first = hold(L, o[3], "first", 8, W))
            || !(L->order = hold(L, o[4], "order", 8, W)) || !(L->dl = hold(L, o[5], "dl", 8, W))
            || !(L->rto = hold(L, o[6], "rto", 8, W)) || !(L->retries = hold(L, o[7], "retries", 8, W))
            || !(L->sc = hold(L, o[8], "sc", 8, SC_N)) || !(L->cnt = hold(L, o[9], "cnt", 8, CNT_N)))
        return -1;
    if (!(L->txo = hold(L, o[10], "txo", 8, 1)) || !(L->txl = hold(L, o[11], "txl", 8, 1))) return -1;
    L->batch = L->bufs[L->nbufs - 1].len / 8;
    if (L->bufs[L->nbufs - 2].len / 8 < L->batch) L->batch = L->bufs[L->nbufs - 2].len / 8;
    L->seen = PyMem_Calloc((size_t)W, 1);
    L->acc_slot = PyMem_Calloc((size_t)L->batch, 8);
    L->acc_row = PyMem_Calloc((size_t)L->batch, 8);
    if (!L->seen || !L->acc_slot || !L->acc_row) { PyErr_NoMemory(); return -1; }
    if (fd >= 0) {
        char *d; Py_ssize_t dn;
        if (PyBytes_AsStringAndSize(dest, &d, &dn) < 0) return -1;
        if (dn != sizeof(struct sockaddr_in)) {
            PyErr_SetString(PyExc_ValueError, "_hostpath.Loop: dest must be a 16-byte sockaddr_in");
            return -1;
        }
        memcpy(&L->dest, d, sizeof L->dest);
        if (!(L->rec = hold(L, reco, "rec", 1, RX_STRIDE)) || !(L->lens = hold(L, lenso, "lens", 8, 1)))
            return -1;
        Py_ssize_t nb = L->bufs[L->nbufs - 2].len / RX_STRIDE;
        if (L->bufs[L->nbufs - 1].len / 8 < nb) nb = L->bufs[L->nbufs - 1].len / 8;
        if (nb < L->batch) L->batch = nb;
        L->rh = PyMem_Calloc((size_t)L->batch, sizeof(struct mmsghdr));
        L->sh = PyMem_Calloc((size_t)L->batch, sizeof(struct mmsghdr));
        L->riov = PyMem_Calloc((size_t)L->batch, sizeof(struct iovec));
        L->siov = PyMem_Calloc((size_t)L->batch, sizeof(struct iovec));
        L->gh = PyMem_Calloc((size_t)L->batch, sizeof(struct mmsghdr));
        L->gcm = PyMem_Calloc((size_t)L->batch, GSO_CMSG);
        L->gfirst = PyMem_Calloc((size_t)L->batch, sizeof(int64_t));
        if (!L->rh || !L->sh || !L->riov || !L->siov || !L->gh || !L->gcm || !L->gfirst) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < L->batch; i++) {
            L->riov[i].iov_base = L->rec + i * RX_STRIDE;
            L->riov[i].iov_len = RX_STRIDE;
            L->rh[i].msg_hdr.msg_iov = &L->riov[i];
            L->rh[i].msg_hdr.msg_iovlen = 1;
            L->sh[i].msg_hdr.msg_name = &L->dest;
            L->sh[i].msg_hdr.msg_namelen = sizeof L->dest;
            L->sh[i].msg_hdr.msg_iov = &L->siov[i];
            L->sh[i].msg_hdr.msg_iovlen = 1;
            L->gh[i].msg_hdr.msg_name = &L->dest;
            L->gh[i].msg_hdr.msg_namelen = sizeof L->dest;
            struct cmsghdr *c = (struct cmsghdr *)(L->gcm + i * GSO_CMSG);
            c->cmsg_level = SOL_UDP;
            c->cmsg_type = UDP_SEGMENT;
            c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        }
    }
    return 0;
}

static PyObject *loop_set_run(Loop *L, PyObject *args) {
    long long tag, seq0, n, c0, last_ci;
    unsigned op, last;
    PyObject *bo, *dob;
    if (!PyArg_ParseTuple(args, "LLLLILIOO", &tag, &seq0, &n, &c0, &op, &last_ci, &last, &bo, &dob))
        return NULL;
    loop_clear_run(L);
    if (get_buf(bo, &L->b_buf, 0, "buf") < 0) return NULL;
    if (get_buf(dob, &L->b_dst, 1, "dst") < 0) { PyBuffer_Release(&L->b_buf); return NULL; }
    if (L->b_buf.len < n * PKT_SIZE || L->b_dst.itemsize != 4 || last > LANES || n < 1 || c0 < 0) {
        PyBuffer_Release(&L->b_buf); PyBuffer_Release(&L->b_dst);
        PyErr_SetString(PyExc_ValueError, "_hostpath.Loop.set_run: buf n packets, dst int32 rows, last <= 64");
        return NULL;
    }
    L->have_run = 1;
    L->rtag = tag; L->seq0 = seq0; L->rn = n; L->c0 = c0; L->op = op; L->last_ci = last_ci; L->last = last;
    L->pkts = (uint8_t *)L->b_buf.buf;
    L->dst = (int32_t *)L->b_dst.buf;
    L->dst_rows = L->b_dst.len / (4 * LANES);
    Py_RETURN_NONE;
}

static PyObject *loop_clear_run_py(Loop *L, PyObject *noargs) {
    loop_clear_run(L);
    Py_RETURN_NONE;
}

static inline unsigned want_count(Loop *L, int64_t ci) { return ci == L->last_ci ? L->last : LANES; }

/* is the datagram a result of this job the window can parse (receive.py's checks)? */
static inline int valid_result(Loop *L, const uint8_t *p, int64_t len, unsigned *slot) {
    *slot = ((unsigned)p[4] << 8) | p[5];
    unsigned cnt = p[12];
    return p[0] == INA_VERSION && (p[2] & FLAG_RESULT) && p[3] == L->job && *slot < (unsigned)L->W
           && cnt <= LANES && len >= INA_HLEN + 4 * (int64_t)cnt;
}

/* an accepted result the loop can take: its slot's head is a chunk of the run whose
 * next chunk in the slot is in the run too, and op/count are the chunk's */
static inline int ours(Loop *L, const uint8_t *p, unsigned s) {
    int64_t ci = L->hci[s];
    return L->tag[s] == L->rtag && p[1] == L->op && p[12] == want_count(L, ci) && ci + L->W < L->rn
           && L->c0 + ci < L->dst_rows;
}

static inline void fold_rtt(double *sc, double r) {   /* timers.update_rtt's arithmetic */
    if (isnan(sc[SC_SRTT])) { sc[SC_SRTT] = r; sc[SC_RTTVAR] = r / 2; }
    else {
        sc[SC_RTTVAR] += 0.25 * (fabs(sc[SC_SRTT] - r) - sc[SC_RTTVAR]);
        sc[SC_SRTT] += 0.125 * (r - sc[SC_SRTT]);
    }
}

static inline void refresh_rto(double *sc) {
    if (sc[SC_ADAPTIVE] != 0) {
        double x = sc[SC_SRTT] + 4 * sc[SC_RTTVAR];
        double lo = sc[SC_MIN_TIMEOUT] >= x ? sc[SC_MIN_TIMEOUT] : x;       /* max(min_timeout_s, x) */
        sc[SC_RTO_CACHE] = lo < sc[SC_TIMEOUT] ? lo : sc[SC_TIMEOUT];        /* min(timeout_s, .) */
    }
}

static inline void copy_lanes(int32_t *q, const uint8_t *p, unsigned count) {
    for (unsigned j = 0; j < count; j++) {
        uint32_t v;
        memcpy(&v, p + 4 * j, 4);
        q[j] = (int32_t)__builtin_bswap32(v);
    }
}

static inline int64_t on_wire(Loop *L) {
    int64_t a = 0;
    for (Py_ssize_t s = 0; s < L->W; s++) a += L->hseq[s] >= 0;
    return a;
}

/* put the next chunk of slot s (chunk ci of the run, already in hci) on the wire:
 * transport._start_one / _start_many's arming, rto as timers.first_rto */
static inline void arm(Loop *L, int64_t s, int64_t ci, double now, double rto, int64_t *nsend) {
    L->first[s] = now; L->order[s] = L->sc[SC_SENDS]++; L->rto[s] = rto; L->dl[s] = now + rto; L->retries[s] = 0;
    L->hseq[s] = L->seq0 + ci;
    L->txo[*nsend] = ci * PKT_SIZE;
    L->txl[*nsend] = INA_HLEN + 4 * (int64_t)want_count(L, ci);
    (*nsend)++;
}

static inline int append_rtt(PyObject *lat, double r) {
    PyObject *f = PyFloat_FromDouble(r);
    if (!f) return -1;
    int e = PyList_Append(lat, f);
    Py_DECREF(f);
    return e;
}

/* timers.rack_timers: a chunk sent before the latest answered one, never resent, is
 * lost 1.25 round trips after it was sent (RACK's reordering timer) */
static void rack_timers(Loop *L) {
    double *sc = L->sc;
    if (isnan(sc[SC_SRTT])) return;
    double rack = sc[SC_RACK], lag = 1.25 * sc[SC_SRTT], next = INFINITY;
    int any = 0;
    for (Py_ssize_t s = 0; s < L->W; s++) {
        if (!(L->order[s] < rack) || L->retries[s] != 0 || !(L->dl[s] < INFINITY)) continue;
        double d = L->first[s] + lag;
        if (d < L->dl[s]) L->dl[s] = d;
        if (L->dl[s] < next) next = L->dl[s];
        any = 1;
    }
    if (any && next < sc[SC_NEXT_DL]) sc[SC_NEXT_DL] = next;
}

/* 0: taken in, 2: not the run's (nothing changed), -1: Python error */
static int take_burst(Loop *L, const uint8_t *rec, const int64_t *lens, Py_ssize_t n, Py_ssize_t vec_min,
                    PyObject *clock, PyObject *lat, int64_t *nsend) {
    int64_t *cnt = L->cnt;
    double *sc = L->sc;
    const int64_t W = L->W;
    *nsend = 0;
    if (!L->have_run || n > L->batch) return ST_OTHER;
    Py_ssize_t k = 0, foreign = 0, dups = 0;
    int other = 0;
    if (n >= vec_min) {
        /* _on_block_compiled: accept_block's verdicts, all against the burst's start */
        for (Py_ssize_t i = 0; i < n; i++) {
            const uint8_t *p = rec + i * RX_STRIDE;
            unsigned s;
            if (!valid_result(L, p, lens[i], &s)) { foreign++; continue; }
            if (L->hseq[s] != (int64_t)get_be32(p + 8) || L->seen[s]) { dups++; continue; }
            L->seen[s] = 1;
            L->acc_slot[k] = s;
            L->acc_row[k++] = i;
            if (!ours(L, p, s)) other = 1;
        }
        for (Py_ssize_t j = 0; j < k; j++) L->seen[L->acc_slot[j]] = 0;
        if (other) return ST_OTHER;
        cnt[CNT_FOREIGN] += foreign;
        cnt[CNT_DUPS] += dups;
        if (!k) return 0;
        double now;
        if (read_clock(clock, &now) < 0) return -1;
        sc[SC_LAST_RX] = now;
        cnt[CNT_RESULTS] += k;
        /* timers.answered_many */
        int64_t fresh = 0;
        double sent = -INFINITY;
        for (Py_ssize_t j = 0; j < k; j++) {
            int64_t s = L->acc_slot[j];
            if (append_rtt(lat, now - L->first[s]) < 0) return -1;
            fresh += L->retries[s] == 0;
        }
        if (fresh) {
            for (Py_ssize_t j = 0; j < k; j++) {
                int64_t s = L->acc_slot[j];
                if (L->retries[s] != 0) continue;
                fold_rtt(sc, now - L->first[s]);
                if (L->order[s] > sent) sent = L->order[s];
            }
            refresh_rto(sc);
            sc[SC_PROBES] = 1; sc[SC_PROBE_AT] = -INFINITY;
        } else {
            sent = sc[SC_RACK];
            double p = k < 16 ? sc[SC_PROBES] * (double)(1 << k) : (double)W;
            sc[SC_PROBES] = p < (double)W ? p : (double)W;
            sc[SC_PROBE_AT] = -INFINITY;
        }
        if (sent > sc[SC_RACK]) sc[SC_RACK] = sent;
        /* receive._accept_many: values, exponent, then the slots' next chunks out */
        int64_t e = -129;
        for (Py_ssize_t j = 0; j < k; j++) {
            int64_t s = L->acc_slot[j];
            const uint8_t *p = rec + L->acc_row[j] * RX_STRIDE;
            L->dl[s] = INFINITY;
            L->hseq[s] = -1;
            copy_lanes(L->dst + (L->c0 + L->hci[s]) * LANES, p + INA_HLEN, LANES);
            if ((int8_t)p[13] > e) e = (int8_t)p[13];
        }
        if (e > cnt[CNT_MAX_EXP]) cnt[CNT_MAX_EXP] = e;
        cnt[CNT_REMAINING] -= k;
        double rto = sc[SC_RTO_CACHE], base = sc[SC_FLOOR_BASE], frame = sc[SC_FLOOR_FRAME];
        int64_t ahead = frame != 0 ? on_wire(L) : 0;
        double min_rto = INFINITY;
        for (Py_ssize_t j = 0; j < k; j++) {
            int64_t s = L->acc_slot[j], ci = L->hci[s] + W;
            double r = rto;
            if (frame != 0) {
                double f = base + frame * (double)(ahead + j);
                r = rto >= f ? rto : f;
            }
            if (r < min_rto) min_rto = r;
            L->hci[s] = ci;
            arm(L, s, ci, now, r, nsend);
        }
        double d = now + min_rto;
        if (d < sc[SC_NEXT_DL]) sc[SC_NEXT_DL] = d;
        cnt[CNT_SENT] += k;
        return 0;
    }
    /* _on_packet, one datagram after the other (each result's verdict against the
     * slot as the ones before left it): a slot answered twice in one burst goes to Python */
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *p = rec + i * RX_STRIDE;
        unsigned s;
        if (lens[i] < INA_HLEN || !valid_result(L, p, lens[i], &s)) continue;
        if (L->seen[s]) { other = 1; continue; }
        if (L->hseq[s] != (int64_t)get_be32(p + 8)) continue;
        if (!ours(L, p, s)) other = 1;
        L->seen[s] = 1;
        L->acc_slot[k++] = s;
    }
    for (Py_ssize_t j = 0; j < k; j++) L->seen[L->acc_slot[j]] = 0;
    if (other) return ST_OTHER;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *p = rec + i * RX_STRIDE;
        unsigned s;
        if (lens[i] < INA_HLEN || !valid_result(L, p, lens[i], &s)) { cnt[CNT_FOREIGN]++; continue; }
        if (L->hseq[s] != (int64_t)get_be32(p + 8)) { cnt[CNT_DUPS]++; continue; }
        double now;
        if (read_clock(clock, &now) < 0) return -1;
        sc[SC_LAST_RX] = now;
        L->hseq[s] = -1;
        cnt[CNT_RESULTS]++;
        /* timers.answered_one */
        L->dl[s] = INFINITY;
        double first = L->first[s];
        if (append_rtt(lat, now - first) < 0) return -1;
        if (L->retries[s] == 0) {
            fold_rtt(sc, now - first);
            refresh_rto(sc);
            sc[SC_PROBES] = 1; sc[SC_PROBE_AT] = -INFINITY;
            if (L->order[s] > sc[SC_RACK]) sc[SC_RACK] = L->order[s];
        } else {
            double q = sc[SC_PROBES] * 2;
            sc[SC_PROBES] = q < (double)W ? q : (double)W;
            sc[SC_PROBE_AT] = -INFINITY;
        }
        /* _advance -> _start_one, then the values */
        int64_t ci = L->hci[s], nci = ci + W;
        double rto = sc[SC_RTO_CACHE], frame = sc[SC_FLOOR_FRAME];
        if (frame != 0) {
            double f = sc[SC_FLOOR_BASE] + frame * (double)on_wire(L);
            rto = rto >= f ? rto : f;
        }
        L->hci[s] = nci;
        arm(L, s, nci, now, rto, nsend);
        if (now + rto < sc[SC_NEXT_DL]) sc[SC_NEXT_DL] = now + rto;
        cnt[CNT_SENT]++;
        copy_lanes(L->dst + (L->c0 + ci) * LANES, p + INA_HLEN, p[12]);
        if ((int8_t)p[13] > cnt[CNT_MAX_EXP]) cnt[CNT_MAX_EXP] = (int8_t)p[13];
        cnt[CNT_REMAINING]--;
    }
    return 0;
}

/* One received burst (take_burst), then RACK's timers, as receive.py after each burst. */
static int do_burst(Loop *L, const uint8_t *rec, const int64_t *lens, Py_ssize_t n, Py_ssize_t vec_min,
                    PyObject *clock, PyObject *lat, int64_t *nsend) {
    int st = take_burst(L, rec, lens, n, vec_min, clock, lat, nsend);
    if (st == 0) rack_timers(L);
    return st;
}

static PyObject *loop_burst(Loop *L, PyObject *args) {
    PyObject *ro, *lo_, *clock, *lat;
    Py_ssize_t n, vec_min;
    if (!PyArg_ParseTuple(args, "OOnnOO!", &ro, &lo_, &n, &vec_min, &clock, &PyList_Type, &lat)) return NULL;
    Py_buffer r, l;
    if (get_buf(ro, &r, 0, "rec") < 0) return NULL;
    if (get_buf(lo_, &l, 0, "lens") < 0) { PyBuffer_Release(&r); return NULL; }
    PyObject *res = NULL;
    if (n < 0 || r.len < n * RX_STRIDE || l.itemsize != 8 || l.len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "_hostpath.Loop.burst: rec n x 320 bytes, int64 lens >= n");
    } else {
        int64_t nsend = 0;
        int st = do_burst(L, (const uint8_t *)r.buf, (const int64_t *)l.buf, n, vec_min, clock, lat, &nsend);
        if (st >= 0) res = Py_BuildValue("iL", st, (long long)nsend);
    }
    PyBuffer_Release(&r); PyBuffer_Release(&l);
    return res;
}

/* sendmmsg of datagrams first..first+n-1 of the burst (siov), one per message;
 * _mmsg.MmsgUdp.send's error handling */
static int send_plain(Loop *L, int64_t first, int64_t n) {
    int64_t done = 0;
    while (done < n) {
        int r = sendmmsg(L->fd, L->sh + first + done, (unsigned)(n - done), 0);
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            if (e == EINTR) continue;
            if (e == EBADF) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
            r = 1;                               /* a refused datagram: a loss the timers cover */
            L->cnt[CNT_SEND_ERRORS]++;
        }
        done += r;
    }
    return 0;
}

/* The burst's datagrams as UDP GSO messages (_mmsg.gso_groups' rule): each run of
 * equal lengths, at most GSO_MAX_SEGS long, is one message the kernel cuts back
 * into those datagrams, so the IP output path (route, netfilter, device) runs
 * once per message instead of once per datagram. The receiver sees the same
 * datagrams in the same order (a host's interface without checksum offload, as
 * Mininet's hosts are set up, segments in software before the wire). */
static int64_t gso_groups(Loop *L, int64_t nsend) {
    int64_t g = 0, i = 0;
    while (i < nsend) {
        size_t seg = L->siov[i].iov_len;
        int64_t j = i + 1;
        while (j < nsend && j - i < GSO_MAX_SEGS && L->siov[j].iov_len == seg) j++;
        struct msghdr *m = &L->gh[g].msg_hdr;
        m->msg_iov = &L->siov[i];
        m->msg_iovlen = (size_t)(j - i);
        if (j - i > 1) {
            uint8_t *cb = L->gcm + g * GSO_CMSG;
            uint16_t s16 = (uint16_t)seg;
            memcpy(CMSG_DATA((struct cmsghdr *)cb), &s16, sizeof s16);
            m->msg_control = cb;
            m->msg_controllen = GSO_CMSG;
        } else {
            m->msg_control = NULL;
            m->msg_controllen = 0;
        }
        L->gfirst[g++] = i;
        i = j;
    }
    return g;
}

/* The burst's sends: as GSO messages where *gso and the kernel takes them; a
 * message it refuses goes datagram by datagram, and a refusal of GSO itself
 * (EIO/EINVAL/EOPNOTSUPP/ENOPROTOOPT) clears *gso for the rest of this run() and
 * counts in CNT_GSO_REFUSED (the caller then turns it off on the socket). */
static int send_burst(Loop *L, int64_t nsend, int *gso) {
    for (int64_t j = 0; j < nsend; j++) {
        L->siov[j].iov_base = L->pkts + L->txo[j];
        L->siov[j].iov_len = (size_t)L->txl[j];
    }
    if (!*gso || nsend < 2) return send_plain(L, 0, nsend);
    int64_t ng = gso_groups(L, nsend), done = 0;
    while (done < ng) {
        int r = sendmmsg(L->fd, L->gh + done, (unsigned)(ng - done), 0);
        if (r > 0) { L->cnt[CNT_GSO_MSGS] += r; done += r; continue; }
        int e = r < 0 ? errno : 0;
        if (e == EINTR) continue;
        if (e == EBADF) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
        int64_t first = L->gfirst[done], end = done + 1 < ng ? L->gfirst[done + 1] : nsend;
        if (e == EIO || e == EINVAL || e == EOPNOTSUPP || e == ENOPROTOOPT) {     /* _mmsg.GSO_REFUSALS */
            L->cnt[CNT_GSO_REFUSED]++;         /* no GSO here: the rest one message per datagram */
            *gso = 0;
            return send_plain(L, first, nsend - first);
        }
        if (send_plain(L, first, end - first) < 0) return -1;
        done++;
    }
    return 0;
}

static PyObject *loop_run(Loop *L, PyObject *args) {
    double stop_at;
    int keep;
    Py_ssize_t max_pkts, vec_min;
    PyObject *lat;
    Py_ssize_t coalesce;
    int gso;
    if (!PyArg_ParseTuple(args, "dpnnO!np", &stop_at, &keep, &max_pkts, &vec_min, &PyList_Type, &lat,
                          &coalesce, &gso))
        return NULL;
    if (L->fd < 0) { PyErr_SetString(PyExc_ValueError, "_hostpath.Loop.run: no socket"); return NULL; }
    Py_ssize_t total = 0;
    int napped = 0;
    double t_empty = mono_now();
    for (;;) {
        int n = recvmmsg(L->fd, L->rh, (unsigned)L->batch, MSG_DONTWAIT, NULL);
        if (n < 0) {
            int e = errno;
            if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR && e != ECONNREFUSED) {
                PyErr_SetFromErrno(PyExc_OSError);
                return NULL;
            }
            n = 0;
        }
        if (n > 0) {
            for (int i = 0; i < n; i++) L->lens[i] = L->rh[i].msg_len;
            int64_t nsend = 0;
            int st = do_burst(L, L->rec, L->lens, n, vec_min, Py_None, lat, &nsend);
            if (st < 0) return NULL;
            if (st == ST_OTHER) return Py_BuildValue("ind", ST_OTHER, (Py_ssize_t)n, t_empty);
            if (nsend && send_burst(L, nsend, &gso) < 0) return NULL;
            L->cnt[CNT_BURSTS]++;
            napped = 0;
            total += n;
            if (total >= max_pkts) return Py_BuildValue("ind", ST_BUDGET, total, t_empty);
            if (keep && mono_now() >= L->sc[SC_NEXT_DL])      /* a flow that never pauses */
                return Py_BuildValue("ind", ST_TIMER, total, t_empty);
            continue;
        }
        double t = t_empty = mono_now();
        if (!keep) return Py_BuildValue("ind", ST_IDLE, total, t_empty);
        double next = L->sc[SC_NEXT_DL];
        if (t >= next) return Py_BuildValue("ind", ST_TIMER, total, t_empty);
        if (t >= stop_at) return Py_BuildValue("ind", ST_IDLE, total, t_empty);
        double until = next < stop_at ? next : stop_at, w = until - t;
        /* Coalescing: with many chunks on the wire, answers trickle in a few at a
         * time, and waking for each few costs a context switch and three system
         * calls; nap for about `coalesce` answers' time (the window's answers arrive
         * over one round trip) and take them as one burst. At most 1 ms, never past
         * a timer, once per empty socket (a nap that found nothing: ppoll). */
        if (coalesce > 0 && !napped && !isnan(L->sc[SC_SRTT])) {
            int64_t fly = on_wire(L);
            if (fly >= 2 * coalesce) {
                double x = L->sc[SC_SRTT] * (double)coalesce / (double)fly;
                if (x > 1e-3) x = 1e-3;
                if (x > w) x = w;
                if (x > 20e-6) {
                    struct timespec nap = {0, (long)(x * 1e9)};
                    napped = 1;
                    L->cnt[CNT_NAPS]++;
                    Py_BEGIN_ALLOW_THREADS
                    nanosleep(&nap, NULL);
                    Py_END_ALLOW_THREADS
                    if (PyErr_CheckSignals() < 0) return NULL;
                    continue;
                }
            }
        }
        napped = 0;
        struct timespec ts = {(time_t)w, (long)((w - (double)(time_t)w) * 1e9)};
        struct pollfd pfd = {L->fd, POLLIN, 0};
        int pr;
        L->cnt[CNT_SLEEPS]++;
        Py_BEGIN_ALLOW_THREADS
        pr = ppoll(&pfd, 1, &ts, NULL);
        Py_END_ALLOW_THREADS
        if (pr < 0 && errno != EINTR) { PyErr_SetFromErrno(PyExc_OSError); return NULL; }
        if (PyErr_CheckSignals() < 0) return NULL;
    }
}

static PyMethodDef loop_methods[] = {
    {"set_run", (PyCFunction)loop_set_run, METH_VARARGS, "the run whose results the loop takes in"},
    {"clear_run", (PyCFunction)loop_clear_run_py, METH_NOARGS, "no run: every burst goes to Python"},
    {"burst", (PyCFunction)loop_burst, METH_VARARGS, "one received burst"},
    {"run", (PyCFunction)loop_run, METH_VARARGS, "receive/accept/send on the socket"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LoopType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hosts.ina._hostpath.Loop",
    .tp_basicsize = sizeof(Loop),
    .tp_dealloc = (destructor)loop_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "the INA worker's steady-state receive/send loop",
    .tp_methods = loop_methods,
    .tp_init = (initproc)loop_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *constants(PyObject *self, PyObject *noargs) {
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "INA_HLEN", INA_HLEN, "MAX_VALUES_PER_PACKET", LANES,
                         "RX_STRIDE", RX_STRIDE, "INA_VERSION", INA_VERSION, "FLAG_RESULT", FLAG_RESULT,
                         "LOOP_SC", SC_N, "LOOP_CNT", CNT_N);
}

static PyMethodDef methods[] = {
    {"quantize", quantize, METH_VARARGS, "float -> saturated fixed point int32"},
    {"build_run", build_run, METH_VARARGS, "a run's packets"},
    {"accept_block", accept_block, METH_VARARGS, "a burst's acceptable results"},
    {"rtt_fold", rtt_fold, METH_VARARGS, "RTT estimate over samples"},
    {"scatter", scatter, METH_VARARGS, "result values into a handle's rows"},
    {"from_fixed", from_fixed, METH_VARARGS, "int32 sums -> float32"},
    {"constants", constants, METH_NOARGS, "the wire constants compiled in"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hostpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hostpath(void) {
    if (PyType_Ready(&LoopType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&LoopType);
    if (PyModule_AddObject(m, "Loop", (PyObject *)&LoopType) < 0) {
        Py_DECREF(&LoopType); Py_DECREF(m); return NULL;
    }
    return m;
}
