#!/usr/bin/env bash
# Fill the wheel folder that check_real_gpu.sh installs from on a machine without network:
# structlog, sdnotify and our own wheel, for Python 3.12 on manylinux x86_64 (all three are
# pure Python, so they also fit 3.11 and 3.13).
#
#   tests/gpu/fetch_wheels.sh [DIR]      DIR defaults to $WHEELS, else .whl in the repository root
#
# sdnotify 0.3.2 is published as a source archive only: it is built into a wheel here.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
DIR="${1:-${WHEELS:-$ROOT/.whl}}"
mkdir -p "$DIR"

pip_() { "$PYTHON" -m pip --disable-pip-version-check "$@"; }

# The versions pyproject.toml allows.
pip_ download --dest "$DIR" --no-deps --only-binary=:all: \
  --python-version 3.12 --platform manylinux2014_x86_64 --implementation cp --abi cp312 \
  'structlog>=23.1,<27'
pip_ wheel --wheel-dir "$DIR" --no-deps 'sdnotify>=0.3.2,<0.4'
# Build our wheel from a copy: pip builds in place and would leave build/ in the checkout.
SRC="$(mktemp -d "${TMPDIR:-/tmp}/train-watchdog-src.XXXXXX")"
trap 'rm -rf "$SRC"' EXIT
for path in pyproject.toml README.md LICENSE watchdog; do
  if [ -e "$ROOT/$path" ]; then cp -R "$ROOT/$path" "$SRC/"; fi
done
find "$SRC" -name __pycache__ -prune -exec rm -rf {} +
pip_ wheel --wheel-dir "$DIR" --no-deps "$SRC"

ls -1 "$DIR"
