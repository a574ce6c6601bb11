"""The one module that loads flashdesk's native C library (native/, built by CMake at
install time and shipped as the `flashdesk_native` package) through ctypes.

Every C prototype is written above its binding. Callers use the Python wrappers,
never ctypes directly. Not llama.cpp: its staging functions are bound in
`engine/spec/llama_ext.py`.
"""

from __future__ import annotations

import ctypes

from .errors import EngineError

API_VERSION = 1


class NativeLibraryError(EngineError):
    code = "native_library_error"


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
    return lib


lib = _load()
