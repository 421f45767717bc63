"""cffi build script for pyaccel's C kernels (run by setup.py with the project root as cwd)."""

import hashlib
from pathlib import Path

from cffi import FFI

CSRC = Path("csrc")


def source_hash(folder: Path = CSRC) -> str:
    """sha256 (first 16 hex digits) of every csrc/*.c and *.h, to detect a stale build."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.[ch]")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


# Every header is a cdef fragment (no macros, no includes); together they are the module's API.
HEADERS = sorted(CSRC.glob("*.h"))
ffibuilder = FFI()
ffibuilder.cdef("\n".join(h.read_text() for h in HEADERS))
ffibuilder.set_source(
    "pyaccel._ckernels",
    "#include <stdint.h>\n" + "".join(f'#include "{h.name}"\n' for h in HEADERS),
    sources=[str(p) for p in sorted(CSRC.glob("*.c"))],
    include_dirs=[str(CSRC)],
    define_macros=[("PYACCEL_SRC_HASH", f'"{source_hash()}"')],
    extra_compile_args=["-O2", "-std=c99"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
