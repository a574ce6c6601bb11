#!/usr/bin/env bash
# Run the whole test suite (sets up .venv with the test extras first).
# Extra arguments go to pytest (e.g. -k stream, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
# PyTorch for the training tests, PyInstaller for the bundle test; the portable llama.cpp build,
# so the bundle the tests build and smoke-test is the one the Linux package ships.
FLASHDESK_PORTABLE=1 bash scripts/setup.sh test,train,bundle
exec .venv/bin/python -m pytest "$@"
