#!/usr/bin/env bash
# Run the whole test suite on this machine, from nothing: the system packages the tests drive
# (scripts/system-packages.sh test: apt-get, as root or through sudo), then .venv with the test
# extras, then pytest. Extra arguments go to pytest (e.g. -k stream, -x; --fast: the pure-logic
# tier, tests/tiers.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system-packages.sh test
# PyTorch for the training tests, PyInstaller for the bundle test; the portable llama.cpp build,
# so the bundle the tests build and smoke-test is the one the Linux package ships.
FLASHDESK_PORTABLE=1 bash scripts/setup.sh test,train,bundle
# Where apt has no real chromium (Ubuntu ships a snap launcher), the browser tests use Playwright's own.
if [ -z "${FLASHDESK_TEST_CHROMIUM:-}" ] && ! command -v chromium >/dev/null; then
  .venv/bin/python -m playwright install --with-deps chromium  # the browser and the libraries it needs (apt)
fi
exec .venv/bin/python -m pytest "$@"
