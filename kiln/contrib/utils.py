"""``tvm.contrib.utils`` (``tvm.contrib.util`` in older releases): temporary directories."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

__all__ = ["TempDirectory", "tempdir"]


class TempDirectory:
    """A temporary directory, removed when the object is collected (or by :meth:`remove`)
    unless ``keep_for_debug`` is set. ``relpath(name)`` is a path inside it."""

    def __init__(self, custom_path: str | None = None, keep_for_debug: bool = False):
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


def tempdir(custom_path: str | None = None, keep_for_debug: bool = False) -> TempDirectory:
    """``tvm.contrib.utils.tempdir()``: a new :class:`TempDirectory`."""
    return TempDirectory(custom_path, keep_for_debug)
