"""A VTA module saved, loaded and run over RPC (kiln/vta/module_file.py, ``remote.ext_dev``):
the loaded module's instruction stream equals the built one, and ``rpc.LocalSession()`` and
a server process both run it on their simulator, bit-exactly."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.vta as vta
from kiln import rpc
from kiln.errors import TVMError

from ..rpc.conftest import start_server_process
from . import ports

RNG = np.random.default_rng(3)


def _vector_add(tmp_path):
    env = vta.get_env()
    s, (A, B, C) = ports.vector_add(env)
    f = vta.build(s, [A, B, C], "ext_dev", env.target_host, name="my_vadd")
    path = tmp_path / "vadd.tar"
    f.export_library(str(path))
    a = RNG.integers(-128, 128, size=[int(d) for d in A.shape]).astype(A.dtype)
    b = RNG.integers(-128, 128, size=[int(d) for d in B.shape]).astype(B.dtype)
    return f, path, a, b, (a + b).astype(C.dtype)


def test_saved_module_loads_with_the_same_program(tmp_path):
    f, path, a, b, expected = _vector_add(tmp_path)
    loaded = kiln.runtime.load_module(str(path))
    assert isinstance(loaded, vta.VTAModule) and loaded.entry_name == "my_vadd"
    assert loaded.get_source() == f.get_source()
    ctx = kiln.ext_dev(0)
    c = kiln.nd.array(np.zeros_like(expected), ctx)
    loaded(kiln.nd.array(a, ctx), kiln.nd.array(b, ctx), c)
    np.testing.assert_array_equal(c.numpy(), expected)


def test_bad_archive_names_are_tvm_errors(tmp_path):
    f, _, _, _, _ = _vector_add(tmp_path)
    with pytest.raises(TVMError, match="saved as a .tar"):
        f.export_library(str(tmp_path / "vadd.so"))


def _run_remote(remote, path, a, b, expected):
    remote.upload(str(path))
    f = remote.load_module("vadd.tar")
    ctx = remote.ext_dev(0)
    c = kiln.nd.array(np.zeros_like(expected), ctx)
    f(kiln.nd.array(a, ctx), kiln.nd.array(b, ctx), c)
    np.testing.assert_array_equal(c.numpy(), expected)


def test_local_session_runs_a_vta_module(tmp_path):
    _, path, a, b, expected = _vector_add(tmp_path)
    _run_remote(rpc.LocalSession(), path, a, b, expected)


def test_rpc_server_runs_a_vta_module(tmp_path):
    _, path, a, b, expected = _vector_add(tmp_path)
    sp, port = start_server_process("-m", "kiln.exec.rpc_server", "--host", "127.0.0.1",
                                    "--port", "0")
    try:
        with rpc.connect("127.0.0.1", port) as remote:
            _run_remote(remote, path, a, b, expected)
    finally:
        sp.stop()
