#!/usr/bin/env bash
# Builds and installs the Python package (`pip install ./python`, the wheel built once by maturin)
# into a virtual environment of its own under target/, with what its tests need from PyPI, and
# runs its tests (pytest, python/tests). Exits non-zero if anything fails. Needs Rust (rustup) and
# CPython 3.9+ with venv (Debian: python3-venv, which scripts/setup.sh installs); the tests use
# squashfs-tools, and as root the kernel's squashfs mount.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/python-venv
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" || {
    echo "python/test.sh: cannot make a virtual environment with $python; install python3-venv (scripts/setup.sh does)" >&2
    exit 1
  }
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# `python -m pip`, not bin/pip: a venv copied from another checkout keeps bin/pip's shebang,
# which names the other checkout's interpreter and would install the package there.
"$venv/bin/python" -m pip install --quiet maturin pytest fsspec aiohttp
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps ./python
"$venv/bin/python" -m pytest python/tests -q -p no:cacheprovider -rs
