"""The compiler driver: flags, disk cache, and error reporting."""

import os
import stat
from pathlib import Path

import pytest

from kiln.errors import CompileError
from kiln.runtime import compiler
from kiln.runtime.compiler import build_flags, compile_shared, find_compiler

SIMPLE = "int kiln_answer(void) { return 42; }\n"


def make_wrapper(tmp_path: Path, name: str = "cc-wrapper", reject: str = "") -> tuple[Path, Path]:
    """A shell-script compiler that logs its argv and forwards to the real compiler
    (optionally failing whenever ``reject`` is among its flags)."""
    real = find_compiler()
    log = tmp_path / f"{name}.log"
    script = tmp_path / name
    test = f'case " $* " in *" {reject} "*) echo "unsupported {reject}" >&2; exit 1;; esac\n'
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n' + (test if reject else "") + f'exec "{real}" "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


def compile_runs(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [ln for ln in log.read_text().splitlines() if "--version" not in ln]


def test_find_compiler_default(monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    path = find_compiler()
    assert os.path.isabs(path) and os.access(path, os.X_OK)


def test_cache_hit_runs_no_compiler(tmp_path, monkeypatch):
    script, log = make_wrapper(tmp_path)
    monkeypatch.setenv("CC", str(script))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    first = compile_shared(SIMPLE, name="answer")
    assert len(compile_runs(log)) == 1
    mtime = os.stat(first).st_mtime_ns
    second = compile_shared(SIMPLE, name="answer")
    assert second == first and os.stat(first).st_mtime_ns == mtime
    assert len(compile_runs(log)) == 1
    # Other flags or source are other cache entries.
    assert compile_shared(SIMPLE, name="answer", flags=["-DX=1"]) != first
    assert compile_shared(SIMPLE + "\n", name="answer") != first
    assert len(compile_runs(log)) == 3
    # The version is asked once per process per compiler.
    assert sum("--version" in ln for ln in log.read_text().splitlines()) <= 1
    # No temporary files left behind; the source is kept beside the library.
    names = os.listdir(tmp_path / "cache")
    assert not [n for n in names if n.startswith(".tmp-")]
    assert Path(first).with_suffix(".c").read_text() == SIMPLE


def test_cache_dir_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("KILN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compiler.cache_dir() == tmp_path / "kiln"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert compiler.cache_dir() == Path.home() / ".cache" / "kiln"


def test_missing_cc(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent")
    with pytest.raises(CompileError, match="CC") as info:
        compile_shared(SIMPLE)
    assert "No C compiler was found" in str(info.value)
    assert "CC=gcc" in str(info.value)


def test_no_compiler_on_path(monkeypatch, tmp_path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CompileError, match="No C compiler was found.*CC"):
        find_compiler()


def test_syntax_error_quotes_line(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    source = "int ok(void) { return 1; }\nint broken(void) { return 1 +* ; }\n"
    with pytest.raises(CompileError) as info:
        compile_shared(source, name="broken")
    msg = str(info.value)
    assert "error" in msg
    assert "line 2: int broken(void) { return 1 +* ; }" in msg
    assert "line 1:" not in msg


def test_build_flags():
    assert build_flags()[:6] == list(compiler.DEFAULT_FLAGS)
    f = build_flags(["-march=x86-64", "-O2", "-fno-openmp", "-DFOO"])
    assert "-march=native" not in f and "-O3" not in f and "-fopenmp" not in f
    assert f[-3:] == ["-march=x86-64", "-O2", "-DFOO"]


def test_unsupported_openmp_is_dropped(monkeypatch, tmp_path):
    script, log = make_wrapper(tmp_path, "no-omp-cc", reject="-fopenmp")
    monkeypatch.setenv("CC", str(script))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    path = compile_shared(SIMPLE, name="noomp")
    assert os.path.exists(path)
    assert not any("-fopenmp" in ln for ln in compile_runs(log)[-1:])


def test_compile_asm():
    asm = compiler.compile_asm("int triple(int x) { return 3 * x; }\n")
    assert "triple" in asm


def test_concurrent_processes_share_the_cache(tmp_path):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo), KILN_CACHE_DIR=str(tmp_path / "cache"))
    code = (
        "from kiln.runtime.compiler import compile_shared\n"
        "print(compile_shared('int kiln_race(void) { return 7; }\\n', name='race'))\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1 and os.path.exists(paths.pop())
    assert not [n for n in os.listdir(tmp_path / "cache") if n.startswith(".tmp-")]
