"""LHC: lossless homomorphic gradient compression aggregated in the switch.

codec.py (support bitmap, count sketch, peeling plan, encode/decode),
sizing.py (sketch rows from the union support), scale.py (the shared
fixed-point scale, agreed inside the support round), gradients.py and
profiles.py (gradient sources), device.py (modeled GPU time of encode/decode),
worker.py (the host program of workload kind `lhc`). See docs/lhc.md.
"""
