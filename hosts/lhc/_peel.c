/* LHC's peeling on counts in C (hosts/lhc/codec.py loads it; its _peel_python is
 * the reference this must match exactly: tests/unit/test_lhc_codec.py).
 *
 *   peel(cells, m, k, counters, round_of, hash_of, order) -> rounds
 *       cells: int64[k * m], cells[j * m + p] the counter of position p under hash j;
 *       round_of: int32[m] out, the round position p peels in (-1: the 2-core);
 *       hash_of: int8[m] out, the first hash whose counter was pure then (-1: core);
 *       order: int64[m] out, the positions by round (the core first), each round's
 *       ascending (a counting sort: what a stable argsort of round_of gives).
 *
 * The rounds are synchronous, as in the reference: every position with a pure
 * counter (count 1) at a round's start peels in that round. Only a counter whose
 * count dropped to 1 in a round can be pure in the next (one pure at a round's
 * start lost its position in it), and the XOR of the positions still in a counter
 * names the one left when its count is 1, so a round looks at those positions
 * only: O(k m) in all, where the reference scans every position left each round.
 *
 * Built by scripts/build_fastpath.py (make setup). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

static int get_buf(PyObject *o, Py_buffer *b, int writable, const char *what) {
    if (PyObject_GetBuffer(o, b, (writable ? PyBUF_WRITABLE : 0) | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Format(PyExc_TypeError, "_peel: %s must be a C-contiguous%s buffer", what,
                     writable ? " writable" : "");
        return -1;
    }
    return 0;
}

static int fmt_int(Py_buffer *b, Py_ssize_t size) {
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (f[1] != 0 || b->itemsize != size) return 0;
    switch (size) {
        case 8: return f[0] == 'q' || f[0] == 'l';
        case 4: return f[0] == 'i' || (f[0] == 'l' && sizeof(long) == 4);
        case 1: return f[0] == 'b';
        default: return 0;
    }
}

static PyObject *peel(PyObject *self, PyObject *args) {
    PyObject *co, *ro, *ho, *oo;
    Py_ssize_t m, k, nc;
    if (!PyArg_ParseTuple(args, "OnnnOOO", &co, &m, &k, &nc, &ro, &ho, &oo)) return NULL;
    if (m < 0 || k < 1 || k > 127 || nc < 0) {
        PyErr_SetString(PyExc_ValueError, "_peel.peel: need m >= 0, 1 <= k <= 127, counters >= 0");
        return NULL;
    }
    Py_buffer cb, rb, hb, ob;
    if (get_buf(co, &cb, 0, "cells") < 0) return NULL;
    if (get_buf(ro, &rb, 1, "round_of") < 0) { PyBuffer_Release(&cb); return NULL; }
    if (get_buf(ho, &hb, 1, "hash_of") < 0) { PyBuffer_Release(&cb); PyBuffer_Release(&rb); return NULL; }
    if (get_buf(oo, &ob, 1, "order") < 0) {
        PyBuffer_Release(&cb); PyBuffer_Release(&rb); PyBuffer_Release(&hb);
        return NULL;
    }
    PyObject *result = NULL;
    int64_t *cnt = NULL, *xr = NULL, *cand = NULL, *next = NULL;
    int32_t *stamp = NULL;
    if (!fmt_int(&cb, 8) || cb.len != 8 * k * m || !fmt_int(&rb, 4) || rb.len != 4 * m
            || !fmt_int(&hb, 1) || hb.len != m || !fmt_int(&ob, 8) || ob.len != 8 * m) {
        PyErr_SetString(PyExc_TypeError,
                        "_peel.peel: cells int64[k * m], round_of int32[m], hash_of int8[m], order int64[m]");
        goto done;
    }
    const int64_t *cells = (const int64_t *)cb.buf;
    int32_t *round_of = (int32_t *)rb.buf;
    int8_t *hash_of = (int8_t *)hb.buf;
    for (Py_ssize_t i = 0; i < k * m; i++) {
        if (cells[i] < 0 || cells[i] >= nc) {
            PyErr_Format(PyExc_ValueError, "_peel.peel: cell %lld out of 0..%zd", (long long)cells[i], nc - 1);
            goto done;
        }
    }
    cnt = calloc((size_t)(nc ? nc : 1), sizeof *cnt);
    xr = calloc((size_t)(nc ? nc : 1), sizeof *xr);
    cand = malloc((size_t)(m ? m : 1) * sizeof *cand);
    next = malloc((size_t)(m ? m : 1) * sizeof *next);
    stamp = calloc((size_t)(m ? m : 1), sizeof *stamp);
    if (!cnt || !xr || !cand || !next || !stamp) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t j = 0; j < k; j++)
        for (Py_ssize_t p = 0; p < m; p++) {
            int64_t c = cells[j * m + p];
            cnt[c]++;
            xr[c] ^= (int64_t)p;
        }
    for (Py_ssize_t p = 0; p < m; p++) { round_of[p] = -1; hash_of[p] = -1; cand[p] = p; }
    Py_ssize_t ncand = m;
    int32_t r = 0;
    while (ncand > 0) {
        /* who peels: purity as of the round's start (nothing is subtracted yet) */
        Py_ssize_t nsel = 0;
        for (Py_ssize_t i = 0; i < ncand; i++) {
            int64_t p = cand[i];
            for (Py_ssize_t j = 0; j < k; j++)
                if (cnt[cells[j * m + p]] == 1) { hash_of[p] = (int8_t)j; round_of[p] = r; cand[nsel++] = p; break; }
        }
        if (nsel == 0) break;
        for (Py_ssize_t i = 0; i < nsel; i++)
            for (Py_ssize_t j = 0; j < k; j++) {
                int64_t c = cells[j * m + cand[i]];
                cnt[c]--;
                xr[c] ^= cand[i];
            }
        /* next round's candidates: the position left in each counter now pure */
        Py_ssize_t nnext = 0;
        for (Py_ssize_t i = 0; i < nsel; i++)
            for (Py_ssize_t j = 0; j < k; j++) {
                int64_t c = cells[j * m + cand[i]];
                if (cnt[c] == 1 && stamp[xr[c]] != r + 1) { stamp[xr[c]] = r + 1; next[nnext++] = xr[c]; }
            }
        int64_t *t = cand; cand = next; next = t;
        ncand = nnext;
        r++;
    }
    /* order: slot of round q starts after the core and rounds < q (cnt is free now) */
    {
        int64_t *start = cnt, *order = (int64_t *)ob.buf;
        if ((Py_ssize_t)r + 1 > nc) {
            free(cnt);
            start = cnt = calloc((size_t)r + 2, sizeof *cnt);
            if (!cnt) { PyErr_NoMemory(); goto done; }
        }
        for (int32_t q = 0; q <= r; q++) start[q] = 0;
        for (Py_ssize_t p = 0; p < m; p++) start[round_of[p] + 1]++;
        int64_t at = 0;
        for (int32_t q = 0; q <= r; q++) { int64_t c = start[q]; start[q] = at; at += c; }
        for (Py_ssize_t p = 0; p < m; p++) order[start[round_of[p] + 1]++] = p;
    }
    result = PyLong_FromLong(r);
done:
    free(cnt); free(xr); free(cand); free(next); free(stamp);
    PyBuffer_Release(&cb); PyBuffer_Release(&rb); PyBuffer_Release(&hb); PyBuffer_Release(&ob);
    return result;
}

static PyMethodDef methods[] = {
    {"peel", peel, METH_VARARGS, "peel(cells, m, k, counters, round_of, hash_of, order) -> rounds (see the file)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_peel", NULL, -1, methods};

PyMODINIT_FUNC PyInit__peel(void) { return PyModule_Create(&module); }
