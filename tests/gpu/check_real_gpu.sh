#!/usr/bin/env bash
# Check train-watchdog on a machine with a real NVIDIA GPU and PyTorch, without network.
#
#   tests/gpu/check_real_gpu.sh [--gpu N] [--alloc-mib MIB] [--phase-timeout-s S]
#
# It runs watchdogd supervising a small PyTorch job (tests/gpu/gpu_job.py) that holds GPU memory
# and prints tok/s, then (a) SIGKILLs the job and expects `exited` plus a healthy restart, and
# (b) makes the job free its CUDA memory but stay alive and expects `gpus_idle` plus a healthy
# restart. On the way it reads the NVML fault calls and the GPU's clock event reasons (SPEC §13)
# straight through pynvml and checks the daemon's status shows them. It prints a table of what
# was detected and how fast; exit 0 when all passed.
#
# Needs: python3 with torch, psutil, pyyaml and nvidia-ml-py. The daemon's other dependencies
# (structlog, sdnotify) and our own wheel come from $WHEELS (default: .whl in the repository
# root, filled by tests/gpu/fetch_wheels.sh) and are installed into a scratch folder, never into
# the system. Without our wheel the source tree is used. Environment: PYTHON (default python3),
# WHEELS, KEEP=1 keeps the scratch folder. --fake runs the same check over the NVML stand-in
# (tests/fake_nvml), without torch or a GPU: a dry run of this script.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
# Absolute, since the run happens from a scratch folder (no realpath: a venv's python is a link).
case "$PYTHON" in */*) PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")" ;; esac
WHEELS="${WHEELS:-$ROOT/.whl}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/watchdog-gpu-check.XXXXXX")"
FAKE=0
for arg in "$@"; do [ "$arg" = "--fake" ] && FAKE=1; done

cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

need_modules="psutil yaml pynvml"
[ "$FAKE" = 1 ] || need_modules="torch $need_modules"
for mod in $need_modules; do
  if ! "$PYTHON" -c "import $mod" 2>/dev/null; then
    echo "check_real_gpu: $PYTHON cannot import $mod (needed on this machine)" >&2
    exit 2
  fi
done

# Our pure-Python dependencies, from wheels: pip if it is there, else unzip (a pure-Python wheel
# is a zip of importable files). --no-deps: torch's environment already has the rest.
SITE="$WORK/site"
mkdir -p "$SITE"
wheels=()
for dist in structlog sdnotify train_watchdog; do
  found="$(ls "$WHEELS"/"$dist"-*.whl 2>/dev/null | sort | tail -n 1 || true)"
  if [ -n "$found" ]; then
    wheels+=("$found")
  elif [ "$dist" = train_watchdog ]; then
    echo "check_real_gpu: no train_watchdog wheel in $WHEELS: using the source tree"
  elif ! "$PYTHON" -c "import $dist" 2>/dev/null; then
    echo "check_real_gpu: $dist is neither importable nor in $WHEELS (run fetch_wheels.sh)" >&2
    exit 2
  fi
done
if [ "${#wheels[@]}" -gt 0 ]; then
  if ! "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$SITE" "${wheels[@]}"; then
    for whl in "${wheels[@]}"; do "$PYTHON" -m zipfile -e "$whl" "$SITE"; done
  fi
fi
# From the scratch folder: `python -m` puts the current folder first on sys.path, and a
# checkout's watchdog/ there would shadow the wheel under test.
cd "$WORK"
# Ours before anything installed: PyPI has an unrelated `watchdog` package of the same name.
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ls "$SITE"/train_watchdog-*.dist-info >/dev/null 2>&1; then export PYTHONPATH="$SITE"; fi
"$PYTHON" -c 'import structlog, sdnotify, watchdog.daemon as d; print("daemon:", d.__file__)' || {
  echo "check_real_gpu: the daemon cannot be imported" >&2; exit 2; }

if [ "$FAKE" = 1 ]; then
  make -s -C "$ROOT/tests/fake_nvml"
  export FAKE_NVML_DIR="$WORK/fakegpu"
  "$PYTHON" "$ROOT/tests/support/fakegpu.py" gpus "$FAKE_NVML_DIR" -n 2 >/dev/null
  # pynvml reads LD_LIBRARY_PATH only at process start: set it for the processes started below.
  export LD_LIBRARY_PATH="$ROOT/tests/fake_nvml/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

rc=0
"$PYTHON" "$HERE/real_gpu_check.py" --work "$WORK" "$@" || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "--- daemon log (last 40 lines)"; tail -n 40 "$WORK/daemon.log" 2>/dev/null || true
  echo "--- job log (last 20 lines)"; tail -n 20 "$WORK/job.log" 2>/dev/null || true
fi
exit "$rc"
