"""Benchmarks (`make bench` = `python -m bench`): measurements, never assertions.

Each module here with a `run(out_dir) -> dict` function is one benchmark;
`python -m bench` finds and runs them all. Speed is reported as ratios measured
side by side in one run, since absolute numbers drift on shared machines.
"""
