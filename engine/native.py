"""The one module that loads flashdesk's native C library (native/, built by CMake at
install time and shipped as the `flashdesk_native` package) through ctypes.

Every C prototype is written above its binding. Callers use the Python wrappers,
never ctypes directly: the wrappers check dtypes, contiguity and shapes before any
pointer crosses into C, and turn a bad status into a `NativeCallError`. Not
llama.cpp: its staging functions are bound in `engine/llama/ext.py`.

A lattice is either a NumPy array of the block's rows `[B, stride] float32` (row 0 =
the anchor slot) or a `RawLattice`: the draft's output buffer as llama.cpp hands it
out, read in place without a copy. Layout and semantics: native/include/flashdesk.h.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple, NoReturn, Union

import numpy as np

from .errors import EngineError

API_VERSION = 3
MAX_T = 64  # FD_MAX_T: path positions per block
MAX_K = 64  # FD_MAX_K: candidates per position


class NativeLibraryError(EngineError):
    code = "native_library_error"


class NativeCallError(EngineError):
    """A native call refused its input (a wrong buffer, a NaN from the model, a bug in the caller)."""

    code = "native_call_failed"


_STATUS = {-1: "FD_ERR_ARG (a NULL pointer or a size out of range)",
           -2: "FD_ERR_VALUE (a NaN or otherwise unusable number in the input)"}

_f32p = ctypes.POINTER(ctypes.c_float)
_i32p = ctypes.POINTER(ctypes.c_int32)
_vp, _i32, _i64, _f32 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_float


def _load() -> ctypes.CDLL:
    try:
        import flashdesk_native
    except ImportError:
        raise NativeLibraryError("flashdesk's native library is not installed. HINT: reinstall flashdesk "
                                 "with `pip install -e .` (it needs CMake and a C compiler).") from None
    if flashdesk_native.LIBRARY is None:
        raise NativeLibraryError("the flashdesk_native package holds no compiled library. HINT: reinstall.")
    lib = ctypes.CDLL(str(flashdesk_native.LIBRARY))
    # int32_t fd_api_version(void);
    lib.fd_api_version.argtypes, lib.fd_api_version.restype = [], ctypes.c_int32
    if lib.fd_api_version() != API_VERSION:
        raise NativeLibraryError(f"the installed native library has API {lib.fd_api_version()}, this code "
                                 f"needs {API_VERSION}. HINT: re-run `pip install -e .` to rebuild it.")
    # Pointers are passed as plain addresses (c_void_p): cheaper than ctypes pointer objects.
    sel: list[type[ctypes._SimpleCData]] = [_vp, _i64, _i32, _i32, _f32, _vp, _vp, _vp]
    # fd_status fd_select_walk(const float *lattice, int64_t stride, int32_t T, int32_t K,
    #                          float temperature, int32_t *idx, int32_t *ids, float *q);
    lib.fd_select_walk.argtypes = sel
    # fd_status fd_select_viterbi(const float *lattice, int64_t stride, int32_t T, int32_t K,
    #                             float temperature, int32_t *idx, int32_t *ids, float *q);
    lib.fd_select_viterbi.argtypes = sel
    # fd_status fd_select_dp(const float *lattice, int64_t stride, int32_t T, int32_t K,
    #                        float temperature, int32_t *idx, int32_t *ids, float *q, float *expected);
    lib.fd_select_dp.argtypes = sel + [_vp]
    # fd_status fd_select_top1(const float *lattice, int64_t stride, int32_t T, int32_t K,
    #                          const float *unary, float temperature, int32_t *idx, int32_t *ids, float *q);
    lib.fd_select_top1.argtypes = [_vp, _i64, _i32, _i32, _vp, _f32, _vp, _vp, _vp]
    # fd_status fd_select_sample(const float *lattice, int64_t stride, int32_t T, int32_t K,
    #                            float temperature, const float *uniforms, int32_t *idx, int32_t *ids, float *q);
    lib.fd_select_sample.argtypes = [_vp, _i64, _i32, _i32, _f32, _vp, _vp, _vp, _vp]
    # fd_status fd_accept_greedy(const int32_t *path, int32_t T, const int32_t *target_argmax,
    #                            int32_t *n_accepted, int32_t *bonus);
    lib.fd_accept_greedy.argtypes = [_vp, _i32, _vp, _vp, _vp]
    # fd_status fd_argmax_rows(const float *logits, int32_t n_rows, int32_t n_vocab, int64_t row_stride,
    #                          int32_t *out);
    lib.fd_argmax_rows.argtypes = [_vp, _i32, _i32, _i64, _vp]
    # fd_status fd_accept_sample(const float *p, int32_t V, const int32_t *path, int32_t T,
    #                            const int32_t *cand_ids, const float *cand_q, int32_t K,
    #                            const float *uniforms, int32_t *n_accepted, int32_t *token);
    lib.fd_accept_sample.argtypes = [_vp, _i32, _vp, _i32, _vp, _vp, _i32, _vp, _vp, _vp]
    # fd_status fd_gather_features(const float *const *layers, int32_t n_layers, int64_t n_embd,
    #                              int32_t n_src_rows, const int32_t *rows, int32_t n_rows, float *out);
    lib.fd_gather_features.argtypes = [_vp, _i32, _i64, _i32, _vp, _i32, _vp]
    for name in ("fd_select_walk", "fd_select_viterbi", "fd_select_dp", "fd_select_top1", "fd_select_sample",
                 "fd_accept_greedy", "fd_argmax_rows", "fd_accept_sample", "fd_gather_features"):
        getattr(lib, name).restype = ctypes.c_int  # fd_status, an enum: int on every ABI we build for
    return lib


lib = _load()


class RawLattice(NamedTuple):
    """The draft's nextn output for one block, read in place (e.g. from
    `llama_get_embeddings_nextn_ith(draft_ctx, first_row)`). Today's drafters copy their lattice into
    numpy first; this zero-copy path is kept, and tested, for a GPU drafter whose output buffer is
    large enough that the copy shows."""

    ptr: int | ctypes._Pointer  # address of the block's slot-0 (anchor) row, float32
    stride: int  # floats per row: the draft's n_embd
    n_slots: int  # B, rows readable from ptr (the path may use at most B-1)


Lattice = Union[np.ndarray, RawLattice]


def _check(status: int, what: str) -> None:
    if status != 0:
        raise NativeCallError(f"{what} failed: {_STATUS.get(status, f'status {status}')}. HINT: this is a bug "
                              "or a broken model output, not something a request can fix; please report it.")


def _fail(msg: str) -> NoReturn:
    raise NativeCallError(msg)


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _lattice(lattice: Lattice, T: int, K: int) -> tuple[int, int]:
    """(address of the slot-0 row, stride in floats) after checking that T+1 rows of
    K + K*K floats are readable. NumPy arrays may have padded rows (any row stride)."""
    if not (1 <= T <= MAX_T and 1 <= K <= MAX_K):
        _fail(f"lattice sizes out of range: T={T} (1..{MAX_T}), K={K} (1..{MAX_K})")
    need = K + K * K
    if isinstance(lattice, RawLattice):
        ptr = lattice.ptr if isinstance(lattice.ptr, int) else ctypes.cast(lattice.ptr, ctypes.c_void_p).value
        if not ptr or lattice.stride < need or lattice.n_slots < T + 1:
            _fail(f"raw lattice too small or NULL: stride {lattice.stride} (need >= {need}), "
                  f"{lattice.n_slots} slots (need >= {T + 1})")
        return ptr, int(lattice.stride)
    if not isinstance(lattice, np.ndarray) or lattice.dtype != np.float32 or lattice.ndim != 2:
        _fail("lattice must be a [B, stride] float32 array or a RawLattice")
    if lattice.strides[1] != 4 or lattice.strides[0] <= 0 or lattice.strides[0] % 4:
        _fail("lattice rows must be contiguous float32 with a positive row stride")
    if lattice.shape[0] < T + 1 or lattice.shape[1] < need:
        _fail(f"lattice of shape {lattice.shape} cannot hold T={T}, K={K} (need [>= {T + 1}, >= {need}])")
    return _addr(lattice), lattice.strides[0] // 4


def _small(a, dtype, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Small inputs (uniforms, unary, paths) are converted, never trusted: a copy costs nothing here."""
    out = np.ascontiguousarray(a, dtype=dtype)
    if out.shape != shape:
        _fail(f"{name} has shape {out.shape}, expected {shape}")
    return out


