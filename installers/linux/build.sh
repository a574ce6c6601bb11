#!/usr/bin/env bash
# Build the Linux app folder and its .tar.gz, one function per step:
#     bash installers/linux/build.sh                 # every step, in order
#     bash installers/linux/build.sh bundle smoke    # only these steps
# Steps: setup (venv with llama-cpp-python built for the backend, flashdesk with its native
# library, PyInstaller) · model (fetch the default model into the build cache) · bundle
# (PyInstaller, one folder) · package (dist/flashdesk-<version>-linux-x86_64.tar.gz) · smoke
# (start the built program headless on loopback, wait for /health, one chat completion
# through the openai client, clean stop). Signing does not apply to a Linux tarball.
# llama.cpp is built portable (FLASHDESK_PORTABLE: GGML_NATIVE=OFF, for CPUs other than the build
# machine's). GPU builds: CMAKE_ARGS="-DGGML_CUDA=on" (passed through to scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY=.venv/bin/python
DIST=${FLASHDESK_DIST:-$ROOT/dist}
WORK=${FLASHDESK_BUILD:-$ROOT/build/pyinstaller}
CACHE=${FLASHDESK_BUILD_CACHE:-$HOME/.cache/flashdesk-build}

setup() {
  # builds llama-cpp-python (once per flag set) and flashdesk's native library
  FLASHDESK_PORTABLE=1 bash scripts/setup.sh bundle
}

model() {
  # The default model, verified by the product's own pull, into a store used only for building.
  "$PY" - "$CACHE" <<'PY'
import sys
from engine.models.pull import pull
from engine.models.store import ModelStore, no_progress
m = pull(ModelStore(sys.argv[1]), "smollm2", progress=no_progress)
print(m.path)
PY
}

bundle() {
  local gguf
  gguf=$(model | tail -1)
  FLASHDESK_BUNDLE_MODEL_FILE="$gguf" "$PY" -m PyInstaller --noconfirm --log-level WARN \
    --distpath "$DIST" --workpath "$WORK" installers/flashdesk.spec
  echo "app folder: $DIST/flashdesk"
}

version() {
  "$PY" -c 'from importlib.metadata import version; print(version("flashdesk"))'
}

package() {
  local out
  out="$DIST/flashdesk-$(version)-linux-$(uname -m).tar.gz"
  tar -C "$DIST" -czf "$out" flashdesk
  echo "package: $out ($(du -h "$out" | cut -f1))"
}

smoke() {
  "$PY" installers/smoke_test.py "$DIST/flashdesk/flashdesk"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(setup bundle package smoke)
for step in "${steps[@]}"; do
  case "$step" in
    setup|model|bundle|package|smoke) echo "== $step"; "$step" ;;
    *) echo "unknown step: $step (steps: setup model bundle package smoke)" >&2; exit 2 ;;
  esac
done
