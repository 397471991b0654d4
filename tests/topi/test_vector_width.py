"""The x86 schedules' vector width: the target's (-mcpu, else this machine's, which
KILN_VECTOR_BYTES pins)."""

from kiln.target import Target, host_cpu
from kiln.topi.x86 import _common


def test_vector_width_from_mcpu_and_host(monkeypatch):
    monkeypatch.delenv("KILN_VECTOR_BYTES", raising=False)
    for mcpu, vb in [("skylake-avx512", 64), ("icelake-server", 64), ("znver4", 64),
                     ("x86-64-v4", 64), ("skylake", 32), ("haswell", 32), ("znver3", 32),
                     ("x86-64-v3", 32)]:
        with Target(f"llvm -mcpu={mcpu}"):
            assert _common.lanes("float32") == vb // 4, mcpu
            assert _common.vector_registers() == (32 if vb == 64 else 16), mcpu
    host = host_cpu().vector_bytes
    assert host in (16, 32, 64)
    assert _common.lanes("float32") == host // 4
    with Target("llvm -mcpu=native"), Target("llvm -mcpu=native"):
        assert _common.lanes("float32") == host // 4
    with Target("llvm -mcpu=some-unknown-cpu"):
        assert _common.lanes("float32") == host // 4


def test_pinned_vector_width(monkeypatch):
    monkeypatch.setenv("KILN_VECTOR_BYTES", "64")
    assert _common.lanes("float32") == 16 and _common.lanes("float64") == 8
    assert _common.vector_registers() == 32
    with Target("llvm -mcpu=haswell"):  # a named CPU is not this machine
        assert _common.lanes("float32") == 8
