"""The tvm alias: unchanged `import tvm` / `from tvm import te` / `import d2ltvm` programs.

The in-process tests check the import machinery (same module objects, clear errors for
missing modules, clean uninstall); the subprocess tests run a classic-TVM script through
`python -m kiln.as_tvm`, compiling and running a kernel.
"""

import subprocess
import sys
import textwrap

import pytest

import kiln
from kiln import alias


@pytest.fixture
def tvm_alias():
    """Install the alias for one test, then remove it and the aliased sys.modules names."""
    alias.install_as_tvm()
    yield
    alias.uninstall_as_tvm()


def test_same_module_objects(tvm_alias):
    import tvm
    import tvm.testing
    from tvm import te

    import kiln.te
    import kiln.testing

    assert tvm is kiln
    assert te is kiln.te
    assert tvm.te is kiln.te
    assert tvm.testing is kiln.testing
    assert tvm.__spec__.name == "kiln"  # the real module keeps its identity


def test_d2ltvm_names(tvm_alias):
    import d2l_tvm
    import d2ltvm
    import tvm.contrib.d2ltvm

    from kiln.contrib import d2ltvm as real

    assert d2ltvm is real and d2l_tvm is real and tvm.contrib.d2ltvm is real


def test_missing_submodule_names_kiln_module(tvm_alias):
    with pytest.raises(ModuleNotFoundError, match="kiln.no_such_module") as err:
        import tvm.no_such_module  # noqa: F401
    assert err.value.name == "tvm.no_such_module"


def test_install_is_idempotent_and_uninstall_cleans_up():
    alias.install_as_tvm()
    alias.install_as_tvm()
    try:
        assert sum(isinstance(f, alias._AliasFinder) for f in sys.meta_path) == 1
        import tvm  # noqa: F401
    finally:
        alias.uninstall_as_tvm()
    assert not alias.is_installed()
    assert not [name for name in sys.modules if name == "tvm" or name.startswith("tvm.")]


def test_install_refuses_a_foreign_tvm(monkeypatch):
    import types

    monkeypatch.setitem(sys.modules, "tvm", types.ModuleType("tvm"))
    with pytest.raises(RuntimeError, match="already imported"):
        alias.install_as_tvm()
    assert not alias.is_installed()


def test_install_as_tvm_is_exported():
    assert kiln.install_as_tvm is alias.install_as_tvm


CLASSIC_SCRIPT = textwrap.dedent(
    """
    import sys

    import numpy as np
    import tvm
    import tvm.testing
    from tvm import te
    import d2ltvm

    import kiln

    assert __name__ == "__main__"
    assert tvm is kiln and te is kiln.te
    print("argv:", sys.argv[1:])

    n = 16
    A, B, C = d2ltvm.vector_add(n)
    s = te.create_schedule(C.op)
    mod = tvm.build(s, [A, B, C])
    a, b, c = d2ltvm.get_abc(n, tvm.nd.array)
    mod(a, b, c)
    tvm.testing.assert_allclose(c.asnumpy(), a.asnumpy() + b.asnumpy())
    print("ALIAS-OK")
    """
)


def test_run_script_with_as_tvm(tmp_path, kiln_env):
    script = tmp_path / "classic.py"
    script.write_text(CLASSIC_SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-m", "kiln.as_tvm", str(script), "x", "--y"],
        cwd=tmp_path,
        env=kiln_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "argv: ['x', '--y']" in proc.stdout
    assert "ALIAS-OK" in proc.stdout


def test_run_code_and_exit_status(tmp_path, kiln_env):
    """`-c` works, the script's exit status is kept, and a missing file is an error."""
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "kiln.as_tvm", *args],
        cwd=tmp_path,
        env=kiln_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ok = run("-c", "import tvm, d2ltvm, kiln; assert tvm is kiln; print('C-OK')")
    assert ok.returncode == 0, ok.stderr
    assert "C-OK" in ok.stdout

    assert run("-c", "import sys; sys.exit(3)").returncode == 3
    assert run(str(tmp_path / "missing.py")).returncode == 2
