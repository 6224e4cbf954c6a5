#!/usr/bin/env bash
# Installs everything the testbed needs: system packages (apt), the project's
# virtual environment, and Debian's mininet exposed to that venv alone.
# Idempotent: safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

# gcc + python3-dev: scripts/build_fastpath.py compiles the INA pipeline's C hot loop.
# openssh-server + sudo: tests/mininet/test_cluster_real.py runs `net.mode: cluster` on two
# namespaces with an sshd of its own each (Mininet's cluster code runs ssh and sudo); the test
# never uses the system's sshd service (on a systemd machine the package enables one).
APT_PACKAGES=(mininet bridge-utils tcpdump tshark ethtool nftables iproute2 iputils-ping procps psmisc util-linux
              gcc python3-dev openssh-server sudo)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer it up front.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: system packages present"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating virtual environment $VENV"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1
# The machine's pip config names local mirror folders that may be absent; hide
# only those warnings, keep every real error.
"$VENV/bin/python" -m pip install -q -e '.[test]' 2> >(grep -v 'is ignored: it is neither' >&2)

# Expose only Debian's mininet package to the venv: a folder holding one
# symlink, put on sys.path by a .pth file (no other Debian packages leak in).
MN_SRC=$(/usr/bin/python3 -c 'import mininet, os; print(os.path.dirname(mininet.__file__))' 2>/dev/null || true)
if [ -z "$MN_SRC" ]; then
  for d in /usr/lib/python3/dist-packages/mininet; do [ -d "$d" ] && MN_SRC=$d; done
fi
if [ -n "$MN_SRC" ]; then
  mkdir -p "$VENV/debian-mininet"
  ln -sfn "$MN_SRC" "$VENV/debian-mininet/mininet"
  SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$(cd "$VENV/debian-mininet" && pwd)" > "$SITE/debian_mininet.pth"
  "$VENV/bin/python" -c 'import mininet.net; print("setup: mininet", mininet.net.VERSION, "importable from the venv")'
else
  echo "setup: WARNING: Debian's mininet package not found; the mininet tier will be skipped" >&2
fi
# PyTorch must be the pinned CPU build: a different version or any CUDA package
# (nvidia-*) means pip resolved torch from somewhere else; stop here, loudly.
"$VENV/bin/python" - <<'PYEOF'
import importlib.metadata as md, sys
import torch
want = "2.13.0"
cuda = sorted(d.metadata["Name"] for d in md.distributions()
              if (d.metadata["Name"] or "").lower().startswith("nvidia-"))
if not torch.__version__.startswith(want) or cuda or torch.version.cuda:
    sys.exit(f"setup: ERROR: expected the CPU build of torch {want}, got torch {torch.__version__} "
             f"(CUDA {torch.version.cuda}), CUDA packages {cuda or 'none'}; remove them "
             f"(.venv/bin/python -m pip uninstall torch {' '.join(cuda)}) and install "
             f"torch=={want} from the CPU wheel index")
print(f"setup: torch {torch.__version__} (CPU build, no CUDA packages)")
PYEOF
# The compiled INA pipeline (testbed/switch/ina/_fastpath.c -> .so in the package).
"$VENV/bin/python" scripts/build_fastpath.py
"$VENV/bin/python" -c 'import p4runtime_sh.shell, google.protobuf as pb; print("setup: p4runtime-shell OK, protobuf", pb.__version__)'
echo "setup: done. Try: make run"
