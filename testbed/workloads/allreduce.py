"""Allreduce workload: every worker contributes a float32 tensor, all end with the sum.

Baseline for the in-network systems: host ring allreduce, a parameter server, or
in-switch aggregation, over a range of tensor sizes.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from testbed.workloads import register_workload

# ---------------------------------------------------------------------------
# Params model (validated as `workload:` in scenario files)
# ---------------------------------------------------------------------------


@register_workload
class AllreduceWorkload(BaseModel):
    """Repeated allreduce of float32 tensors of several sizes."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    kind: Literal["allreduce"] = Field(
        "allreduce", description="Workload type; selects which fields below apply.")
    algorithm: Literal["ring", "ps", "switch"] = Field(
        "ring", description="ring: host ring allreduce; ps: a parameter-server host `ps`; "
                            "switch: in-network aggregation on the switch.")
    sizes: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [256, 4096, 65536, 1048576], min_length=1,
        description="Tensor sizes to allreduce, in float32 elements (run in this order).")
    iterations: int = Field(
        20, ge=1, description="Measured allreduce operations per size.")
    warmup: int = Field(
        2, ge=0, description="Unmeasured operations per size before the measured ones.")
    compute_ms: float = Field(
        0.0, ge=0, description="Modeled compute time per iteration; a straggler's `slowdown` scales it.")
    timeout_s: float = Field(
        120.0, gt=0, description="A host gives up if one operation takes longer than this.")

    def extra_hosts(self) -> list[str]:
        """Hosts besides the workers w1..wN that this workload needs."""
        return ["ps"] if self.algorithm == "ps" else []


# ---------------------------------------------------------------------------
# Runtime (host programs, result collection) -- added by the runner's owner.
# Import testbed.scenario only inside functions (see testbed/workloads/__init__.py).
# ---------------------------------------------------------------------------
