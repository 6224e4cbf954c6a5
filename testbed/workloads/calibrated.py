"""Params every time-calibrated workload shares (lhc, phub, torch, easgd,
shadowsync, p4sgd): the hardware it models, whether the soft switch dilates the
network to the point's TDF, how much headroom that TDF keeps over the
emulator's own slowdown, and how many calibration rounds find it
(docs/time-fidelity.md). What a calibration round does (its iterations or
batches) is each workload's own field. A workload sets FIGURES so that its
figure names are in the scenario schema before any scenario names them.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from testbed.workloads.base import register_figures_if_loaded

# Wall time a point's deadline allows each training iteration (lhc, phub: their
# `timeout_s`). A calibration whose TDF would make one iteration on the modeled
# hardware take longer is refused at once (hosts.common.calibration.
# refuse_if_crawling, given it as the calibration's `iteration_wall_s`), not left to
# crawl into the deadline.
ITERATION_WALL_S = 30.0


class CalibratedWorkloadParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    FIGURES: ClassVar[tuple[str, ...]] = ()

    hardware: str = Field("tofino1-100g", description="Hardware network profile (testbed/fidelity/profiles/"
                          "<name>.yaml, or a path): the modeled time of every operation, for calibration, "
                          "network dilation, the fidelity monitor and the projection.")
    calibration_rounds: int = Field(3, ge=1, le=10, description="time_scale auto: calibration rounds; "
                                    "round 0 runs undilated, later ones on the dilated network.")
    dilate_network: bool = Field(
        True, description="On the soft switch, slow the network to the point's TDF (the switch holds each "
                          "frame until the dilated `hardware` would deliver it; docs/time-fidelity.md). "
                          "false: the network runs at the emulator's own speed.")
    network_headroom: Literal["auto"] | Annotated[float, Field(ge=1.0, le=100.0)] = Field(
        16.0, description="dilate_network with time_scale auto: how far the TDF stays above the emulator's own "
                          "slowdown. A number: TDF = that x the median per-operation slowdown calibration's "
                          "undilated round measured. auto: what the fidelity monitor's validity rule needs given "
                          "that round's distribution (median and tail; docs/time-fidelity.md, 'How much "
                          "headroom'): TDFs 2.4x lower, not yet the default: round 0's median varies up to 5x "
                          "between repeats of one point here, and the quick reproductions lost valid points under "
                          "it.")

    @model_validator(mode="before")
    @classmethod
    def _figures(cls, data: Any) -> Any:
        register_figures_if_loaded(*cls.FIGURES)
        return data

    # What a retry of a calibrated point runs at (WorkloadRuntime.retune) ------------------
    def at_fixed_tdf(self, tdf: float) -> "CalibratedWorkloadParams | None":
        """This workload with calibration replaced by the fixed TDF `tdf`, its network
        dilated to it as calibration would have dilated it; None where the workload's
        hosts cannot dilate the network at a fixed TDF (then no retry is made).

        None also where the calibration rounds train (the weights move): a retry at a
        fixed TDF, without them, would train fewer iterations than its first attempt,
        another experiment (a retried PHub point ended at other weights than the wide
        PS at the same seed, fresh-clone CI 2026-11-27)."""
        return None

    def retry_fits(self, tdf: float, fidelity: dict[str, Any]) -> bool:
        """Whether a retry at `tdf` keeps within the point's deadline: as calibration
        refuses a TDF that would make one iteration on the modeled hardware outrun
        ITERATION_WALL_S, so is a retry (the projection's hardware iteration,
        `hw_iter_s`, times the TDF). Unknown iteration time: no retry."""
        hw_iter_s = fidelity.get("hw_iter_s")
        return bool(hw_iter_s) and tdf * float(hw_iter_s) <= ITERATION_WALL_S


def dilation_block(wl: CalibratedWorkloadParams, switch_info: dict[str, Any], modeled: bool,
                   hw_op_s: Callable[[], float]) -> dict[str, Any] | None:
    """The hosts' `network_dilation` block: the soft switches' control files, the
    `hardware` profile's hop, the headroom rule, and hw_op_s (the modeled time of
    the largest operation a transport's timers wait for; called only when there is
    a block). None where the network cannot or should not be dilated: no soft
    switch, dilate_network false, or a point whose time is measured, not modeled."""
    from testbed.fidelity.constants import load_profile  # noqa: PLC0415
    from testbed.fidelity.network_model import dilation_hardware  # noqa: PLC0415

    control = switch_info.get("dilation_control")
    if not control or not wl.dilate_network or not modeled:
        return None
    return {"control": list(control), "hardware": dilation_hardware(load_profile(wl.hardware)),
            "headroom": wl.network_headroom, "hw_op_s": hw_op_s()}
