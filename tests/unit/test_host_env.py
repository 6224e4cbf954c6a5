"""testbed.workloads.base.host_env: what every host program's environment holds."""
import subprocess
import sys

from testbed.process_env import BLAS_THREAD_VARS
from testbed.workloads.base import PROJECT_ROOT, host_env

THREADS_AFTER_NUMPY = "import os, numpy; print(len(os.listdir('/proc/self/task')))"


def test_a_host_program_has_one_thread_after_importing_numpy(monkeypatch):
    for var in BLAS_THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    out = subprocess.run([sys.executable, "-c", THREADS_AFTER_NUMPY], env=host_env(),
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == 1


def test_the_users_own_blas_setting_is_kept_and_the_project_is_importable(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    env = host_env()
    assert env["OPENBLAS_NUM_THREADS"] == "3" and env["OMP_NUM_THREADS"] == "1"
    assert env["PYTHONPATH"].split(":")[0] == str(PROJECT_ROOT)
