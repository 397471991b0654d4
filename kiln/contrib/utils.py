"""``tvm.contrib.utils`` (``tvm.contrib.util`` in older releases): temporary directories."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["TempDirectory", "tempdir"]


class TempDirectory:
    """A temporary directory, removed when the object is collected (or by :meth:`remove`)
    unless ``keep_for_debug`` is set (by default, inside ``with
    TempDirectory.set_keep_for_debug():``). A ``custom_path`` is created if needed and never
    removed. ``relpath(name)`` is a path inside it."""

    _KEEP_FOR_DEBUG = False

    @classmethod
    @contextlib.contextmanager
    def set_keep_for_debug(cls, set_to: bool = True) -> Iterator[None]:
        """Within the block, new temporary directories are kept by default."""
        old, cls._KEEP_FOR_DEBUG = cls._KEEP_FOR_DEBUG, set_to
        try:
            yield
        finally:
            cls._KEEP_FOR_DEBUG = old

    def __init__(self, custom_path: str | None = None, keep_for_debug: bool | None = None):
        if keep_for_debug is None:
            keep_for_debug = self._KEEP_FOR_DEBUG
        if custom_path is not None:
            Path(custom_path).mkdir(parents=True, exist_ok=True)
            self.temp_dir = str(Path(custom_path).resolve())
        else:
            self.temp_dir = tempfile.mkdtemp(prefix="kiln-")
        self._owned = custom_path is None and not keep_for_debug

    def relpath(self, name: str) -> str:
        """The path of ``name`` inside the directory."""
        return str(Path(self.temp_dir) / name)

    def listdir(self) -> list[str]:
        return sorted(p.name for p in Path(self.temp_dir).iterdir())

    def remove(self) -> None:
        if self._owned and self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = ""

    def __enter__(self) -> TempDirectory:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def __del__(self) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"TempDirectory({self.temp_dir!r})"


def tempdir(custom_path: str | None = None,
            keep_for_debug: bool | None = None) -> TempDirectory:
    """``tvm.contrib.utils.tempdir()``: a new :class:`TempDirectory`."""
    return TempDirectory(custom_path, keep_for_debug)
