"""cffi build script for pyaccel's C kernels (run by setup.py with the project root as cwd).

The C module is optional: when it cannot be compiled (no working C compiler, an unsupported
platform) setuptools warns and the install goes on without it; pyaccel then uses its Numba and
NumPy kernels and says so once at first use.
"""

import hashlib
from pathlib import Path

from cffi import FFI

CSRC = Path(__file__).parent  # relative ("csrc") when setup.py runs this file


def source_hash(folder: Path = CSRC) -> str:
    """sha256 (first 16 hex digits) of every .c and .h under csrc/ (private headers in its
    subfolders too), each with its path inside csrc/, to detect a stale build. Twin of
    pyaccel/kernels/ffi.py's check, which must hash the same way."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.[ch]")):
        digest.update(path.relative_to(folder).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def make_builder(
    folder: Path = CSRC, module: str = "pyaccel._ckernels", macros: tuple = (), optional=True
) -> FFI:
    """An FFI builder of every folder/*.c, with every folder/*.h as cdef fragment (no macros, no
    includes; together they are the module's API; headers in subfolders are private to the C
    files). ``macros``: extra (name, value) defines, e.g. ("PYACCEL_NO_X86", None) for the
    portable build that the tests compile. ``optional``: a failed compile only warns
    (setuptools' optional extension), so pyaccel installs without the C module."""
    headers = sorted(folder.glob("*.h"))
    builder = FFI()
    builder.cdef("\n".join(h.read_text() for h in headers))
    builder.set_source(
        module,
        "#include <stdint.h>\n" + "".join(f'#include "{h.name}"\n' for h in headers),
        sources=[str(p) for p in sorted(folder.glob("*.c"))],
        include_dirs=[str(folder)],
        define_macros=[("PYACCEL_SRC_HASH", f'"{source_hash(folder)}"'), *macros],
        # no fused multiply-add on any compiler: the kernels match their NumPy twins bit for bit
        extra_compile_args=["-O2", "-std=c99", "-ffp-contract=off"],
        optional=optional,
    )
    return builder


ffibuilder = make_builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
