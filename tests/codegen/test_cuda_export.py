"""``export_library`` of CUDA modules and ``load_module`` of the archive
(kiln/codegen/cuda_archive.py): the loaded module has the same functions, source and image,
runs (on the CPU emulator of generated kernels here, on ``cuda(0)`` in the ``gpu`` test), and
bad files give TVMErrors."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest

import kiln
from kiln.errors import TVMError

from . import cuda_emulator
from .cuda_workloads import NVRTC_MISSING, have_nvrtc, matmul_shared, vector_add

pytestmark = pytest.mark.skipif(not have_nvrtc(), reason=NVRTC_MISSING)
needs_emulator = pytest.mark.skipif(not cuda_emulator.available(),
                                    reason="g++ is needed to emulate kernels")


def _built(workload):
    return kiln.build(workload.sched, workload.args, target="cuda -arch=sm_90", name="f")


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz", ".tgz"])
def test_round_trip_keeps_functions_source_and_image(tmp_path, suffix):
    mod = _built(vector_add())
    path = tmp_path / f"vadd{suffix}"
    mod.export_library(path)
    loaded = kiln.runtime.load_module(str(path))
    assert loaded.functions == mod.functions and loaded.entry_name == "f"
    dev, ref = loaded.imported_modules[0], mod.imported_modules[0]
    assert dev.get_source() == ref.get_source() and dev.arch == "sm_90"
    assert dev.compile_for("sm_90") == ref.compile_for("sm_90")


@needs_emulator
@pytest.mark.parametrize("make", [vector_add, matmul_shared], ids=lambda f: f.__name__)
def test_loaded_module_computes_the_same(tmp_path, make):
    w = make()
    _built(w).export_library(tmp_path / "m.tar")
    loaded = kiln.runtime.load_module(str(tmp_path / "m.tar"))
    arrays = [np.array(a, copy=True) for a in w.inputs]
    cuda_emulator.Emulated(loaded)(*arrays)
    for index, expected in w.expected.items():
        np.testing.assert_allclose(arrays[index], expected, rtol=w.rtol, atol=w.atol)


def test_bad_suffix_and_damaged_archives_are_tvm_errors(tmp_path):
    mod = _built(vector_add())
    with pytest.raises(TVMError, match="saved as a .tar"):
        mod.export_library(tmp_path / "m.so")
    mod.export_library(tmp_path / "m.tar")
    with tarfile.open(tmp_path / "m.tar") as tar:
        kept = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    broken = tmp_path / "broken.tar"
    with tarfile.open(broken, "w") as tar:
        for name in ("module.json", "kernels.cu", "kernels.cubin"):  # host.json missing
            info = tarfile.TarInfo(name)
            info.size = len(kept[name])
            tar.addfile(info, io.BytesIO(kept[name]))
    with pytest.raises(TVMError, match="cannot load"):
        kiln.runtime.load_module(str(broken))


@pytest.mark.gpu
def test_loaded_module_runs_on_the_gpu(tmp_path):
    if not kiln.cuda(0).exist:
        pytest.skip("no CUDA GPU")
    w = vector_add()
    _built(w).export_library(tmp_path / "m.tar")
    loaded = kiln.runtime.load_module(str(tmp_path / "m.tar"))
    dev = kiln.cuda(0)
    arrays = [kiln.nd.array(a, dev) for a in w.inputs]
    loaded(*arrays)
    np.testing.assert_allclose(arrays[2].numpy(), w.expected[2], rtol=1e-6)
