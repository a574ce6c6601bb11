"""Where the compiled flashdesk native library was installed (written by CMake's install)."""

from pathlib import Path

_here = Path(__file__).resolve().parent
LIBRARY = next((p for p in sorted(_here.iterdir()) if p.name.startswith(("libfdnative", "fdnative"))
                and p.suffix in (".so", ".dylib", ".dll")), None)
