"""GPU measurements run on a lent GPU machine: bench/gpu_constants.py's parts (one module
each: env, launch, stream, lhc_codec, glm, fwd_bwd) and the plumbing they and
bench/gpu_layer_times.py share (common). The GPU host has no project venv: these modules
import only numpy, torch (torchvision / transformers through importlib, inside functions)
and numpy-only hosts.lhc modules.
"""
