"""The soft switch's in-network aggregation program: a Python mirror of
p4/ina.p4, control by control (job_table, aggregator, drop_simulator, egress,
forward), with the same table, action, register and counter names; the numpy
`InaPipeline` is the reference, `CompiledInaPipeline` (fastpath.py) runs its
hot loop in C. Importing the package registers the pipeline as "ina"
(`fastpath.build` picks the implementation from config `pipeline_impl`)."""
from testbed.switch.pipeline import register_pipeline

from .fastpath import CompiledInaPipeline, build
from .pipeline import InaPipeline

register_pipeline("ina", build)

__all__ = ["CompiledInaPipeline", "InaPipeline", "build"]
