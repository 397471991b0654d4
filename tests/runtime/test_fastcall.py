"""The call path: the C extension and the ctypes fallback behave the same."""

import numpy as np
import pytest

import kiln.nd as nd
from kiln.errors import TVMError
from kiln.runtime import fastcall

from .test_module import run_fresh


@pytest.fixture(params=["c", "ctypes"])
def backend(request):
    if request.param == "c" and fastcall.load_extension() is None:
        pytest.skip("the C fast call extension cannot be built here")
    fastcall.use_backend(request.param)
    yield request.param
    fastcall.use_backend("auto")


def test_backend_selected(backend):
    assert fastcall.backend() == backend


def test_vadd_and_scalars(backend, test_module):
    a = nd.array(np.arange(4, dtype="float32"))
    b = nd.array(np.ones(4, "float32"))
    c = nd.empty((4,), "float32")
    test_module(a, b, c)
    np.testing.assert_array_equal(c.numpy(), [1, 2, 3, 4])
    x = nd.array(np.arange(3, dtype="float64"))
    out = nd.empty((3,), "float64")
    for alpha, beta in [(2.0, 1), (np.float32(2.0), np.int64(1)), (np.float64(2), True)]:
        test_module["axpy"](x, out, alpha, beta)
        np.testing.assert_array_equal(out.numpy(), [1, 3, 5])
    with pytest.raises(TVMError, match="alpha must be a float"):
        test_module["axpy"](x, out, 2, 1)


def test_type_codes(backend, test_module):
    out = nd.empty((16,), "int64")
    t = nd.array(np.zeros((2, 2)))
    args = [7, 1.5, t, True, np.float32(2.5), np.int8(-3), np.bool_(True), np.uint64(9)]
    test_module["record"](out, *args)
    codes_values = out.numpy().reshape(-1, 2).tolist()
    assert codes_values == [[0, 7], [2, 1500], [7, 2], [0, 1], [2, 2500], [0, -3], [0, 1],
                            [0, 9]]


def test_many_arguments(backend, test_module):
    out = nd.empty((80,), "int64")
    test_module["record"](out, *range(40))
    assert out.numpy()[1::2].tolist() == list(range(40))


@pytest.mark.parametrize("bad, tname", [(np.zeros(3), "ndarray"), ("x", "str"),
                                        (None, "NoneType"), (1j, "complex")])
def test_type_error_names_position(backend, test_module, bad, tname):
    out = nd.empty((4,), "int64")
    with pytest.raises(TypeError, match=rf"record\(\): argument 2 has unsupported type "
                                        rf"'(numpy\.)?{tname}'"):
        test_module["record"](out, 1, bad)
    with pytest.raises(TypeError, match=r"vadd\(\): argument 0"):
        test_module(bad, out, out)


def test_overflow(backend, test_module):
    out = nd.empty((4,), "int64")
    with pytest.raises(OverflowError, match="argument 1"):
        test_module["record"](out, 2**70)


def test_error_messages_identical(test_module):
    if fastcall.load_extension() is None:
        pytest.skip("the C fast call extension cannot be built here")
    a = nd.array(np.zeros((2, 2), "float32"))
    messages = []
    for name in ("c", "ctypes"):
        fastcall.use_backend(name)
        try:
            with pytest.raises(TVMError) as info:
                test_module(a, a, a)
            messages.append(str(info.value))
        finally:
            fastcall.use_backend("auto")
    assert messages[0] == messages[1] == "vadd: expected 1-D tensors, got ndim=2"


def test_fallback_without_python_headers(test_module, tmp_path):
    path = tmp_path / "m.so"
    test_module.export_library(path)
    out = run_fresh(f"""
        import sysconfig
        orig = sysconfig.get_paths
        sysconfig.get_paths = lambda *a, **k: {{**orig(*a, **k), "include": "/nonexistent"}}
        import numpy as np
        import kiln.nd as nd
        from kiln.runtime import fastcall, load_module
        m = load_module({str(path)!r})
        a = nd.array(np.arange(3, dtype="float32"))
        c = nd.empty((3,), "float32")
        m(a, a, c)
        print(fastcall.backend(), c.numpy().tolist())
    """)
    assert out.split() == ["ctypes", "[0.0,", "2.0,", "4.0]"]


def test_env_disables_fast_path(monkeypatch):
    monkeypatch.setenv("KILN_NO_FASTCALL", "1")
    try:
        assert fastcall.use_backend("auto") is fastcall.ctypes_call
    finally:
        monkeypatch.delenv("KILN_NO_FASTCALL")
        fastcall.use_backend("auto")
    if fastcall.load_extension() is not None:
        assert fastcall.backend() == "c"


def test_bound_call(backend, test_module):
    """``PackedFunc.bind``: the arguments packed once, the call repeated (a graph module's
    kernel calls); the compiled checks still run at each call."""
    a = nd.array(np.arange(4, dtype="float32"))
    b = nd.array(np.ones(4, "float32"))
    c = nd.empty((4,), "float32")
    call = test_module[test_module.entry_name].bind(a, b, c)
    call()
    np.testing.assert_array_equal(c.numpy(), [1, 2, 3, 4])
    b.copyfrom(np.full(4, 2, "float32"))
    call()
    np.testing.assert_array_equal(c.numpy(), [2, 3, 4, 5])
    with pytest.raises(TVMError):
        test_module[test_module.entry_name].bind(a, b, nd.empty((3,), "float32"))()
