/* The interface between the soft switch's compiled ring loop (_pktio.c,
 * `Engine`) and a compiled program that handles frames in it (e.g. the INA
 * datapath, testbed/switch/ina/_fastpath.c): a program exports a PyCapsule
 * named RING_PROGRAM_CAPSULE holding a `RingProgramAPI`.
 *
 * Why a capsule and not a Python call per frame: the loop reads each frame in
 * place in its receive ring slot and hands the program a pointer; the program
 * writes what it sends through `emit`, which copies it into the loop's
 * per-port send buffer. No Python object is made per frame.
 */
#ifndef TESTBED_RING_PROGRAM_H
#define TESTBED_RING_PROGRAM_H

#include <Python.h>
#include <stdint.h>

#define RING_PROGRAM_CAPSULE "testbed.ring_program"
#define RING_PROGRAM_ABI 1

/* Send prefix + payload out of `port` (the two are joined into one frame).
 * 0, or -1 with a Python error set. */
typedef int (*ring_emit_fn)(void *ctx, long port, const uint8_t *prefix, Py_ssize_t plen,
                            const uint8_t *payload, Py_ssize_t len);

/* One memoised value a program may keep across the frames of one loop call
 * (the INA datapath: the last multicast replica list). The loop sets it to
 * {-1, NULL} before each call; `value` is borrowed from something `args` owns. */
typedef struct {
    int64_t key;
    PyObject *value;
} RingProgramMemo;

typedef struct {
    int abi;   /* RING_PROGRAM_ABI */
    /* One received frame of `in_port`: 0 handled (sent through emit, absorbed
     * or dropped and counted), 1 not the program's: the loop L2-forwards it,
     * -1 a Python error is set. `program` and `args` are what the Python side
     * passed to Engine.run. */
    int (*frame)(PyObject *program, PyObject *args, RingProgramMemo *memo, const uint8_t *f,
                 Py_ssize_t len, long in_port, ring_emit_fn emit, void *emit_ctx);
} RingProgramAPI;

#endif
