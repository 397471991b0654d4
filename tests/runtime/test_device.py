"""Device construction, naming, equality and existence."""

import pickle

import pytest

import kiln.nd as nd
from kiln import runtime as rt
from kiln.runtime import Device, context, cpu, cuda, device, gpu


def test_constructors_and_repr():
    assert repr(cpu()) == "cpu(0)"
    assert repr(cuda(1)) == "cuda(1)"
    assert gpu is cuda
    assert context is device
    assert (cpu(0).device_type, cpu(0).device_id) == (1, 0)
    assert (cuda(3).device_type, cuda(3).device_id) == (2, 3)


@pytest.mark.parametrize("name", ["cpu", "llvm", "c", "llvm -mcpu=skylake", "CPU"])
def test_cpu_names(name):
    assert device(name) == cpu(0)


@pytest.mark.parametrize("name", ["cuda", "gpu", "nvptx"])
def test_cuda_names(name):
    assert device(name, 1) == cuda(1)


def test_int_types_and_unknown():
    assert device(1) == cpu(0)
    assert device(2, 1) == cuda(1)
    assert repr(Device(9, 0)) == "Device(9, 0)"
    with pytest.raises(ValueError, match="unknown device type"):
        device("tpu")


def test_equality_hash_immutability():
    assert cpu(0) == Device(1, 0)
    assert cpu(0) != cpu(1) and cpu(0) != cuda(0) and cpu(0) != "cpu"
    assert len({cpu(0), Device(1, 0), cuda(0)}) == 2
    with pytest.raises(AttributeError):
        cpu().device_id = 3
    assert pickle.loads(pickle.dumps(cuda(2))) == cuda(2)


def test_exist_and_sync():
    assert cpu().exist is True
    assert isinstance(cuda().exist, bool)  # never raises, with or without a driver
    assert Device(9, 0).exist is False
    cpu().sync()


def test_exports():
    for name in ["Device", "cpu", "cuda", "gpu", "device", "context", "NDArray", "Module",
                 "PackedFunc", "load_module", "BenchmarkResult"]:
        assert hasattr(rt, name), name
    for name in ["array", "empty", "NDArray", "cpu", "cuda", "device"]:
        assert hasattr(nd, name), name