def _outputs(T: int, K: int, want_q: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    idx = np.empty(T, np.int32)  # [T]
    ids = np.empty(T, np.int32)  # [T]
    q = np.empty((T, K), np.float32) if want_q else None  # [T, K]
    return idx, ids, q


def _select(fn, name: str, lattice: Lattice, T: int, K: int, temperature: float, want_q: bool, *extra):
    """Call one of the fd_select_* functions that share the (lattice, sizes, temperature,
    idx, ids, q) signature; `extra` are trailing pointer arguments (dp's expected value)."""
    ptr, stride = _lattice(lattice, T, K)
    idx, ids, q = _outputs(T, K, want_q)
    _check(fn(ptr, stride, T, K, temperature, _addr(idx), _addr(ids), None if q is None else _addr(q), *extra),
           name)
    return idx, ids, q


def select_walk(lattice: Lattice, T: int, K: int, temperature: float = 1.0, want_q: bool = False):
    """Upstream's greedy walk. Returns idx [T], ids [T], q [T, K] or None."""
    return _select(lib.fd_select_walk, "fd_select_walk", lattice, T, K, temperature, want_q)


def select_viterbi(lattice: Lattice, T: int, K: int, temperature: float = 1.0, want_q: bool = False):
    """The max-product path. Returns idx [T], ids [T], q [T, K] or None."""
    return _select(lib.fd_select_viterbi, "fd_select_viterbi", lattice, T, K, temperature, want_q)


def select_dp(lattice: Lattice, T: int, K: int, temperature: float = 1.0, want_q: bool = False):
    """The most-expected-accepted path. Returns idx [T], ids [T], q [T, K] or None, and V_0."""
    expected = ctypes.c_float()
    idx, ids, q = _select(lib.fd_select_dp, "fd_select_dp", lattice, T, K, temperature, want_q,
                          ctypes.addressof(expected))
    return idx, ids, q, float(expected.value)


def select_top1(lattice: Lattice, T: int, K: int, unary, temperature: float = 1.0, want_q: bool = False):
    """DFlash v1: best unary candidate per position; unary [T, K]. Returns idx [T], ids [T], q or None."""
    ptr, stride = _lattice(lattice, T, K)
    unary = _small(unary, np.float32, (T, K), "unary")  # [T, K]
    idx, ids, q = _outputs(T, K, want_q)
    _check(lib.fd_select_top1(ptr, stride, T, K, _addr(unary), temperature, _addr(idx), _addr(ids),
                              None if q is None else _addr(q)), "fd_select_top1")
    return idx, ids, q


def select_sample(lattice: Lattice, T: int, K: int, temperature: float, uniforms):
    """Sampling walk; uniforms [T] in [0, 1). Returns idx [T], ids [T], q [T, K]."""
    ptr, stride = _lattice(lattice, T, K)
    uniforms = _small(uniforms, np.float32, (T,), "uniforms")  # [T]
    idx, ids, q = _outputs(T, K, True)
    assert q is not None  # asked for
    _check(lib.fd_select_sample(ptr, stride, T, K, temperature, _addr(uniforms), _addr(idx), _addr(ids),
                                _addr(q)), "fd_select_sample")
    return idx, ids, q


def accept_greedy(path, target_argmax) -> tuple[int, int]:
    """path [T], target_argmax [T+1] -> (n_accepted, bonus = target_argmax[n_accepted])."""
    path = np.ascontiguousarray(path, dtype=np.int32).reshape(-1)  # [T]
    T = path.shape[0]
    target_argmax = _small(target_argmax, np.int32, (T + 1,), "target_argmax")  # [T+1]
    n, bonus = ctypes.c_int32(), ctypes.c_int32()
    _check(lib.fd_accept_greedy(_addr(path), T, _addr(target_argmax), ctypes.addressof(n),
                                ctypes.addressof(bonus)), "fd_accept_greedy")
    return n.value, bonus.value


def argmax_rows(logits: np.ndarray) -> np.ndarray:
    """logits [n_rows, n_vocab] float32 (rows may be strided, e.g. a view of llama.cpp's
    logits buffer) -> [n_rows] int32, equal to numpy.argmax(logits, axis=-1)."""
    if not isinstance(logits, np.ndarray) or logits.dtype != np.float32 or logits.ndim != 2:
        _fail("logits must be a [n_rows, n_vocab] float32 array")
    n_rows, n_vocab = logits.shape
    if logits.strides[1] != 4 or n_vocab < 1 or (n_rows > 1 and (logits.strides[0] < 4 * n_vocab
                                                                 or logits.strides[0] % 4)):
        _fail("logits rows must be contiguous float32 and must not overlap")
    out = np.empty(n_rows, np.int32)  # [n_rows]
    stride = logits.strides[0] // 4 if n_rows > 1 else n_vocab
    _check(lib.fd_argmax_rows(_addr(logits), n_rows, n_vocab, stride, _addr(out)), "fd_argmax_rows")
    return out


def accept_sample(p: np.ndarray, path, cand_ids, cand_q, uniforms) -> tuple[int, int]:
    """Rejection sampling. p [T+1, V] float32 C-contiguous (the target sampler's
    distributions), path [T], cand_ids [T, K] int32, cand_q [T, K], uniforms [2*(T+1)]
    -> (n_accepted, token: the replacement or the bonus)."""
    if not isinstance(p, np.ndarray) or p.dtype != np.float32 or p.ndim != 2 or not p.flags.c_contiguous:
        _fail("p must be a C-contiguous [T+1, V] float32 array")
    T, V = p.shape[0] - 1, p.shape[1]
    if T < 0 or V < 1:
        _fail(f"p of shape {p.shape} holds no verify position")
    path = _small(path, np.int32, (T,), "path")  # [T]
    cand_ids = np.ascontiguousarray(cand_ids, dtype=np.int32)  # [T, K]
    K = cand_ids.shape[1] if cand_ids.ndim == 2 else -1
    if cand_ids.shape != (T, K) or not 1 <= K <= MAX_K:
        _fail(f"cand_ids has shape {cand_ids.shape}, expected [{T}, K] with 1 <= K <= {MAX_K}")
    cand_q = _small(cand_q, np.float32, (T, K), "cand_q")  # [T, K]
    uniforms = _small(uniforms, np.float32, (2 * (T + 1),), "uniforms")  # [2*(T+1)]
    n, token = ctypes.c_int32(), ctypes.c_int32()
    _check(lib.fd_accept_sample(_addr(p), V, _addr(path), T, _addr(cand_ids), _addr(cand_q), K,
                                _addr(uniforms), ctypes.addressof(n), ctypes.addressof(token)), "fd_accept_sample")
    return n.value, token.value


def lattice_rows(lattice: Lattice, T: int) -> np.ndarray:
    """The block's first T+1 rows as a NumPy array [T+1, stride] float32 (a view, no copy,
    for a RawLattice too: valid only while the draft's output buffer is)."""
    if isinstance(lattice, np.ndarray):
        return lattice[:T + 1]
    ptr = lattice.ptr if isinstance(lattice.ptr, int) else ctypes.cast(lattice.ptr, ctypes.c_void_p).value
    if not ptr or not 0 <= T < lattice.n_slots:
        _fail(f"raw lattice of {lattice.n_slots} slots cannot hold T={T}")
    buf = (ctypes.c_float * ((T + 1) * lattice.stride)).from_address(ptr)
    return np.ctypeslib.as_array(buf).reshape(T + 1, lattice.stride)


def gather_features(layers, n_embd: int, n_src_rows: int, rows: np.ndarray, out: np.ndarray) -> None:
    """out[r] = the tapped layers' rows `rows[r]`, side by side (fd_gather_features).
    layers: a ctypes array of c_void_p, one address per tapped layer ([n_src_rows, n_embd]
    float32 buffers); rows [R] int32; out [R, len(layers) * n_embd] float32, C-contiguous."""
    if rows.dtype != np.int32 or not rows.flags.c_contiguous or rows.ndim != 1:
        _fail("rows must be a contiguous int32 vector")
    if (out.dtype != np.float32 or not out.flags.c_contiguous
            or out.shape != (rows.shape[0], len(layers) * n_embd)):
        _fail(f"out must be C-contiguous float32 [{rows.shape[0]}, {len(layers) * n_embd}], got {out.shape}")
    _check(lib.fd_gather_features(ctypes.addressof(layers), len(layers), n_embd, n_src_rows, _addr(rows),
                                  rows.shape[0], _addr(out)), "fd_gather_features")
