"""A compile cache that cannot be written degrades to a temporary one, with a warning
(issue 25): a read-only directory (chmod; simulated with EROFS where the tests run as root,
whom permissions do not stop), a full disk when kiln writes (ENOSPC) and a full disk when
the compiler writes (it says ``No space left on device``)."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import stat
import tempfile
from pathlib import Path

import pytest

from kiln.runtime import compiler
from kiln.runtime.compiler import compile_shared, find_compiler

ANSWER = "int kiln_answer(void) { return 42; }\n"


def _answer(path: str) -> int:
    return ctypes.CDLL(path).kiln_answer()


def _builds_elsewhere(cache: Path, name: str, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="kiln.runtime"):
        path = compile_shared(ANSWER + f"// {name}\n", name=name)
    assert f"cannot write the compile cache {cache}" in caplog.text
    assert not path.startswith(str(cache)) and _answer(path) == 42


def _failing_in(cache: Path, original, code: int):
    """``original`` (tempfile.mkstemp or a writer) raising OSError(code) inside ``cache``."""
    def wrapped(*args, **kwargs):
        where = kwargs.get("dir") or (args[0] if args else "")
        if str(where).startswith(str(cache)):
            raise OSError(code, os.strerror(code), str(where))
        return original(*args, **kwargs)
    return wrapped


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_read_only_cache_dir(tmp_path, monkeypatch, caplog):
    cache = tmp_path / "ro"
    cache.mkdir()
    cache.chmod(0o555)
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache))
    if os.geteuid() == 0:  # root writes anyway: the file system answers as a read-only one
        monkeypatch.setattr(tempfile, "mkstemp", _failing_in(cache, tempfile.mkstemp,
                                                             errno.EROFS))
    try:
        _builds_elsewhere(cache, "read_only", caplog)
    finally:
        cache.chmod(0o755)


def test_full_cache_dir_when_kiln_writes(tmp_path, monkeypatch, caplog):
    cache = tmp_path / "full"
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache))
    monkeypatch.setattr(compiler, "atomic_write_text",
                        _failing_in(cache, compiler.atomic_write_text, errno.ENOSPC))
    _builds_elsewhere(cache, "full_source", caplog)


def test_full_cache_dir_when_the_compiler_writes(tmp_path, monkeypatch, caplog):
    cache = tmp_path / "full"
    script = tmp_path / "cc-full"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *"{cache}/"*) echo "ld: final link failed: No space left on device"'
        ' >&2; exit 1;; esac\n'
        f'exec "{find_compiler()}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(script))
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache))
    _builds_elsewhere(cache, "full_link", caplog)
