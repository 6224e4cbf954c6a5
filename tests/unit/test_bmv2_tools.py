"""Finding BMv2/p4c (testbed/switch/bmv2_tools.py) with fake executables in
temporary prefixes: the lookup order (switch.options.bmv2_prefix, then
$P4TOOLS_PREFIX, then PATH), version checks, and the messages a user gets."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed import doctor
from testbed.switch import bmv2_tools as bt

SWITCH_OUT = "1.15.5-9674187f"
P4C_OUT = "p4c-bm2-ss\\nVersion 1.2.4.8 (SHA: 32893b7e8 BUILD: Release)"


def _exe(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


def make_prefix(root: Path, switch_out: str = SWITCH_OUT, p4c_out: str = P4C_OUT,
                thrift: bool = True, skip: tuple[str, ...] = ()) -> Path:
    """<root>/bin with fake tools; the CLI's shebang names a fake Python that
    'has' thrift (exit 0 on `-c "import thrift"`) or not."""
    bin_ = root / "bin"
    (root / "lib").mkdir(parents=True, exist_ok=True)
    py = _exe(root / "py" / "python3", f"#!/bin/sh\nexit {0 if thrift else 1}\n")
    tools = {bt.SWITCH: f"#!/bin/sh\nprintf '{switch_out}\\n'\n",
             bt.P4C: f"#!/bin/sh\nprintf '{p4c_out}\\n'\n",
             bt.CLI: f"#!{py}\n"}
    for name, body in tools.items():
        if name not in skip:
            _exe(bin_ / name, body)
    return root


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv(bt.PREFIX_ENV, raising=False)
    monkeypatch.setattr(bt, "CLI_PYTHONS", ())     # only the fake CLI's own interpreter
    bt.clear_cache()
    yield
    bt.clear_cache()


def test_prefix_from_the_environment(monkeypatch, tmp_path):
    prefix = make_prefix(tmp_path / "p4")
    monkeypatch.setenv(bt.PREFIX_ENV, str(prefix))
    tools = bt.find_tools()
    assert (tools.switch, tools.p4c, tools.cli) == (prefix / "bin" / bt.SWITCH,
                                                   prefix / "bin" / bt.P4C, prefix / "bin" / bt.CLI)
    assert (tools.switch_version, tools.p4c_version) == ("1.15.5", "1.2.4.8")
    assert tools.cli_python == str(prefix / "py" / "python3")
    assert tools.env({"LD_LIBRARY_PATH": "/x"})["LD_LIBRARY_PATH"] == f"{prefix / 'lib'}:/x"
    assert tools.cli_argv(9091)[-4:] == ["--thrift-ip", "127.0.0.1", "--thrift-port", "9091"]
    ok, where = bt.bmv2_available()
    assert ok and "simple_switch_grpc 1.15.5" in where and f"prefix {prefix}" in where


def test_named_prefix_wins_and_never_falls_back_to_path(monkeypatch, tmp_path):
    on_path = make_prefix(tmp_path / "usr")
    monkeypatch.setenv("PATH", f"{on_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv(bt.PREFIX_ENV, str(make_prefix(tmp_path / "env")))
    named = make_prefix(tmp_path / "named", skip=(bt.P4C,))
    with pytest.raises(bt.ToolsMissing) as e:
        bt.find_tools(named)
    assert f"p4c-bm2-ss not found in {named}/bin (looked in switch.options.bmv2_prefix)" in str(e.value)
    assert bt.FIX in str(e.value)
    assert bt.find_tools().prefix == tmp_path / "env"          # then $P4TOOLS_PREFIX
    monkeypatch.delenv(bt.PREFIX_ENV)
    found = bt.find_tools()                                       # then PATH
    assert found.prefix is None and found.switch == on_path / "bin" / bt.SWITCH
    assert found.env({})  == {}                                   # no prefix: nothing added


def test_missing_everywhere_names_each_tool_and_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    ok, why = bt.bmv2_available()
    assert not ok
    assert why.startswith("simple_switch_grpc not found on PATH; p4c-bm2-ss not found on PATH; "
                          "simple_switch_CLI not found on PATH (looked in PATH).")
    assert "p4lang-bmv2" in why and "P4TOOLS_PREFIX" in why


def test_prefix_that_is_not_a_directory(tmp_path):
    with pytest.raises(bt.ToolsMissing, match=r"switch.options.bmv2_prefix: .*/nope is not a directory"):
        bt.find_tools(tmp_path / "nope")


def test_too_old_versions_are_refused(tmp_path):
    prefix = make_prefix(tmp_path, switch_out="1.14.0", p4c_out="Version 1.2.3.9")
    with pytest.raises(bt.ToolsMissing) as e:
        bt.find_tools(prefix)
    assert "is version 1.14.0; the bmv2 backend needs simple_switch_grpc >= 1.15.0" in str(e.value)
    assert "is version 1.2.3.9; the bmv2 backend needs p4c-bm2-ss >= 1.2.4" in str(e.value)


def test_a_tool_that_cannot_load_its_libraries(tmp_path):
    prefix = make_prefix(tmp_path)
    _exe(prefix / "bin" / bt.SWITCH, "#!/bin/sh\necho 'simple_switch_grpc: error while loading "
         "shared libraries: libpi.so.0: cannot open shared object file' >&2\nexit 127\n")
    with pytest.raises(bt.ToolsMissing) as e:
        bt.find_tools(prefix)
    assert "--version failed: simple_switch_grpc: error while loading shared libraries" in str(e.value)
    assert "<prefix>/lib is used" in str(e.value)


def test_cli_needs_python_thrift(tmp_path):
    with pytest.raises(bt.ToolsMissing, match="needs a Python with the thrift module.*python3-thrift"):
        bt.find_tools(make_prefix(tmp_path, thrift=False))


@pytest.mark.parametrize("text, version", [
    ("1.15.5-9674187f", (1, 15, 5)),
    ("p4c-bm2-ss\nVersion 1.2.4.8 (SHA: 32893b7e8 BUILD: Release)", (1, 2, 4, 8)),
    ("no version here", None),
])
def test_parse_version(text, version):
    assert bt.parse_version(text) == version


def test_doctor_reports_path_and_version_or_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    missing = doctor.check_bmv2()
    assert (missing.ok, missing.optional) == (False, True)
    assert "simple_switch_grpc not found on PATH" in missing.detail and missing.fix == bt.FIX
    bt.clear_cache()
    monkeypatch.setenv(bt.PREFIX_ENV, str(make_prefix(tmp_path / "p4")))
    found = doctor.check_bmv2()
    assert found.ok and "simple_switch_grpc 1.15.5" in found.detail and "p4c-bm2-ss 1.2.4.8" in found.detail


def test_the_compiler_alone(tmp_path):
    prefix = make_prefix(tmp_path, skip=(bt.SWITCH, bt.CLI))     # p4c without BMv2
    assert bt.p4c_available(prefix) == (True, f"p4c-bm2-ss 1.2.4.8 ({prefix}/bin/p4c-bm2-ss)")
    assert not bt.bmv2_available(prefix)[0]
    ok, why = bt.p4c_available(tmp_path / "nothing")
    assert not ok and "is not a directory" in why
