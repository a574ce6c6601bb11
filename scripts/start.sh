#!/usr/bin/env bash
# Set up flashdesk in .venv (first time: compiles llama.cpp, ~5 minutes on 2 cores),
# fetch the default model, and start the server on http://127.0.0.1:8080.
# Extra arguments go to `flashdesk serve` (e.g. --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "flashdesk needs Python 3.10 or newer (found: $("$PYTHON" --version))" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
echo "Installing flashdesk into .venv (the first time this builds llama.cpp: about 5 minutes) ..."
.venv/bin/python -m pip install --disable-pip-version-check -q -e .
.venv/bin/flashdesk pull smollm2
exec .venv/bin/flashdesk serve "$@"
