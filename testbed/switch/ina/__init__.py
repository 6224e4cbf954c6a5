"""The soft switch's in-network aggregation program: a Python mirror of
p4/ina.p4, control by control (job_table, aggregator, drop_simulator, egress,
forward), with the same table, action, register and counter names.
Importing the package registers the pipeline as "ina"."""
from .pipeline import InaPipeline, build

__all__ = ["InaPipeline", "build"]
