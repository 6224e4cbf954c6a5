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

static PyObject *constants(PyObject *self, PyObject *noargs) {
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i}", "INA_HLEN", INA_HLEN, "MAX_VALUES_PER_PACKET", LANES,
                         "RX_STRIDE", RX_STRIDE, "INA_VERSION", INA_VERSION, "FLAG_RESULT", FLAG_RESULT);
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

PyMODINIT_FUNC PyInit__hostpath(void) { return PyModule_Create(&module); }
