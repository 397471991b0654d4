"""Writing a module archive: the tar file that ``export_library`` makes of a module whose
parts are bytes (a CUDA module's host IR, source and image; a VTA module's instruction
stream), written atomically so that a reader never sees half of it. Its ``module.json``
names the format, by which :func:`kiln.runtime.load_module` finds the loader."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile

from ..errors import TVMError

#: the file names ``export_library`` writes an archive to
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")

__all__ = ["ARCHIVE_SUFFIXES", "write_archive"]


def write_archive(path: str | os.PathLike[str], members: dict[str, bytes], what: str) -> None:
    """Write ``members`` (name -> bytes) as the tar archive ``path`` (gzipped for ``.tar.gz``
    and ``.tgz``); ``what`` names the module kind in the error for another suffix."""
    path = os.fspath(path)
    if not path.endswith(ARCHIVE_SUFFIXES):
        raise TVMError(f"export_library: a {what} is saved as a .tar, .tar.gz or .tgz archive, "
                       f"not {path!r}")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tmp-kiln-")
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz" if path.endswith(("gz", "tgz")) else "w") as tar:
            for name, blob in members.items():
                member = tarfile.TarInfo(name)
                member.size = len(blob)
                tar.addfile(member, io.BytesIO(blob))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
