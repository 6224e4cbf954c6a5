/* _fastpath: the INA pipeline's per-packet hot loop in C (the "compiled" path).
 *
 * Mirrors p4/ina.p4 and its numpy reference (pipeline.py `_classify`, `_admit`,
 * `_scalar`, `_emit`; aggregator.py `Aggregator.apply`) packet by packet, in
 * arrival order. It owns no state: every table mirror, register and counter is
 * the reference pipeline's own numpy array, borrowed through the buffer
 * protocol, so the control plane and the P4Runtime server see one set of
 * registers and counters whichever path runs. fastpath.py is the Python side
 * (it builds `Datapath` from an InaPipeline's arrays).
 *
 * Datapath.process(frames, in_ports, drop, replicas, cache, unicast_prefix)
 *   -> (out [(port, bytes)], forward [frame index])
 *   drop: None or bytes (1 = the drop simulator dropped frame i; decided in Python
 *         so that the random stream is numpy's, as in the reference). The egress
 *         drop simulator's draws are Python's too: fastpath.py filters `out` (the
 *         results, in leaving order) as pipeline.py does; forwarded frames are not
 *         in `out` and are never impaired.
 *   replicas(group, sport, count) -> [(port, prefix)]: Egress.replicas; results are
 *         memoised in `cache` (a dict the caller clears when the tables change).
 *   unicast_prefix(frame, count) -> bytes: Egress.unicast_prefix (retransmits only).
 * Datapath.classify(frames) -> bytes: per frame CLASS_MALFORMED/FORWARD/CONTRIB.
 * ring_program: a capsule (../soft/ring_program.h) with the same per-frame
 *   pipeline for the soft switch's compiled ring loop (_pktio.Engine), which
 *   hands it frames in place in the receive ring and sends what it emits; no
 *   Python object per frame. Both entry points run `dp_frame`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../soft/ring_program.h"

/* wire.py's constants (the one place of the wire format; checked against it
 * at import by fastpath.py through `constants()`). */
#define ETH_HLEN 14
#define UDP_OFFSET 34
#define INA_OFFSET 42
#define INA_HLEN 16
#define VALUES_OFFSET 58
#define LANES 64
#define INA_PORT_BASE 0x5A00
#define INA_PORT_MASK 0xFFF0
#define INA_VERSION 1
#define OP_SUM 0
#define OP_OR 1
#define OP_MAX 2
#define FLAG_RESULT 0x01
#define FLAG_RETX 0x02
#define MAX_WORKERS 32
#define NUM_JOBS 256
#define NUM_WORKER_IDS 256

enum { CLASS_MALFORMED = 0, CLASS_FORWARD = 1, CLASS_CONTRIB = 2 };
/* Verdicts, as VERDICT_* in ina.p4 and aggregator.py. */
enum { ABSORB = 0, MULTICAST = 1, UNICAST = 2, DUPLICATE = 3 };

/* Counter arrays, in this order (pipeline.JOB_COUNTERS). */
enum { C_PACKETS, C_RESULTS, C_RETX, C_DUPS, C_BAD_JOB, C_BAD_WORKER, C_BAD_PORT, C_BAD_SLOT,
       N_JOB_COUNTERS };

/* Buffers borrowed from the pipeline, in constructor order. */
enum { B_VALID, B_NUM_WORKERS, B_MCAST_GRP, B_WORKER_MASK, B_SLOT_BASE, B_SLOT_COUNT,
       B_WORKER_PORT, B_BITMAP, B_COUNT, B_SEQ, B_EXPONENT, B_VALUES,
       B_CTR0, B_MALFORMED = B_CTR0 + N_JOB_COUNTERS, N_BUFS };

typedef struct {
    PyObject_HEAD
    Py_buffer bufs[N_BUFS];
    int nbufs;                    /* how many are held (for dealloc after a failed init) */
    Py_ssize_t num_slots;
    /* typed views into bufs */
    const uint8_t *valid;
    const int64_t *num_workers, *mcast_grp, *worker_mask, *slot_base, *slot_count;
    const int64_t *worker_port;   /* [job][worker id] -> port, -1 unbound */
    uint32_t *bitmap;             /* [slot][ver] */
    uint8_t *count;
    uint32_t *seq;
    int8_t *exponent;
    int32_t *values;              /* [slot][ver][lane] */
    int64_t *ctr[N_JOB_COUNTERS];
    int64_t *malformed;
} Datapath;

