#!/usr/bin/env bash
# The patched llama.cpp built with CUDA for `python -m bench gpu_check`, on a GPU machine that reaches no
# network (the device tool's). Two steps:
#     bash bench/gpu_build.sh pack          # here: bench/out/llama-src.tgz (~6 MB) and bench/out/gpu-site.tgz
#     bash bench/gpu_build.sh build [ARCHS] # there: cmake + build into build/gpu/lib (default ARCHS 90)
# then, there (a Python with numpy, as a PyTorch machine has):
#     PYTHONPATH=build/gpu/site LLAMA_CPP_LIB_PATH=build/gpu/lib python3 -m bench gpu_check all --model MODEL.gguf
# llama-src.tgz: the patched llama.cpp sources that a CUDA build needs. gpu-site.tgz: the Python side
# the engine needs beside numpy (llama-cpp-python's Python files, flashdesk's native library, and
# pure-Python packages from PyPI). FA is left out (flashdesk runs with it off), which also halves
# the build time.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  pack)
    tmp=$(mktemp -d)
    src=$(python3 scripts/llama_source.py unpack "$tmp")/vendor/llama.cpp
    mkdir -p bench/out
    tar czf bench/out/llama-src.tgz -C "$src" CMakeLists.txt LICENSE cmake ggml src include common vendor
    site=$tmp/site
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --target "$site" \
      diskcache platformdirs jinja2 markupsafe typing_extensions "gguf>=0.17,<0.20" pyyaml tqdm \
      httpx httpcore h11 anyio sniffio idna certifi
    pkgs=$(.venv/bin/python -c 'import llama_cpp, flashdesk_native, os; print(os.path.dirname(llama_cpp.__file__), os.path.dirname(flashdesk_native.__file__))')
    for p in $pkgs; do cp -r "$p" "$site/"; done
    rm -rf "$site/llama_cpp/lib" "$site"/*/__pycache__
    tar czf bench/out/gpu-site.tgz -C "$site" .
    rm -rf "$tmp"
    ls -la bench/out/llama-src.tgz bench/out/gpu-site.tgz ;;
  build)
    rm -rf build/gpu && mkdir -p build/gpu/src build/gpu/lib build/gpu/site
    tar xzf bench/out/llama-src.tgz -C build/gpu/src
    tar xzf bench/out/gpu-site.tgz -C build/gpu/site
    cmake -S build/gpu/src -B build/gpu/build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
      -DGGML_CUDA=ON -DGGML_BATCH_INVARIANT=ON -DGGML_CUDA_FA=OFF -DGGML_LLAMAFILE=OFF -DGGML_NATIVE=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="${2:-90}" -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF >/dev/null
    cmake --build build/gpu/build -j "$(nproc)" --target llama
    find build/gpu/build -name '*.so*' -exec cp -P {} build/gpu/lib/ \;
    ls build/gpu/lib ;;
  *) sed -n 2,12p "$0"; exit 2 ;;
esac
