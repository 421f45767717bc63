"""Output files and JSON text.

Output paths are checked before any work is done (:func:`check_output_file`,
:func:`check_output_folder`), so a typo costs nothing. :func:`write_atomic` then replaces a
regular file in one rename (readers see the old file or the whole new one): a symbolic link is
written through (its final target is replaced, the link stays), a device node, pipe or socket is
refused, and no missing folder is created. A new file gets the mode the umask gives (0644 under
umask 022); a replaced file keeps its mode. :func:`dumps_strict` is the JSON every output uses:
RFC 8259 strict, with non-finite numbers as ``null``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError

PLOT_SUFFIXES = (".png", ".svg", ".pdf")
_TMP_PREFIX = ".pyaccel-"  # short, so that a long target name still leaves room

_KINDS = (
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISFIFO, "named pipe"),
    (stat.S_ISSOCK, "socket"),
)


def _umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _label(what: str, path: str) -> str:
    return f"{what} {path!r}" if not path.strip() else f"{what} {path}"


def _target(path: str | Path, what: str) -> Path:
    """The file writing ``path`` replaces: ``path`` itself, or the final target of a symlink.
    Raises :class:`ConfigError` when it is a folder or not a regular file."""
    text = os.fspath(path)
    if not text.strip():
        raise ConfigError(f"{_label(what, text)}: empty path; give a file name")
    if text.endswith(("/", os.sep)):
        raise ConfigError(f"{what} {text}: names a folder; give a file name")
    try:
        target = Path(os.path.realpath(text))  # write through symlinks: replace what they name
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return target
    except (OSError, ValueError) as exc:  # name too long, embedded NUL, permissions
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise ConfigError(f"{what} {text}: cannot use this path ({why})") from None
    if stat.S_ISLNK(mode):  # realpath stops where links loop
        raise ConfigError(f"{what} {text}: symbolic link loop at {target}")
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{what} {text}: is a folder; give a file name")
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "special file")
        raise ConfigError(
            f"{what} {text}: is a {kind}, not a regular file; pyaccel writes only regular files"
        )
    return target


def _require_folder(folder: Path, what: str, text: str) -> None:
    """``folder`` exists and is a folder (pyaccel never creates missing parents)."""
    if not folder.exists():
        raise ConfigError(f"{what} {text}: folder {folder} does not exist; create it first")
    if not folder.is_dir():
        raise ConfigError(f"{what} {text}: {folder} is not a folder")


def _check_folder(folder: Path, what: str, text: str) -> None:
    """``folder`` exists, is a folder, and a file can be created in it."""
    _require_folder(folder, what, text)
    try:  # the only sure test of "can write here" (read-only mounts, /proc, permissions)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=_TMP_PREFIX, suffix=".tmp")
    except OSError as exc:
        raise ConfigError(f"{what} {text}: cannot create files in {folder} ({_why(exc)})") from None
    os.close(fd)
    os.unlink(probe)


def _why(exc: OSError) -> str:
    # a pseudo-filesystem such as /proc answers "no such file" for a folder that exists
    return "it takes no new files" if exc.errno == errno.ENOENT else exc.strerror


def check_output_file(path: str | Path, what: str = "output file") -> Path:
    """Check, before any work, that ``path`` can be written by :func:`write_atomic`; return the
    file that will be replaced (a symlink's target). ``what`` names the option in errors."""
    target = _target(path, what)
    _check_folder(target.parent, what, os.fspath(path))
    return target


def check_output_folder(
    path: str | Path, what: str = "output folder", files: tuple[str, ...] = ()
) -> Path:
    """Check, before any work, that ``path`` is a folder that can take ``files`` or that it can
    be created (its parent exists; parents are never created); return the resolved folder."""
    text = os.fspath(path)
    if not text.strip():
        raise ConfigError(f"{_label(what, text)}: empty path; give a folder name")
    try:
        folder = Path(os.path.realpath(text))
        mode = os.stat(folder).st_mode
    except FileNotFoundError:  # to be made; its parent must take it
        _check_folder(folder.parent, what, text)
        return folder
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise ConfigError(f"{what} {text}: cannot use this path ({why})") from None
    if not stat.S_ISDIR(mode):
        raise ConfigError(f"{what} {text}: is a file, not a folder")
    _check_folder(folder, what, text)
    for name in files:
        _target(folder / name, what)
    return folder


def make_output_folder(path: str | Path, what: str = "output folder") -> Path:
    """The folder :func:`check_output_folder` accepts, created if missing (not its parents)."""
    folder = check_output_folder(path, what)
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what} {os.fspath(path)}: cannot create it ({exc.strerror})") from None
    return folder


def plot_format(path: str | Path, what: str = "plot file") -> str:
    """The matplotlib format named by a plot file's suffix (png, svg or pdf)."""
    suffix = Path(os.fspath(path)).suffix.lower()
    if suffix not in PLOT_SUFFIXES:
        given = f"suffix {suffix!r}" if suffix else "no suffix"
        raise ConfigError(
            f"{_label(what, os.fspath(path))}: {given}; a plot file ends in one of "
            f"{', '.join(PLOT_SUFFIXES)}"
        )
    return suffix[1:]


def write_atomic(path: str | Path, data: str | bytes, what: str = "output file") -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` so that readers see the old file or the whole
    new one; returns the file written (a symlink's target). Errors are :class:`ConfigError`."""
    target = _target(path, what)
    folder = target.parent
    _require_folder(folder, what, os.fspath(path))
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        old = os.stat(target)
    except FileNotFoundError:
        old = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=_TMP_PREFIX, suffix=".tmp")
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot create files in {folder} ({_why(exc)})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            # mkstemp makes 0600; a new file gets what open() would give, a replaced one its mode
            os.fchmod(fh.fileno(), stat.S_IMODE(old.st_mode) if old else 0o666 & ~_umask())
            if old is not None:
                _keep_owner(fh.fileno(), old)
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ConfigError(f"{what} {path}: cannot write it ({exc.strerror})") from None
        raise
    return target


def _keep_owner(fd: int, old: os.stat_result) -> None:
    """Keep a replaced file's owner and group where allowed (root replacing a user's file)."""
    try:
        os.fchown(fd, old.st_uid, old.st_gid)
    except OSError:
        pass  # an ordinary user cannot give files away: the new file is then theirs


def finite_or_none(obj: Any) -> Any:
    """``obj`` as plain JSON data: NumPy scalars and arrays to Python, NaN and ±inf to ``None``."""
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return finite_or_none(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj


def dumps_strict(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` with no ``NaN``/``Infinity`` literals (they become ``null``); other
    non-JSON objects are written as their ``str``."""
    return json.dumps(finite_or_none(obj), allow_nan=False, default=str, **kwargs)
