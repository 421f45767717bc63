"""Finished sweep points kept on disk, so that an interrupted or extended sweep runs only what is
missing. A point's key covers its inputs, the contents of any file it names (a system, a model
or draft model, a routing trace) and a hash of the installed pyaccel code and data: neither a
code change nor an edited file ever serves a stale row.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

from ..errors import ConfigError
from ..io_util import write_atomic

# what a point's key hashes of a folder it names (a model folder may also hold GBs of weights)
_FOLDER_FILES = ("*.json", "*.toml")


def default_folder() -> Path:
    """The per-user cache folder of sweep points."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("pyaccel")) / "sweep"


@cache
def code_hash() -> str:
    """sha256 of the installed package's source and data files (names and contents) and of its
    built C module's source hash: what a point's result depends on besides its inputs (every
    kernel backend gives the same numbers, so which ones are installed does not enter)."""
    from ..kernels import ffi

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".toml", ".json", ".csv", ".md"):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    digest.update(str(ffi.built_hash()).encode())
    return digest.hexdigest()


def point_key(inputs: dict) -> str:
    """The cache key of a point's inputs (:func:`~pyaccel.sweep.grid.inputs_of`)."""
    files = {name: _file_digest(path) for name, path in _named_files(inputs).items()}
    text = json.dumps({"inputs": inputs, "files": files, "code": code_hash()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _named_files(inputs: dict) -> dict:
    """What a point's run reads besides pyaccel's own files, by role: its system and model
    (a file or folder, or a preset's name), a routing trace, a draft model."""
    from ..spec_decode import parse

    named = {name: inputs.get(name) for name in ("system", "model", "router")}
    if inputs.get("spec_decode"):
        named["draft"] = parse(str(inputs["spec_decode"])).draft
    return {name: value for name, value in named.items() if value is not None}


def _file_digest(value) -> str | None:
    """sha256 of the file (or the config files of the folder) ``value`` names; None for a
    preset name."""
    path = Path(str(value))
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    if path.is_dir():
        digest = hashlib.sha256()
        for pattern in _FOLDER_FILES:
            for f in sorted(path.glob(pattern)):
                digest.update(f.name.encode())
                digest.update(f.read_bytes())
        return digest.hexdigest()
    return None


def open_cache(cache: bool | str | Path) -> PointCache | None:
    """The cache a sweep keeps its points in: ``cache`` True (the per-user folder), a folder
    (created if missing), or False (None: no cache). A folder that cannot hold files is a
    ConfigError naming it, before any point runs."""
    if cache is False:
        return None
    if not isinstance(cache, (bool, str, os.PathLike)):
        raise ConfigError(f"cache {cache!r}: expected True, False or a folder")
    if cache is not True and not os.fspath(cache).strip():
        raise ConfigError(f"--cache {os.fspath(cache)!r}: empty path; give a folder, or "
                          "--no-cache")  # fmt: skip
    folder, what = (default_folder(), "the sweep cache folder") if cache is True else (
        Path(cache), "--cache")  # fmt: skip
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as exc:
        not_folder = folder.exists() and not folder.is_dir()
        why = "not a folder" if not_folder else getattr(exc, "strerror", None) or exc
        raise ConfigError(f"{what} {folder}: cannot keep points there ({why}); give another "
                          "folder (--cache DIR) or --no-cache") from None  # fmt: skip
    return PointCache(folder)


class PointCache:
    """Rows of finished points, one JSON file each under ``folder`` (written atomically)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The row kept under ``key``, or None (also for an unreadable file: run it again)."""
        try:
            return json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def put(self, key: str, row: dict) -> None:
        """Keep ``row`` under ``key``."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # the row's own key order, not sorted: the table's columns follow the rows' key order,
        # so a row read back from the cache must read like one just run
        write_atomic(path, json.dumps(row), "sweep cache file")
