#!/usr/bin/env bash
# The patched llama.cpp built with CUDA for bench/gpu_check.py, on a GPU machine that reaches no
# network (the device tool's). Two steps:
#     bash bench/gpu_build.sh pack          # here: the patched sources, slim, to bench/out/llama-src.tgz (~6 MB)
#     bash bench/gpu_build.sh build [ARCHS] # there: cmake + build into build/gpu/lib (default ARCHS 90)
# then  LLAMA_CPP_LIB_PATH=build/gpu/lib .venv/bin/python bench/gpu_check.py all MODEL.gguf
# The Python side (llama-cpp-python, numpy) is the venv's; only the libraries come from here.
# FA is left out (flashdesk runs with it off), which also halves the build time.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  pack)
    tmp=$(mktemp -d)
    src=$(python3 scripts/llama_source.py unpack "$tmp")/vendor/llama.cpp
    mkdir -p bench/out
    tar czf bench/out/llama-src.tgz -C "$src" CMakeLists.txt LICENSE cmake ggml src include common vendor
    rm -rf "$tmp"
    ls -la bench/out/llama-src.tgz ;;
  build)
    rm -rf build/gpu && mkdir -p build/gpu/src build/gpu/lib
    tar xzf bench/out/llama-src.tgz -C build/gpu/src
    cmake -S build/gpu/src -B build/gpu/build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
      -DGGML_CUDA=ON -DGGML_BATCH_INVARIANT=ON -DGGML_CUDA_FA=OFF -DGGML_LLAMAFILE=OFF -DGGML_NATIVE=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="${2:-90}" -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF >/dev/null
    cmake --build build/gpu/build -j "$(nproc)" --target llama
    find build/gpu/build -name '*.so*' -exec cp -P {} build/gpu/lib/ \;
    ls build/gpu/lib ;;
  *) sed -n 2,9p "$0"; exit 2 ;;
esac
