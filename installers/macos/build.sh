#!/usr/bin/env bash
# Build the macOS app (flashdesk.app), sign it, wrap it in a .dmg and notarize it, one function
# per step:
#     bash installers/macos/build.sh                  # every step, in order
#     bash installers/macos/build.sh bundle smoke     # only these steps
# Steps: setup · model · bundle · sign · dmg · notarize · smoke (see each function).
# Apple silicon (arm64) with Metal. Needs Xcode command line tools (clang, git, codesign, hdiutil,
# xcrun notarytool/stapler) and Python 3.10+.
# NOT RUN YET: written and reviewed on Linux, where only installers/linux/build.sh was built and
# smoke-tested.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PYTHON=${PYTHON:-python3}
PY=.venv/bin/python
DIST=${FLASHDESK_DIST:-$ROOT/dist}
WORK=${FLASHDESK_BUILD:-$ROOT/build/pyinstaller}
CACHE=${FLASHDESK_BUILD_CACHE:-$HOME/.cache/flashdesk-build}
APP="$DIST/flashdesk.app"
LLAMA_VERSION=0.3.36
ENTITLEMENTS="$ROOT/installers/macos/entitlements.plist"

setup() {
  # Not scripts/setup.sh: it names its wheelhouse with sha256sum, which macOS lacks (shasum here).
  # GGML_METAL_EMBED_LIBRARY: the Metal shader library is compiled into libggml-metal, so no loose
  # .metallib file has to be found at run time or shipped. GGML_LLAMAFILE=ON: the fast
  # prompt path above the verify band, which the patch keeps off it. GGML_NATIVE=OFF: not tuned to the build machine's CPU.
  # GGML_BATCH_INVARIANT: flashdesk's patches (native/llama-patches), so that Metal verify rows
  # compute like single tokens; built from the patched source, the patch set in the wheelhouse name.
  local flags="-DGGML_METAL=on -DGGML_METAL_EMBED_LIBRARY=on -DGGML_LLAMAFILE=ON -DGGML_NATIVE=OFF -DGGML_BATCH_INVARIANT=ON"
  local key house
  key="$flags patches=$("$PYTHON" scripts/llama_source.py digest)"
  house="${FLASHDESK_WHEELHOUSE:-$HOME/.cache/flashdesk-wheels}/$(printf '%s' "$key" | shasum -a 256 | cut -c1-12)"
  [ -x "$PY" ] || "$PYTHON" -m venv .venv
  local pip=("$PY" -m pip --disable-pip-version-check -q)
  if ! compgen -G "$house/llama_cpp_python-$LLAMA_VERSION-*.whl" >/dev/null; then
    echo "Building llama.cpp (llama-cpp-python $LLAMA_VERSION, $flags) ..."
    local src
    src=$("$PYTHON" scripts/llama_source.py unpack "$house.src")
    CMAKE_ARGS="$flags" "${pip[@]}" wheel --no-cache-dir --no-deps "$src" -w "$house"
    rm -rf "$house.src"
  fi
  "${pip[@]}" install --force-reinstall --no-deps --find-links "$house" "llama-cpp-python==$LLAMA_VERSION"
  "${pip[@]}" install --find-links "$house" -e ".[bundle]"  # flashdesk with its native library, PyInstaller
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

version() {
  "$PY" -c 'from importlib.metadata import version; print(version("flashdesk"))'
}

bundle() {
  # PyInstaller builds the one-folder app and, from the spec's BUNDLE() step (darwin only),
  # dist/flashdesk.app (llama.cpp's dylibs keep their llama_cpp/lib layout inside it).
  local gguf
  gguf=$(model | tail -1)
  rm -rf "$APP"
  FLASHDESK_BUNDLE_MODEL_FILE="$gguf" FLASHDESK_VERSION="$(version)" "$PY" -m PyInstaller --noconfirm \
    --log-level WARN --distpath "$DIST" --workpath "$WORK" installers/flashdesk.spec
  # The Metal shaders must be inside libggml-metal, not a loose file next to it.
  if find "$APP" -name '*.metallib' | grep -q .; then
    echo "a loose .metallib is in the app: was GGML_METAL_EMBED_LIBRARY on?" >&2; exit 1
  fi
  find "$APP" -name 'libggml-metal*' | grep -q . || { echo "no libggml-metal in the app: not a Metal build" >&2; exit 1; }
  echo "app: $APP"
}

sign() {
  # FLASHDESK_CODESIGN_IDENTITY: a "Developer ID Application: ..." identity in the keychain.
  # Inside out: every nested Mach-O file (dylibs, Python extension .so files, the Python library)
  # first, then the executable and the app with the hardened runtime and the entitlements.
  # No --deep: it would sign everything with the app's entitlements and hides what was signed.
  if [ -z "${FLASHDESK_CODESIGN_IDENTITY:-}" ]; then
    echo "sign: FLASHDESK_CODESIGN_IDENTITY is not set, skipping (PyInstaller's ad-hoc signature stays; Gatekeeper will refuse the app)"
    return 0
  fi
  local id="$FLASHDESK_CODESIGN_IDENTITY" f n=0
  while IFS= read -r -d '' f; do
    [ -L "$f" ] && continue
    if file -b "$f" | grep -q 'Mach-O'; then
      codesign --force --options runtime --timestamp --sign "$id" "$f"
      n=$((n + 1))
    fi
  done < <(find "$APP/Contents" -type f ! -path "$APP/Contents/MacOS/flashdesk" -print0)
  codesign --force --options runtime --timestamp --entitlements "$ENTITLEMENTS" --sign "$id" "$APP/Contents/MacOS/flashdesk"
  codesign --force --options runtime --timestamp --entitlements "$ENTITLEMENTS" --sign "$id" "$APP"
  codesign --verify --strict --verbose=2 "$APP"
  echo "signed $n nested files and the app"
}

dmg() {
  local out stage
  out="$DIST/flashdesk-$(version)-macos-$(uname -m).dmg"
  stage=$(mktemp -d)
  cp -R "$APP" "$stage/"
  ln -s /Applications "$stage/Applications"  # drag the app onto it
  rm -f "$out"
  hdiutil create -volname flashdesk -srcfolder "$stage" -fs HFS+ -format UDZO -ov "$out"
  rm -rf "$stage"
  if [ -n "${FLASHDESK_CODESIGN_IDENTITY:-}" ]; then
    codesign --force --timestamp --sign "$FLASHDESK_CODESIGN_IDENTITY" "$out"
  fi
  echo "package: $out ($(du -h "$out" | cut -f1))"
}

notarize() {
  # Apple's notary service checks every nested binary (all must be signed with the hardened
  # runtime and a timestamp: the sign step), then the ticket is stapled to the .dmg so Gatekeeper
  # can check it offline. Credentials: FLASHDESK_NOTARY_PROFILE (a keychain profile made with
  # `xcrun notarytool store-credentials`), or FLASHDESK_APPLE_ID + FLASHDESK_TEAM_ID +
  # FLASHDESK_APP_PASSWORD (an app-specific password).
  local out auth
  out="$DIST/flashdesk-$(version)-macos-$(uname -m).dmg"
  if [ -n "${FLASHDESK_NOTARY_PROFILE:-}" ]; then
    auth=(--keychain-profile "$FLASHDESK_NOTARY_PROFILE")
  elif [ -n "${FLASHDESK_APPLE_ID:-}" ] && [ -n "${FLASHDESK_TEAM_ID:-}" ] && [ -n "${FLASHDESK_APP_PASSWORD:-}" ]; then
    auth=(--apple-id "$FLASHDESK_APPLE_ID" --team-id "$FLASHDESK_TEAM_ID" --password "$FLASHDESK_APP_PASSWORD")
  else
    echo "notarize: no FLASHDESK_NOTARY_PROFILE nor FLASHDESK_APPLE_ID/FLASHDESK_TEAM_ID/FLASHDESK_APP_PASSWORD, skipping"
    return 0
  fi
  [ -n "${FLASHDESK_CODESIGN_IDENTITY:-}" ] || { echo "notarize: the app is not signed (sign step skipped)" >&2; exit 1; }
  xcrun notarytool submit "$out" "${auth[@]}" --wait
  xcrun stapler staple "$out"
  xcrun stapler validate "$out"
}

smoke() {
  "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("openai") is None)' \
    || "$PY" -m pip --disable-pip-version-check -q install "openai>=1.40"
  "$PY" installers/smoke_test.py "$APP/Contents/MacOS/flashdesk"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(setup bundle sign dmg notarize smoke)
for step in "${steps[@]}"; do
  case "$step" in
    setup|model|bundle|sign|dmg|notarize|smoke) echo "== $step"; "$step" ;;
    *) echo "unknown step: $step (steps: setup model bundle sign dmg notarize smoke)" >&2; exit 2 ;;
  esac
done