static const struct { const char *name; Py_ssize_t itemsize; } buf_spec[N_BUFS] = {
    {"jobs.valid", 1}, {"jobs.num_workers", 8}, {"jobs.mcast_grp", 8}, {"jobs.worker_mask", 8},
    {"jobs.slot_base", 8}, {"jobs.slot_count", 8}, {"worker_ports.port", 8},
    {"aggregator.bitmap", 4}, {"aggregator.count", 1}, {"aggregator.seq", 4},
    {"aggregator.exponent", 1}, {"aggregator.values", 4},
    {"Ingress.ina_packets", 8}, {"Ingress.ina_results", 8}, {"Ingress.ina_retransmits", 8},
    {"Ingress.ina_duplicates_dropped", 8}, {"Ingress.bad_job", 8}, {"Ingress.bad_worker", 8},
    {"Ingress.bad_port", 8}, {"Ingress.bad_slot", 8}, {"Ingress.malformed", 8},
};

static void Datapath_dealloc(Datapath *self) {
    for (int i = 0; i < self->nbufs; i++) PyBuffer_Release(&self->bufs[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Datapath_init(Datapath *self, PyObject *args, PyObject *kw) {
    PyObject *seq;
    Py_ssize_t num_slots;
    if (!PyArg_ParseTuple(args, "On", &seq, &num_slots)) return -1;
    if (self->nbufs) { PyErr_SetString(PyExc_RuntimeError, "Datapath already initialised"); return -1; }
    PyObject *fast = PySequence_Fast(seq, "Datapath(buffers, num_slots): buffers must be a sequence");
    if (!fast) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != N_BUFS) {
        PyErr_Format(PyExc_ValueError, "Datapath: expected %d buffers, got %zd", N_BUFS,
                     PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    Py_ssize_t want_len[N_BUFS];
    for (int i = 0; i < N_BUFS; i++) want_len[i] = NUM_JOBS;
    want_len[B_WORKER_PORT] = (Py_ssize_t)NUM_JOBS * NUM_WORKER_IDS;
    want_len[B_BITMAP] = want_len[B_COUNT] = want_len[B_SEQ] = want_len[B_EXPONENT] = num_slots * 2;
    want_len[B_VALUES] = num_slots * 2 * LANES;
    want_len[B_MALFORMED] = 1;
    for (int i = 0; i < N_BUFS; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (i >= B_BITMAP ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(o, &self->bufs[i], flags) < 0) { Py_DECREF(fast); return -1; }
        self->nbufs = i + 1;
        Py_buffer *b = &self->bufs[i];
        if (b->itemsize != buf_spec[i].itemsize || b->len != want_len[i] * b->itemsize) {
            PyErr_Format(PyExc_ValueError, "Datapath: %s: expected %zd items of %zd bytes, got %zd "
                         "bytes of %zd", buf_spec[i].name, want_len[i], buf_spec[i].itemsize,
                         b->len, b->itemsize);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    self->num_slots = num_slots;
    self->valid = self->bufs[B_VALID].buf;
    self->num_workers = self->bufs[B_NUM_WORKERS].buf;
    self->mcast_grp = self->bufs[B_MCAST_GRP].buf;
    self->worker_mask = self->bufs[B_WORKER_MASK].buf;
    self->slot_base = self->bufs[B_SLOT_BASE].buf;
    self->slot_count = self->bufs[B_SLOT_COUNT].buf;
    self->worker_port = self->bufs[B_WORKER_PORT].buf;
    self->bitmap = self->bufs[B_BITMAP].buf;
    self->count = self->bufs[B_COUNT].buf;
    self->seq = self->bufs[B_SEQ].buf;
    self->exponent = self->bufs[B_EXPONENT].buf;
    self->values = self->bufs[B_VALUES].buf;
    for (int c = 0; c < N_JOB_COUNTERS; c++) self->ctr[c] = self->bufs[B_CTR0 + c].buf;
    self->malformed = self->bufs[B_MALFORMED].buf;
    return 0;
}

static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline void put_be32(uint8_t *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

/* The P4 parser (pipeline._classify). */
static inline int classify(const uint8_t *f, Py_ssize_t n) {
    if (n < 14) return CLASS_MALFORMED;
    if (f[12] != 0x08 || f[13] != 0x00) return CLASS_FORWARD;
    if (n < 34) return CLASS_MALFORMED;
    if ((f[14] & 0x0F) != 5 || f[23] != 17) return CLASS_FORWARD;
    if (n < 42) return CLASS_MALFORMED;
    if ((((f[36] << 8) | f[37]) & INA_PORT_MASK) != INA_PORT_BASE) return CLASS_FORWARD;
    if (n < VALUES_OFFSET) return CLASS_MALFORMED;
    const uint8_t *h = f + INA_OFFSET;
    if (h[0] != INA_VERSION || h[1] > OP_MAX || h[12] > LANES || h[6] > 1
        || n < VALUES_OFFSET + 4 * (Py_ssize_t)h[12])
        return CLASS_MALFORMED;
    if (h[2] & FLAG_RESULT) return CLASS_FORWARD;
    return CLASS_CONTRIB;
}

/* A frame's bytes: bytes objects directly, anything else through the buffer
 * protocol (view->obj != NULL then, release it after use). */
static inline int frame_bytes(PyObject *o, const uint8_t **p, Py_ssize_t *n, Py_buffer *view) {
    view->obj = NULL;
    if (PyBytes_CheckExact(o)) {
        *p = (const uint8_t *)PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyObject_GetBuffer(o, view, PyBUF_SIMPLE) < 0) return -1;
    *p = view->buf;
    *n = view->len;
    return 0;
}

/* Ingress admission (pipeline._admit): job, worker, port binding, slot. */
static inline int admit(Datapath *d, int job, int wid, int slot, long port) {
    if (!d->valid[job]) { d->ctr[C_BAD_JOB][job]++; return 0; }
    if (wid >= MAX_WORKERS || !((d->worker_mask[job] >> wid) & 1)) { d->ctr[C_BAD_WORKER][job]++; return 0; }
    if (d->worker_port[job * NUM_WORKER_IDS + wid] != port) { d->ctr[C_BAD_PORT][job]++; return 0; }
    if (slot >= d->slot_count[job]) { d->ctr[C_BAD_SLOT][job]++; return 0; }
    d->ctr[C_PACKETS][job]++;
    return 1;
}

/* Aggregator.apply for one contribution; `res` gets the result values (cnt
 * lanes, host order) for MULTICAST/UNICAST, `*res_exp` the result exponent. */
static inline int aggregate(Datapath *d, Py_ssize_t g, int v, int wid, uint32_t sq, int op,
                            int cnt, int exp, const uint8_t *vals, int64_t n,
                            int32_t *res, int *res_exp) {
    Py_ssize_t gv = g * 2 + v, go = g * 2 + (1 - v);
    uint32_t wbit = (uint32_t)1 << wid;
    uint32_t bm = d->bitmap[gv];
    int64_t c = d->count[gv];
    uint32_t diff = sq - d->seq[gv];
    int first = c == 0 || (diff != 0 && diff < 0x80000000u);
    int32_t *row = d->values + gv * LANES;
    if (!first) {
        if (diff != 0) return DUPLICATE;
        if (bm & wbit) {
            if (c == n) {
                memcpy(res, row, sizeof(int32_t) * cnt);
                *res_exp = d->exponent[gv];
                return UNICAST;
            }
            return DUPLICATE;
        }
        if (c >= n) return DUPLICATE;
    }
    d->bitmap[go] &= ~wbit;
    int e;
    if (first) {
        d->bitmap[gv] = wbit;
        c = 1;
        e = exp;
        d->seq[gv] = sq;
        for (int l = 0; l < cnt; l++) row[l] = (int32_t)be32(vals + 4 * l);
        for (int l = cnt; l < LANES; l++) row[l] = 0;
    } else {
        d->bitmap[gv] = bm | wbit;
        c += 1;
        e = d->exponent[gv] > exp ? d->exponent[gv] : exp;
        if (op == OP_SUM) {       /* bit<32> arithmetic: wraps mod 2^32 */
            for (int l = 0; l < cnt; l++) row[l] = (int32_t)((uint32_t)row[l] + be32(vals + 4 * l));
        } else if (op == OP_OR) {
            for (int l = 0; l < cnt; l++) row[l] |= (int32_t)be32(vals + 4 * l);
        } else {
            for (int l = 0; l < cnt; l++) {
                int32_t x = (int32_t)be32(vals + 4 * l);
                if (x > row[l]) row[l] = x;
            }
        }
    }
    d->count[gv] = (uint8_t)c;
    d->exponent[gv] = (int8_t)e;
    if (c == n) {
        memcpy(res, row, sizeof(int32_t) * cnt);
        *res_exp = e;
        return MULTICAST;
    }
    return ABSORB;
}

/* The replica list of (group, sport, count), memoised in `cache` (key: one int). */
static PyObject *replicas_of(PyObject *cache, PyObject *replicas, int64_t grp, int sport, int cnt) {
    PyObject *key = PyLong_FromLongLong((grp << 24) | ((int64_t)sport << 8) | cnt);
    if (!key) return NULL;
    PyObject *reps = PyDict_GetItemWithError(cache, key);   /* borrowed */
    if (reps) { Py_DECREF(key); return reps; }
    if (PyErr_Occurred()) { Py_DECREF(key); return NULL; }
    reps = PyObject_CallFunction(replicas, "Lii", (long long)grp, sport, cnt);
    if (!reps) { Py_DECREF(key); return NULL; }
    PyObject *lst = PySequence_List(reps);
    Py_DECREF(reps);
    if (!lst || PyDict_SetItem(cache, key, lst) < 0) { Py_XDECREF(lst); Py_DECREF(key); return NULL; }
    Py_DECREF(key);
    Py_DECREF(lst);             /* the cache holds it */
    return lst;
}

/* The Egress callbacks one call works with: Egress.replicas, its memo dict
 * Egress.replicas_by_key (replaced when the tables change, so passed per call)
 * and Egress.unicast_prefix. */
typedef struct {
    PyObject *replicas, *cache, *unicast;
} EgressCalls;

static int prefix_bytes(PyObject *prefix, const uint8_t **p, Py_ssize_t *n) {
    if (!PyBytes_Check(prefix)) {
        PyErr_SetString(PyExc_TypeError, "egress prefix must be bytes");
        return -1;
    }
    *p = (const uint8_t *)PyBytes_AS_STRING(prefix);
    *n = PyBytes_GET_SIZE(prefix);
    return 0;
}

/* One frame through the whole pipeline (the body of both entry points:
 * Datapath.process over a list of frames, and the soft switch's ring loop
 * through the capsule). Frames are read in place; what leaves goes through
 * `emit`. Returns 0 handled, 1 a frame for Forward, -1 a Python error.
 * `dropped`: the drop simulator dropped this frame (only for contributions). */
static int dp_frame(Datapath *d, const EgressCalls *eg, RingProgramMemo *memo, const uint8_t *f,
                    Py_ssize_t len, long port, int dropped, ring_emit_fn emit, void *ctx) {
    int cls = classify(f, len);
    if (cls == CLASS_MALFORMED) { d->malformed[0]++; return 0; }
    if (cls == CLASS_FORWARD) return 1;
    if (dropped) return 0;
    const uint8_t *h = f + INA_OFFSET;
    int job = h[3], wid = h[7], slot = (h[4] << 8) | h[5];
    if (!admit(d, job, wid, slot, port)) return 0;
    Py_ssize_t g = (Py_ssize_t)d->slot_base[job] + slot;
    if (g < 0 || g >= d->num_slots) {
        PyErr_Format(PyExc_IndexError, "job %d slot %d: aggregator slot %zd outside 0..%zd",
                     job, slot, g, d->num_slots - 1);
        return -1;
    }
    int cnt = h[12], res_exp = 0;
    int32_t res[LANES];
    int verdict = aggregate(d, g, h[6], wid, be32(h + 8), h[1], cnt, (int8_t)h[13],
                            f + VALUES_OFFSET, d->num_workers[job], res, &res_exp);
    if (verdict == ABSORB) return 0;
    if (verdict == DUPLICATE) { d->ctr[C_DUPS][job]++; return 0; }
    /* The result: the contribution's header with RESULT set, RETX cleared and
     * the slot's exponent, then the values (Egress; pipeline._emit). */
    uint8_t payload[INA_HLEN + 4 * LANES];
    memcpy(payload, h, INA_HLEN);
    payload[2] = (h[2] & ~FLAG_RETX & 0xFF) | FLAG_RESULT;
    payload[13] = (uint8_t)(int8_t)res_exp;
    for (int l = 0; l < cnt; l++) put_be32(payload + INA_HLEN + 4 * l, (uint32_t)res[l]);
    Py_ssize_t plen = INA_HLEN + 4 * cnt;
    int sport = (f[36] << 8) | f[37];
    const uint8_t *pre;
    Py_ssize_t prelen;
    if (verdict == UNICAST) {
        d->ctr[C_RETX][job]++;
        PyObject *fb = PyBytes_FromStringAndSize((const char *)f, len);
        if (!fb) return -1;
        PyObject *pre_o = PyObject_CallFunction(eg->unicast, "Oi", fb, cnt);
        Py_DECREF(fb);
        if (!pre_o) return -1;
        int r = prefix_bytes(pre_o, &pre, &prelen);
        if (r == 0) r = emit(ctx, port, pre, prelen, payload, plen);
        Py_DECREF(pre_o);
        return r < 0 ? -1 : 0;
    }
    d->ctr[C_RESULTS][job]++;
    /* The common case: every result of a batch goes to the same group with the
     * same sport and count; remember the last replica list (owned by the cache). */
    int64_t grp = d->mcast_grp[job];
    int64_t key = (grp << 24) | ((int64_t)sport << 8) | cnt;
    if (key != memo->key || !memo->value) {
        memo->value = replicas_of(eg->cache, eg->replicas, grp, sport, cnt);
        if (!memo->value) { memo->key = -1; return -1; }
        memo->key = key;
    }
    PyObject *reps = memo->value;
    Py_ssize_t nr = PyList_GET_SIZE(reps);
    for (Py_ssize_t r = 0; r < nr; r++) {
        PyObject *rep = PyList_GET_ITEM(reps, r);
        if (!PyTuple_Check(rep) || PyTuple_GET_SIZE(rep) != 2) {
            PyErr_SetString(PyExc_TypeError, "replicas() must give (port, prefix) pairs");
            return -1;
        }
        long rport = PyLong_AsLong(PyTuple_GET_ITEM(rep, 0));
        if (rport == -1 && PyErr_Occurred()) return -1;
        if (prefix_bytes(PyTuple_GET_ITEM(rep, 1), &pre, &prelen) < 0) return -1;
        if (emit(ctx, rport, pre, prelen, payload, plen) < 0) return -1;
    }
    return 0;
}

/* Datapath.process's emit: append (port, prefix + payload) to a list. */
static int emit_to_list(void *ctx, long port, const uint8_t *prefix, Py_ssize_t pl,
                        const uint8_t *payload, Py_ssize_t plen) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, pl + plen);
    if (!b) return -1;
    char *dst = PyBytes_AS_STRING(b);
    memcpy(dst, prefix, pl);
    memcpy(dst + pl, payload, plen);
    PyObject *t = Py_BuildValue("(lN)", port, b);
    if (!t) return -1;
    int r = PyList_Append((PyObject *)ctx, t);
    Py_DECREF(t);
    return r;
}

static PyObject *Datapath_process(Datapath *d, PyObject *args) {
    PyObject *frames, *in_ports, *drop;
    EgressCalls eg;
    if (!PyArg_ParseTuple(args, "O!O!OOO!O", &PyList_Type, &frames, &PyList_Type, &in_ports,
                          &drop, &eg.replicas, &PyDict_Type, &eg.cache, &eg.unicast))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(frames);
    if (PyList_GET_SIZE(in_ports) != n) {
        PyErr_Format(PyExc_ValueError, "process: %zd frames but %zd in_ports", n,
                     PyList_GET_SIZE(in_ports));
        return NULL;
    }
    const uint8_t *dropped = NULL;
    if (drop != Py_None) {
        if (!PyBytes_Check(drop) || PyBytes_GET_SIZE(drop) != n) {
            PyErr_SetString(PyExc_ValueError, "process: drop must be None or bytes, one per frame");
            return NULL;
        }
        dropped = (const uint8_t *)PyBytes_AS_STRING(drop);
    }
    PyObject *out = PyList_New(0), *fwd = PyList_New(0);
    if (!out || !fwd) goto fail;
    RingProgramMemo memo = {-1, NULL};
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *f;
        Py_ssize_t len;
        Py_buffer view;
        if (frame_bytes(PyList_GET_ITEM(frames, i), &f, &len, &view) < 0) goto fail;
        long port = PyLong_AsLong(PyList_GET_ITEM(in_ports, i));
        int r = (port == -1 && PyErr_Occurred()) ? -1
              : dp_frame(d, &eg, &memo, f, len, port, dropped && dropped[i], emit_to_list, out);
        if (view.obj) PyBuffer_Release(&view);
        if (r < 0) goto fail;
        if (r == 1) {
            PyObject *ix = PyLong_FromSsize_t(i);
            if (!ix || PyList_Append(fwd, ix) < 0) { Py_XDECREF(ix); goto fail; }
            Py_DECREF(ix);
        }
    }
    PyObject *ret = PyTuple_Pack(2, out, fwd);
    Py_DECREF(out);
    Py_DECREF(fwd);
    return ret;
fail:
    Py_XDECREF(out);
    Py_XDECREF(fwd);
    return NULL;
}

/* The capsule's entry: `args` is (replicas, cache, unicast_prefix) as for process. */
static int ring_frame(PyObject *program, PyObject *args, RingProgramMemo *memo, const uint8_t *f,
                      Py_ssize_t len, long in_port, ring_emit_fn emit, void *ctx) {
    EgressCalls eg;
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 3
        || !PyDict_Check(PyTuple_GET_ITEM(args, 1))) {
        PyErr_SetString(PyExc_TypeError, "ring program args must be (replicas, cache dict, unicast_prefix)");
        return -1;
    }
    eg.replicas = PyTuple_GET_ITEM(args, 0);
    eg.cache = PyTuple_GET_ITEM(args, 1);
    eg.unicast = PyTuple_GET_ITEM(args, 2);
    return dp_frame((Datapath *)program, &eg, memo, f, len, in_port, 0, emit, ctx);
}

static const RingProgramAPI ring_api = {RING_PROGRAM_ABI, ring_frame};
static PyObject *Datapath_classify(Datapath *d, PyObject *args) {
    PyObject *frames;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &frames)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(frames);
    PyObject *res = PyBytes_FromStringAndSize(NULL, n);
    if (!res) return NULL;
    uint8_t *r = (uint8_t *)PyBytes_AS_STRING(res);
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *f;
        Py_ssize_t len;
        Py_buffer view;
        if (frame_bytes(PyList_GET_ITEM(frames, i), &f, &len, &view) < 0) { Py_DECREF(res); return NULL; }
        r[i] = (uint8_t)classify(f, len);
        if (view.obj) PyBuffer_Release(&view);
    }
    return res;
}

static PyMethodDef Datapath_methods[] = {
    {"process", (PyCFunction)Datapath_process, METH_VARARGS,
     "process(frames, in_ports, drop, replicas, cache, unicast_prefix) -> (out, forward_indices)"},
    {"classify", (PyCFunction)Datapath_classify, METH_VARARGS,
     "classify(frames) -> bytes: 0 malformed, 1 forward, 2 contribution, per frame"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DatapathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "testbed.switch.ina._fastpath.Datapath",
    .tp_basicsize = sizeof(Datapath),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The INA pipeline's hot loop over the reference pipeline's own arrays.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Datapath_init,
    .tp_dealloc = (destructor)Datapath_dealloc,
    .tp_methods = Datapath_methods,
};

static PyObject *constants(PyObject *self, PyObject *noargs) {
    return Py_BuildValue(
        "{si,si,si,si,si,si,si,si,si,si,si,si,si,si,si,si}",
        "INA_OFFSET", INA_OFFSET, "INA_HLEN", INA_HLEN, "VALUES_OFFSET", VALUES_OFFSET,
        "UDP_OFFSET", UDP_OFFSET, "MAX_VALUES_PER_PACKET", LANES, "INA_PORT_BASE", INA_PORT_BASE,
        "INA_PORT_MASK", INA_PORT_MASK, "INA_VERSION", INA_VERSION, "OP_SUM", OP_SUM,
        "OP_OR", OP_OR, "OP_MAX", OP_MAX, "FLAG_RESULT", FLAG_RESULT, "FLAG_RETX", FLAG_RETX,
        "MAX_WORKERS", MAX_WORKERS, "NUM_JOBS", NUM_JOBS, "NUM_WORKER_IDS", NUM_WORKER_IDS);
}

static PyMethodDef module_methods[] = {
    {"constants", constants, METH_NOARGS, "the wire constants this build was compiled with"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastpath", "The INA pipeline's compiled hot loop.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__fastpath(void) {
    if (PyType_Ready(&DatapathType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&DatapathType);
    if (PyModule_AddObject(m, "Datapath", (PyObject *)&DatapathType) < 0) {
        Py_DECREF(&DatapathType);
        Py_DECREF(m);
        return NULL;
    }
    /* For the soft switch's ring loop (_pktio.Engine): the per-frame entry. */
    PyObject *cap = PyCapsule_New((void *)&ring_api, RING_PROGRAM_CAPSULE, NULL);
    if (!cap || PyModule_AddObject(m, "ring_program", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
