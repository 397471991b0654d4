"""``tvm.testing`` and its pytest plugin: a classic TVM test file run by pytest-in-pytest under
the ``tvm`` alias, and the helpers it uses checked one by one."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import kiln
import kiln.testing
from kiln import alias, te

pytest_plugins = ["pytester"]

# A test file as TVM's own test suite writes them: nothing kiln-specific.
CLASSIC_TEST_FILE = '''
import numpy as np
import tvm
import tvm.testing
from tvm import te

pytest_plugins = ["tvm.testing.plugin"]

size = tvm.testing.parameter(4, 16)
n, dtype = tvm.testing.parameters((3, "float32"), (5, "float64"))
CALLS = []


@tvm.testing.fixture(cache_return_value=True)
def reference(size):
    CALLS.append(size)
    return np.arange(size, dtype="float32")


@tvm.testing.parametrize_targets("llvm")
def test_add_one(target, dev):
    A = te.placeholder((8,), name="A")
    B = te.compute(A.shape, lambda i: A[i] + 1.0, name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B], target)
    a = tvm.nd.array(np.arange(8, dtype="float32"), dev)
    b = tvm.nd.empty((8,), "float32", dev)
    f(a, b)
    tvm.testing.assert_allclose(b, a.numpy() + 1)


def test_every_target(target, dev):
    assert dev == tvm.device(target)


@tvm.testing.parametrize_targets
def test_bare_parametrize_targets(target):
    assert target in ("llvm", "cuda")


@tvm.testing.exclude_targets("cuda")
def test_exclude_targets(target):
    assert target != "cuda"


@tvm.testing.known_failing_targets("llvm")
def test_known_failing_targets(target):
    assert target != "llvm"


def test_cached_reference(reference, size):
    reference[0] = -1  # each test gets its own copy
    assert reference.shape == (size,)


def test_cached_reference_again(reference, size):
    assert reference[0] == 0
    assert CALLS.count(size) == 1


def test_grouped(n, dtype):
    assert (n, dtype) in [(3, "float32"), (5, "float64")]


@tvm.testing.requires_gpu
def test_needs_gpu():
    assert tvm.cuda(0).exist


if __name__ == "__main__":
    tvm.testing.main()
'''


@pytest.fixture
def tvm_alias():
    """The alias on for one test (removed after it, unless it was on already)."""
    was_installed = alias.is_installed()
    alias.install_as_tvm()
    yield
    if not was_installed:
        alias.uninstall_as_tvm()


needs_c_compiler = pytest.mark.skipif(not kiln.testing.has_c_compiler(),
                                      reason="needs a C compiler")


@needs_c_compiler
def test_classic_test_file_under_the_alias(pytester, tvm_alias, monkeypatch):
    monkeypatch.delenv("TVM_TEST_TARGETS", raising=False)
    pytester.makepyfile(test_classic=CLASSIC_TEST_FILE)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    gpu = int(kiln.testing.has_gpu())
    # add_one[llvm], every_target[llvm], bare[llvm], exclude[llvm], 2 cached, 2 cached_again,
    # 2 grouped; without a GPU every_target[cuda], bare[cuda], known_failing[cuda] and
    # needs_gpu are skipped; exclude[cuda] is not collected; known_failing[llvm] xfails
    result.assert_outcomes(passed=10 + 4 * gpu, skipped=4 - 4 * gpu, xfailed=1)
    if not gpu:
        result.stdout.fnmatch_lines(["*target 'cuda' is not enabled here*",
                                     "*needs an NVIDIA GPU*"])


@needs_c_compiler
def test_conftest_plugin_markers_and_tvm_test_targets(pytester, tvm_alias, monkeypatch):
    """TVM's layout: the root conftest loads the plugin, so its markers pass --strict-markers;
    ``TVM_TEST_TARGETS`` narrows the ``target`` fixture; ``-m "not gpu"`` leaves GPU tests out."""
    monkeypatch.setenv("TVM_TEST_TARGETS", "llvm; opencl")
    pytester.makeconftest('pytest_plugins = ["tvm.testing.plugin"]')
    pytester.makepyfile(test_classic=CLASSIC_TEST_FILE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", "-v",
                                "-m", "not gpu", "-k", "target or gpu")
    result.assert_outcomes(passed=3, skipped=4, xfailed=1, deselected=8)
    result.stdout.fnmatch_lines(["*test_every_target?llvm?*PASSED*",
                                 "*test_every_target?opencl?*SKIPPED*"])


def test_enabled_targets_follow_tvm_test_targets(monkeypatch):
    monkeypatch.setenv("TVM_TEST_TARGETS", "opencl;llvm -mcpu=generic")
    assert kiln.testing.targets_under_test() == ["opencl", "llvm -mcpu=generic"]
    if kiln.testing.has_c_compiler():
        assert kiln.testing.enabled_targets() == [("llvm -mcpu=generic", kiln.cpu(0))]
        assert kiln.testing.device_enabled("llvm")
    assert not kiln.testing.device_enabled("opencl")
    assert not kiln.testing.device_enabled("cuda")  # not listed, GPU or not


def test_enabled_targets_fall_back_to_llvm(monkeypatch):
    monkeypatch.setenv("TVM_TEST_TARGETS", "vulkan")
    expected = [("llvm", kiln.cpu(0))] if kiln.testing.has_c_compiler() else []
    assert kiln.testing.enabled_targets() == expected


def test_default_targets_are_llvm_and_cuda(monkeypatch):
    monkeypatch.delenv("TVM_TEST_TARGETS", raising=False)
    assert kiln.testing.targets_under_test() == ["llvm", "cuda"]
    assert kiln.testing.device_enabled("cuda") == kiln.testing.has_gpu()


def test_assert_allclose_uses_tvm_defaults_and_accepts_ndarrays():
    a = kiln.nd.array(np.ones(3, dtype="float32"))
    kiln.testing.assert_allclose(a, np.ones(3) + 5e-8)  # within atol=1e-7
    with pytest.raises(AssertionError):
        kiln.testing.assert_allclose(a, np.ones(3) + 1e-3)
    with pytest.raises(AssertionError, match="shape mismatch"):
        kiln.testing.assert_allclose(np.ones((3, 1)), np.ones(3))


def _add_one_func(name: str):
    A = te.placeholder((4,), name=name)
    B = te.compute(A.shape, lambda i: A[i] + 1.0, name="B")
    return kiln.lower(te.create_schedule(B.op), [A, B], simple_mode=True)["main"]


def test_assert_prim_func_equal_ignores_parameter_names():
    kiln.testing.assert_prim_func_equal(_add_one_func("A"), _add_one_func("X"))
    A = te.placeholder((4,), name="A")
    B = te.compute(A.shape, lambda i: A[i] * 2.0, name="B")
    other = kiln.lower(te.create_schedule(B.op), [A, B], simple_mode=True)["main"]
    with pytest.raises(ValueError, match="StructuralEqual"):
        kiln.testing.assert_prim_func_equal(_add_one_func("A"), other)


def test_main_runs_pytest_on_the_calling_file(monkeypatch):
    seen = []
    monkeypatch.setattr(pytest, "main", lambda args: seen.append(args) or 3)
    monkeypatch.setattr(sys, "argv", ["prog", "-k", "x"])
    with pytest.raises(SystemExit) as exit_info:
        kiln.testing.main()
    assert exit_info.value.code == 3
    assert seen == [[__file__, "-k", "x"]]


def test_parameters_without_the_plugin_say_so(pytester):
    pytester.makepyfile(test_grouped='''
import kiln.testing

n, dtype = kiln.testing.parameters((1, "float32"))


def test_grouped(n, dtype):
    pass
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*needs the plugin*tvm.testing.plugin*"])
