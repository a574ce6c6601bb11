"""Facts about the pinned llama.cpp (llama-cpp-python 0.3.36, commit 0c1e57098) that
light code needs without loading it.

Kept here, in the light layer, so `flashdesk inspect` and the draft trainer can answer
"can this model pair a DFlash draft?" without importing llama_cpp; the engine imports
the same set, so there is one list to update when llama.cpp is bumped.
Not a binding: nothing here calls llama.cpp.
References: vendored llama.cpp `src/models/*.cpp` (`res->t_layer_inp[il]`).
"""

# Target architectures whose graph in the pinned llama.cpp sets the input of every layer
# as a capturable tensor (`res->t_layer_inp[il]`); others abort on the first decode.
CAPTURE_ARCHS = frozenset({"llama", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe", "gemma4", "gpt-oss"})
