#!/usr/bin/env bash
# Run the whole test suite (sets up .venv with the test extras first if needed).
# Extra arguments go to pytest (e.g. -k stream, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --disable-pip-version-check -q -e '.[test]'
exec .venv/bin/python -m pytest "$@"
