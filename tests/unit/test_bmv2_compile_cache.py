"""The bmv2 backend compiles a run's program once: later points of the run get a
copy of the first point's p4c output (testbed/switch/bmv2.py, compile_program);
a changed P4 source or a folder that is not a run's point compiles again."""
from __future__ import annotations

from pathlib import Path

import pytest
from testbed.switch import bmv2

pytestmark = pytest.mark.unit


@pytest.fixture
def fake_p4c(monkeypatch):
    calls: list[Path] = []

    def compile_p4(p4_path, out_dir, **kw):
        build = bmv2.compile_argv(p4_path, out_dir)
        build.json_path.parent.mkdir(parents=True, exist_ok=True)
        build.json_path.write_text(f'{{"source": "{Path(p4_path).read_text()}"}}')
        build.p4info_path.write_text("pkg_info {}\n")
        build.json_path.with_suffix(".p4c.log").write_text("")
        calls.append(Path(out_dir))
        return build

    monkeypatch.setattr(bmv2, "compile_p4", compile_p4)
    return calls


def test_second_point_of_a_run_copies_the_first_points_build(fake_p4c, tmp_path):
    p4 = tmp_path / "p4"
    p4.mkdir()
    (p4 / "prog.p4").write_text("v1")
    logs = tmp_path / "run" / "logs"
    first = bmv2.compile_program("prog", logs / "000-a" / "bmv2", p4_dir=p4)
    second = bmv2.compile_program("prog", logs / "001-b" / "bmv2", p4_dir=p4)
    assert fake_p4c == [logs / "000-a" / "bmv2"]
    assert second.json_path == logs / "001-b" / "bmv2" / "prog.json"
    assert second.json_path.read_text() == first.json_path.read_text() == '{"source": "v1"}'
    assert second.p4info_path.read_text() == "pkg_info {}\n"

    (p4 / "prog.p4").write_text("v2")                     # edited source: compiled again
    third = bmv2.compile_program("prog", logs / "002-c" / "bmv2", p4_dir=p4)
    assert fake_p4c[-1] == logs / "002-c" / "bmv2" and third.json_path.read_text() == '{"source": "v2"}'


def test_a_folder_outside_a_run_is_always_compiled(fake_p4c, tmp_path):
    p4 = tmp_path / "p4"
    p4.mkdir()
    (p4 / "prog.p4").write_text("v1")
    bmv2.compile_program("prog", tmp_path / "build1", p4_dir=p4)
    bmv2.compile_program("prog", tmp_path / "build2", p4_dir=p4)
    assert fake_p4c == [tmp_path / "build1", tmp_path / "build2"]
