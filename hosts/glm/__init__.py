"""Numerical core of P4SGD-style training of generalized linear models (GLMs).

Pure numpy/scipy; no networking. The networked worker programs call into
`training` with an allreduce function (blocking or asynchronous) that goes
through the in-network aggregation transport.

Modules:
    models      loss / derivative / prediction of linreg, logreg, svm
    data        Dataset, LIBSVM loader, synthetic generators, builtin real data
    profiles    public LIBSVM datasets' shapes (sourced), generated as seeded GLM tasks
    datasets    load_dataset: a scenario's dataset spec -> Dataset (over data and profiles)
    partition   feature (column) partitioning across model-parallel workers
    (fixed point lives in hosts/ina/fixed_point.py, shared with the transport)
    training    reference, model-parallel (pipelined) and data-parallel SGD
    devices     compute device time models (CPU, emulated U280, emulated GPU)
    u280_xrt    adapter that would drive a real U280 through XRT (dry-runnable)
"""
