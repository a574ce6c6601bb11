#!/usr/bin/env bash
# Create .venv and install flashdesk into it, with optional extras: setup.sh [test,...]
#
# llama-cpp-python is built once per set of CMake flags into a wheelhouse
# (~/.cache/flashdesk-wheels, or FLASHDESK_WHEELHOUSE) and installed from there.
# llamafile's sgemm stays on: it computes a batch of k >= 2 rows with other kernels than a
# single token (measured: up to 0.7 in SmolLM2's logits), but flashdesk's batch-invariant patch
# keeps the verify band (1..16 rows) and float matmuls off it, and the engine cuts prompts where
# their rows depend on the decode (engine/chunks.py). For quantized weights above the band it is
# llama.cpp's fast prompt path: without it a Q8_0 prompt ran at 0.62x stock llama-server, with it
# 0.91x (python -m bench prompt_speed, native/llama-patches/README.md).
# Add GPU flags through CMAKE_ARGS as usual, e.g. CMAKE_ARGS="-DGGML_CUDA=on" bash scripts/setup.sh
# FLASHDESK_PORTABLE=1 builds llama.cpp for other people's computers (GGML_NATIVE=OFF: ggml's
# AVX2/FMA/F16C baseline instead of this CPU's every instruction, which would crash older
# CPUs with "illegal instruction"): the Linux package ships it, and the tests run on it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
LLAMA_VERSION=0.3.36
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "flashdesk needs Python 3.10 or newer (found: $("$PYTHON" --version))" >&2; exit 1; }
PYTHON="$PYTHON" bash scripts/system-packages.sh build  # cmake, g++ and venv, where apt-get can add them
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)

# A native x86-64 build leaves ggml's AMX kernels out: on a CPU that has AMX (Xeon Sapphire Rapids
# and newer) -march=native turns them on, and the pinned llama.cpp then crashes in
# ggml_backend_amx_mul_mat on the first decode (seen on this project's 2-core Xeon; llama.cpp
# issue 20824). Explicit -mno-* flags win over -march=native whatever their order.
no_amx=""
if [ -z "${FLASHDESK_PORTABLE:-}" ] && [ "$(uname -m)" = x86_64 ]; then
  no_amx=" -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'"
fi
flags="-DGGML_LLAMAFILE=ON${FLASHDESK_PORTABLE:+ -DGGML_NATIVE=OFF}${no_amx}${CMAKE_ARGS:+ $CMAKE_ARGS}"
# Every build, CPU, CUDA or Metal, is built from the source with flashdesk's patches
# (native/llama-patches/README.md: verify rows computed like single tokens, on the CPU too), its
# wheelhouse named by the patch set as well as the flags.
flags="$flags -DGGML_BATCH_INVARIANT=ON"
key="$flags patches=$("$PYTHON" scripts/llama_source.py digest)"
house="${FLASHDESK_WHEELHOUSE:-$HOME/.cache/flashdesk-wheels}/$(printf '%s' "$key" | sha256sum | cut -c1-12)"
if ! compgen -G "$house/llama_cpp_python-$LLAMA_VERSION-*.whl" >/dev/null; then
  echo "Building llama.cpp (llama-cpp-python $LLAMA_VERSION, $flags): about 5 minutes on 2 cores ..."
  src="$("$PYTHON" scripts/llama_source.py unpack "$house.src")"
  CMAKE_ARGS="$flags" "${PIP[@]}" wheel --no-cache-dir --no-deps "$src" -w "$house"
  rm -rf "$house.src"
fi
# A venv that holds a build with other flags gets this one (pip would keep any 0.3.36).
stamp=.venv/llama-cpp-flags
reinstall=()
if .venv/bin/python -c 'import importlib.metadata as m; m.version("llama-cpp-python")' 2>/dev/null \
    && [ "$(cat "$stamp" 2>/dev/null)" != "$key" ]; then
  reinstall=(--force-reinstall --no-deps)
fi
"${PIP[@]}" install ${reinstall[@]+"${reinstall[@]}"} --find-links "$house" "llama-cpp-python==$LLAMA_VERSION"
printf '%s\n' "$key" > "$stamp"
printf '%s\n' "$house" > .venv/llama-cpp-wheelhouse  # where that wheel is: the clean-install test reuses it
"${PIP[@]}" install -e ".${1:+[$1]}"
