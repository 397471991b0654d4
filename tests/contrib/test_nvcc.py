"""tvm.contrib.nvcc: compute-capability facts (pure) and NVRTC compilation (skipped without
the CUDA Python bindings; no GPU is needed)."""

import pytest

from kiln import TVMError
from kiln.contrib import nvcc
from kiln.runtime import cuda_driver
from kiln.target.target import Target, cuda

KERNEL = 'extern "C" __global__ void add_one(float* a) { a[threadIdx.x] += 1.0f; }'


@pytest.mark.parametrize("version,fp16,int8,tensorcore,bf16", [
    ("5.2", False, False, False, False),
    ("5.3", True, False, False, False),
    ("6.1", True, True, False, False),
    ("7.5", True, True, True, False),
    ("8.6", True, True, True, True),
])
def test_capabilities(version, fp16, int8, tensorcore, bf16):
    assert nvcc.have_fp16(version) is fp16
    assert nvcc.have_int8(version) is int8
    assert nvcc.have_tensorcore(version) is tensorcore
    assert nvcc.have_bf16(version) is bf16


def test_parse_compute_version():
    assert nvcc.parse_compute_version("8.6") == (8, 6)
    with pytest.raises(RuntimeError, match="Compute version parsing error"):
        nvcc.parse_compute_version("sm_86")


def test_compute_version_of_a_target():
    assert nvcc.get_target_compute_version("cuda -arch=sm_86") == "8.6"
    with cuda(arch="sm_75"):
        assert nvcc.get_target_compute_version() == "7.5"
    assert nvcc.have_tensorcore(target=Target("cuda -arch=sm_70"))


@pytest.mark.skipif(not cuda_driver.available(), reason="CUDA Python bindings not installed")
@pytest.mark.parametrize("fmt", ["ptx", "cubin"])
def test_compile_cuda(fmt, tmp_path):
    path = tmp_path / f"k.{fmt}"
    data = nvcc.compile_cuda(KERNEL, target_format=fmt, arch="sm_80", path_target=str(path))
    assert isinstance(data, bytearray) and path.read_bytes() == data
    if fmt == "ptx":
        assert b".entry add_one" in data


def test_compile_cuda_rejects_fatbin():
    with pytest.raises(ValueError, match="fatbin"):
        nvcc.compile_cuda(KERNEL, target_format="fatbin", arch="sm_80")


def test_no_arch_without_target_or_gpu(monkeypatch):
    def no_gpu(device_id=0):
        raise TVMError("no CUDA GPU is available")

    monkeypatch.setattr(cuda_driver, "device_arch", no_gpu)
    with pytest.raises(TVMError, match="-arch=sm_XY"):
        nvcc.get_target_compute_version()
