"""The on-disk compile cache: entries that are checked before anyone loads them.

An entry is a built file (a shared library), ``<name>-<key[:40]><suffix>``, named by the hash
of everything it was built from (its *key*), beside its record ``<name>-<key[:40]>.json``:
the full key, the file's size and its SHA-256. What this module guarantees:

* :func:`lookup` returns an entry's path (and :func:`lookup_info` the ``info`` its builder
  recorded beside it) only when its record names the same key and the file has the recorded
  size and SHA-256. A truncated, emptied or foreign file (another kernel's
  library copied over it) is never returned, so never ``dlopen``-ed; :func:`build` logs a
  warning for it and builds it again.
* :func:`build` writes the file and then its record under temporary names and renames each
  into place, holding the entry's lock (``<name>-<key[:40]>.lock``, POSIX ``flock``) while it
  checks and builds: processes and threads building the same entry build it once, and no
  reader ever sees a half-written file.
* A cache directory that cannot be written (read-only, not a directory, full) degrades to a
  temporary directory of this process, with one warning per directory; it is removed at exit.

Checking an entry reads it whole: about 1 ms per MB, 30 to 100 µs for a typical kernel.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: entries are still renamed into place, only not locked
    fcntl = None  # type: ignore[assignment]

__all__ = ["CacheEntry", "cache_entry", "lookup", "lookup_info", "build", "atomic_write_text"]

_log = logging.getLogger("kiln.runtime")
_ABSENT = "absent"  # _check's answer for an entry not built yet (no warning)


@dataclass(frozen=True)
class CacheEntry:
    """The entry of ``key`` in ``directory``: the built file ``<stem><suffix>``."""

    directory: Path
    stem: str
    key: str
    suffix: str

    @property
    def path(self) -> Path:
        return self.directory / f"{self.stem}{self.suffix}"

    @property
    def record_path(self) -> Path:
        return self.directory / f"{self.stem}.json"

    @property
    def lock_path(self) -> Path:
        return self.directory / f"{self.stem}.lock"


def cache_entry(directory: Path, name: str, key: str, suffix: str) -> CacheEntry:
    """The entry of ``key`` (a hex digest) in ``directory``; ``name`` is a readable prefix."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64] or "lib"
    return CacheEntry(directory, f"{safe}-{key[:40]}", key, suffix)


def lookup(entry: CacheEntry) -> str | None:
    """The entry's path when it is built and matches its record, else None."""
    return str(entry.path) if _check(entry) is None else None


def lookup_info(entry: CacheEntry) -> dict | None:
    """The ``info`` recorded with the entry by :func:`build` when the entry is built and
    matches its record (``{}`` when it was built without one), else None."""
    if _check(entry) is not None:
        return None
    try:
        info = json.loads(entry.record_path.read_text(encoding="utf-8")).get("info", {})
    except (OSError, ValueError):  # replaced since the check: a miss
        return None
    return info if isinstance(info, dict) else None


def build(entry: CacheEntry, make: Callable[[CacheEntry, Path], None],
          info: dict | None = None) -> str:
    """The path of ``entry``, built by ``make(entry, out)`` unless a valid one is there.

    ``make`` writes the file ``out`` (a temporary name in ``entry.directory``); its errors
    propagate. ``info`` (JSON data) is recorded with the file, for :func:`lookup_info`. When
    the directory cannot be written, the entry is built in this process's temporary cache
    directory instead (with a warning).
    """
    try:
        return _build_in(entry, make, info)
    except OSError as e:
        return _build_in(replace(entry, directory=_fallback_dir(entry.directory, e)), make,
                         info)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _build_in(entry: CacheEntry, make: Callable[[CacheEntry, Path], None],
              info: dict | None) -> str:
    entry.directory.mkdir(parents=True, exist_ok=True)
    with _locked(entry.lock_path):
        problem = _check(entry)
        if problem is None:
            return str(entry.path)  # built by another process or thread meanwhile
        if problem != _ABSENT:
            _log.warning("kiln: the compile cache entry %s %s; building it again",
                         entry.path, problem)
        fd, tmp = tempfile.mkstemp(dir=entry.directory, prefix=".tmp-", suffix=entry.suffix)
        os.close(fd)
        try:
            make(entry, Path(tmp))
            record = {"key": entry.key, "size": os.path.getsize(tmp), "sha256": _sha256(tmp),
                      "info": info or {}}
            os.replace(tmp, entry.path)
            atomic_write_text(entry.record_path, json.dumps(record))
        finally:
            _unlink(tmp)
    return str(entry.path)


def _check(entry: CacheEntry) -> str | None:
    """None when the entry is valid, ``_ABSENT`` when it is not built, else what is wrong."""
    try:
        size = entry.path.stat().st_size
    except FileNotFoundError:
        return _ABSENT
    except OSError as e:
        return f"cannot be read ({e})"
    try:
        record = json.loads(entry.record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "has no record (an interrupted build or an older kiln)"
    except (OSError, ValueError) as e:
        return f"has a damaged record ({e})"
    if not isinstance(record, dict) or record.get("key") != entry.key:
        return "has the record of another build"
    if record.get("size") != size:
        return (f"is {size} bytes long where its record says {record.get('size')} "
                "(truncated or replaced)")
    try:
        digest = _sha256(entry.path)
    except OSError as e:
        return f"cannot be read ({e})"
    if record.get("sha256") != digest:
        return "does not match its record's SHA-256 (a foreign or modified file)"
    return None


def _sha256(path: str | Path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of the file ``path`` (created if missing) for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


_fallback_lock = threading.Lock()
_fallback: Path | None = None
_warned: set[Path] = set()


def _fallback_dir(directory: Path, error: OSError) -> Path:
    """This process's temporary cache directory, used when ``directory`` is unwritable."""
    global _fallback
    with _fallback_lock:
        if _fallback is None:
            _fallback = Path(tempfile.mkdtemp(prefix="kiln-cache-"))
            atexit.register(shutil.rmtree, _fallback, True)
        if directory not in _warned:
            _warned.add(directory)
            _log.warning("kiln: cannot write the compile cache %s (%s); building in %s for "
                         "this process instead (set KILN_CACHE_DIR to a writable directory)",
                         directory, error, _fallback)
        return _fallback


def _unlink(path: str | Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
