"""hosts.common.gc_pauses: the opt-in GC pause profile."""
import gc
import io
import json
from contextlib import redirect_stderr

import pytest

from hosts.common import gc_pauses

pytestmark = pytest.mark.unit


def test_pauses_are_counted_and_timed_per_generation_and_phase():
    # t0, start, stop (setup) | end_setup | start, stop, start, stop (run) | record
    t = iter([0.0, 1.0, 1.5, 3.0, 4.0, 4.25, 5.0, 5.5, 10.0])
    prof = gc_pauses.GcPauses(clock=lambda: next(t))
    prof._callback("start", {"generation": 2})
    prof._callback("stop", {"generation": 2})
    prof.end_setup()
    prof._callback("start", {"generation": 0})
    prof._callback("stop", {"generation": 0})
    prof._callback("start", {"generation": 0})
    prof._callback("stop", {"generation": 0})
    rec = prof.record(host="w1")
    assert rec["host"] == "w1"
    assert rec["setup"]["gen"]["2"] == {"n": 1, "total_s": 0.5, "max_s": 0.5}
    assert rec["setup"]["wall_s"] == 3.0 and rec["setup"]["total_s"] == 0.5
    assert rec["run"]["gen"]["0"] == {"n": 2, "total_s": 0.75, "max_s": 0.5}
    assert rec["run"]["gen"]["2"]["n"] == 0
    assert rec["run"]["wall_s"] == 7.0 and rec["run"]["total_s"] == 0.75


def test_a_real_collection_reaches_the_profile_and_the_exit_line():
    hooks = []
    prof = gc_pauses.profile_from_env("lhc", "w3", {"INNET_PROFILE_GC": "1"}, at_exit=hooks.append)
    gc_pauses._active = None          # this test's profile only: setup_done() must not touch it
    try:
        gc.collect(1)
        assert prof.phases["setup"]["gen"][1]["n"] >= 1 and prof.phases["setup"]["gen"][1]["total_s"] > 0
        err = io.StringIO()
        with redirect_stderr(err):
            hooks[0]()
    finally:
        prof.uninstall()
    tag, payload = err.getvalue().split(" ", 1)
    rec = json.loads(payload)
    assert tag == "gc_pauses" and rec["program"] == "lhc" and rec["host"] == "w3"
    assert rec["setup"]["gen"]["1"]["n"] >= 1 and "run" not in rec
    assert prof._callback not in gc.callbacks             # the exit hook took it out


def test_profile_is_off_unless_asked_and_a_typo_is_refused():
    assert gc_pauses.profile_from_env("p", "h", {}) is None
    assert gc_pauses.profile_from_env("p", "h", {"INNET_PROFILE_GC": "0"}) is None
    with pytest.raises(ValueError, match="INNET_PROFILE_GC"):
        gc_pauses.profile_from_env("p", "h", {"INNET_PROFILE_GC": "yes"})


def test_schedstat_reads_cpu_and_runqueue_wait(tmp_path):
    f = tmp_path / "schedstat"
    f.write_text("2500000000 500000000 42\n")
    assert gc_pauses.schedstat(str(f)) == {"cpu_s": 2.5, "runqueue_wait_s": 0.5, "timeslices": 42}
    assert gc_pauses.schedstat(str(tmp_path / "missing")) is None


def test_setup_done_splits_a_running_profile_and_is_a_no_op_without_one():
    gc_pauses._active = None
    gc_pauses.setup_done()                      # no profile: nothing to do, no error
    gc_pauses._active = prof = gc_pauses.GcPauses()
    try:
        gc_pauses.setup_done()
        assert prof.phase == "run" and "run" in prof.phases
    finally:
        gc_pauses._active = None
