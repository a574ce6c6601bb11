#!/usr/bin/env bash
# Run the whole test suite (sets up .venv with the test extras first).
# Extra arguments go to pytest (e.g. -k stream, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,train,bundle  # PyTorch for the training tests, PyInstaller for the bundle test
exec .venv/bin/python -m pytest "$@"
