#!/usr/bin/env bash
# Set up flashdesk in .venv (the first time this builds llama.cpp: about 5 minutes),
# fetch the default model, and start the server on http://127.0.0.1:8080.
# Extra arguments go to `flashdesk serve` (e.g. --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/flashdesk pull smollm2
exec .venv/bin/flashdesk serve "$@"
