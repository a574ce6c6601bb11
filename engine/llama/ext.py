"""The one place that binds llama.cpp's staging (C++-mangled) DFlash functions.

llama-cpp-python 0.3.36 vendors llama.cpp `0c1e57098`, whose DFlash entry points are
declared in the staging header `src/llama-ext.h` without `extern "C"`, so
`libllama` exports them under C++-mangled names. Each binding here tries the plain name
(a future build, or a shim that re-exports them), then the Itanium mangling (Linux,
macOS), then the MSVC x64 mangling (Windows), and raises `AttributeError` naming all
three if none is found. Every module of flashdesk that needs one of these functions
imports it from here, never from `llama_cpp` or `llama_cpp.llama_cpp_ext`.

Not a wrapper with checks: these are raw ctypes functions. Several of them abort the
process on bad input (see docs/llama-cpp.md): the DFlash drafter checks every call first
(engine/speculative/drafters/dflash.py; the draft file itself, dflash_fit.py).

References: llama.cpp `src/llama-ext.h`, `src/llama-context.cpp`, `src/llama-model.cpp`.
"""

from __future__ import annotations

import ctypes

from llama_cpp import llama_cpp as _llama

_lib = _llama._lib
_ctx_p = _llama.llama_context_p_ctypes
_model_p = _llama.llama_model_p_ctypes
_float_p = ctypes.POINTER(ctypes.c_float)


def _bind(plain: str, itanium: str, msvc: str, argtypes: list, restype):
    """A private ctypes function object for the first exported symbol of the three names."""
    for symbol in (plain, itanium, msvc):
        try:
            fn = _lib[symbol]  # indexing gives a fresh object: our argtypes stay our own
        except AttributeError:
            continue
        fn.argtypes = argtypes
        fn.restype = restype
        return fn
    raise AttributeError(f"libllama exports none of {plain!r}, {itanium!r}, {msvc!r}: "
                         "flashdesk needs llama-cpp-python 0.3.36 (llama.cpp 0c1e57098)")


# -- target side: layer-input capture --------------------------------------------------

# void llama_set_embeddings_layer_inp(struct llama_context * ctx, uint32_t lid, bool value);
llama_set_embeddings_layer_inp = _bind(
    "llama_set_embeddings_layer_inp",
    "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
    "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z",
    [_ctx_p, ctypes.c_uint32, ctypes.c_bool], None)

# float * llama_get_embeddings_layer_inp(struct llama_context * ctx, uint32_t lid);
# [n_batch x n_embd] floats, rows of the last decode in batch order. ABORTS if layer lid
# was never enabled or no decode happened since it was. Bound to return the address
# (an int): it goes straight into native.gather_features after every target decode.
llama_get_embeddings_layer_inp = _bind(
    "llama_get_embeddings_layer_inp",
    "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
    "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z",
    [_ctx_p, ctypes.c_uint32], ctypes.c_void_p)

# -- draft side: the nextn output slot (DFlash 2 lattice) -----------------------------

# void llama_set_embeddings_nextn(struct llama_context * ctx, bool value, bool masked);
llama_set_embeddings_nextn = _bind(
    "llama_set_embeddings_nextn",
    "_Z26llama_set_embeddings_nextnP13llama_contextbb",
    "?llama_set_embeddings_nextn@@YAXPEAUllama_context@@_N1@Z",
    [_ctx_p, ctypes.c_bool, ctypes.c_bool], None)

# float * llama_get_embeddings_nextn(struct llama_context * ctx);
llama_get_embeddings_nextn = _bind(
    "llama_get_embeddings_nextn",
    "_Z26llama_get_embeddings_nextnP13llama_context",
    "?llama_get_embeddings_nextn@@YAPEAMPEAUllama_context@@@Z",
    [_ctx_p], _float_p)

# float * llama_get_embeddings_nextn_ith(struct llama_context * ctx, int32_t i);
llama_get_embeddings_nextn_ith = _bind(
    "llama_get_embeddings_nextn_ith",
    "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
    "?llama_get_embeddings_nextn_ith@@YAPEAMPEAUllama_context@@H@Z",
    [_ctx_p, ctypes.c_int32], _float_p)

# -- draft model metadata ---------------------------------------------------------------

# int32_t llama_model_dflash_selector_top_k(const struct llama_model * model);
llama_model_dflash_selector_top_k = _bind(
    "llama_model_dflash_selector_top_k",
    "_Z33llama_model_dflash_selector_top_kPK11llama_model",
    "?llama_model_dflash_selector_top_k@@YAHPEBUllama_model@@@Z",
    [_model_p], ctypes.c_int32)

# const int32_t * llama_model_target_layer_ids(const struct llama_model * model);
llama_model_target_layer_ids = _bind(
    "llama_model_target_layer_ids",
    "_Z28llama_model_target_layer_idsPK11llama_model",
    "?llama_model_target_layer_ids@@YAPEBHPEBUllama_model@@@Z",
    [_model_p], ctypes.POINTER(ctypes.c_int32))

# uint32_t llama_model_target_layer_ids_n(const struct llama_model * model);
llama_model_target_layer_ids_n = _bind(
    "llama_model_target_layer_ids_n",
    "_Z30llama_model_target_layer_ids_nPK11llama_model",
    "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z",
    [_model_p], ctypes.c_uint32)

# uint32_t llama_model_get_tok_embd(const struct llama_model * model, float * out);
# The whole token embedding matrix as F32 [n_vocab x n_embd]; out == NULL asks the size.
llama_model_get_tok_embd = _bind(
    "llama_model_get_tok_embd",
    "_Z24llama_model_get_tok_embdPK11llama_modelPf",
    "?llama_model_get_tok_embd@@YAIPEBUllama_model@@PEAM@Z",
    [_model_p, _float_p], ctypes.c_uint32)


def target_layer_ids(model_ptr) -> list[int]:
    """`dflash.target_layers` of a loaded draft model (llama.cpp capture ids)."""
    n = int(llama_model_target_layer_ids_n(model_ptr))
    ptr = llama_model_target_layer_ids(model_ptr)
    return [int(ptr[i]) for i in range(n)] if n and ptr else []


__all__ = [
    "llama_get_embeddings_layer_inp", "llama_get_embeddings_nextn", "llama_get_embeddings_nextn_ith",
    "llama_model_dflash_selector_top_k", "llama_model_get_tok_embd", "llama_model_target_layer_ids",
    "llama_model_target_layer_ids_n", "llama_set_embeddings_layer_inp", "llama_set_embeddings_nextn",
    "target_layer_ids",
]
