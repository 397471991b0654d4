"""``tvm.contrib.download``: fetch a file once and keep it in a local cache.

``download_testdata(url, relpath, module)`` returns ``<cache>/<module>/<relpath>``,
downloading ``url`` there only when the file is not already present. The cache is
``$KILN_TEST_DATA`` if set, else ``$XDG_CACHE_HOME/kiln/test_data`` (``~/.cache/kiln/
test_data``). A download writes a temporary file and renames it into place, so a cached file
is always complete; when the network cannot be reached the error names the URL and the path
to place the file at by hand.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from kiln.errors import TVMError

__all__ = ["download", "download_testdata", "testdata_dir"]


def testdata_dir() -> Path:
    """The cache directory of downloaded test data (read from the environment each call)."""
    env = os.environ.get("KILN_TEST_DATA")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "kiln" / "test_data"


def _remote_size(url: str) -> int | None:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD")) as r:
            size = r.headers.get("Content-Length")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return int(size) if size and size.isdigit() else None


def download(url: str, path: str | os.PathLike[str], overwrite: bool = False,
             size_compare: bool = False, retries: int = 3) -> None:
    """Download ``url`` to ``path``. An existing file is kept unless ``overwrite``, or
    ``size_compare`` and its size differs from the server's. Tries ``retries`` times, then
    raises TVMError saying where to place the file by hand."""
    dest = Path(path)
    if dest.is_file() and not overwrite:
        if not size_compare or _remote_size(url) in (None, dest.stat().st_size):
            return
    dest.parent.mkdir(parents=True, exist_ok=True)
    last: Exception | None = None
    for _ in range(max(1, retries)):
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-kiln-")
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url) as src:
                shutil.copyfileobj(src, out)
            os.replace(tmp, dest)
            return
        except (urllib.error.URLError, OSError, ValueError) as e:
            last = e
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise TVMError(f"could not download {url} ({last}). If this machine is offline, fetch the "
                   f"file elsewhere and place it at {dest}")


def download_testdata(url: str, relpath: str, module: str | list[str] | None = None,
                      overwrite: bool = False) -> str:
    """The path of ``relpath`` in the test-data cache (under ``module``, a folder name or a
    list of them), downloaded from ``url`` if it is not there yet."""
    parts = [module] if isinstance(module, str) else list(module or ())
    path = testdata_dir().joinpath(*parts, relpath)
    download(url, path, overwrite=overwrite)
    return str(path)
