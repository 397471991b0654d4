"""The x86 schedules' vector width: pinned, from the target's -mcpu, else this machine's."""

from kiln.target import Target
from kiln.topi.x86 import _common


def test_vector_width_from_mcpu_and_host(monkeypatch):
    monkeypatch.setattr(_common, "VECTOR_BYTES", None)
    for mcpu, vb in [("skylake-avx512", 64), ("icelake-server", 64), ("znver4", 64),
                     ("x86-64-v4", 64), ("skylake", 32), ("haswell", 32), ("znver3", 32),
                     ("x86-64-v3", 32)]:
        with Target(f"llvm -mcpu={mcpu}"):
            assert _common.vector_bytes() == vb, mcpu
            assert _common.lanes("float32") == vb // 4
    host = _common.host_vector_bytes()
    assert host in (16, 32, 64)
    assert _common.vector_bytes() == host
    with Target("llvm -mcpu=native"), Target("llvm -mcpu=native"):
        assert _common.vector_bytes() == host
    with Target("llvm -mcpu=some-unknown-cpu"):
        assert _common.vector_bytes() == host


def test_pinned_vector_width(monkeypatch):
    monkeypatch.setattr(_common, "VECTOR_BYTES", 64)
    with Target("llvm -mcpu=haswell"):
        assert _common.lanes("float32") == 16 and _common.lanes("float64") == 8
