"""Target descriptions: parsing, the CPU description (features from the compiler's macros,
vector lanes per ISA, the -mcpu table, the KILN_VECTOR_BYTES pin) and the package's layering."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.errors import CompileError, TVMError
from kiln.target import Target, cc, cpu, current_cpu, host_cpu
from kiln.target.triple import host_triple

#: ``gcc -march=sapphirerapids -dM -E`` (abridged), an AVX2-only and an AArch64 compiler
SAPPHIRE_RAPIDS = """#define __SSE2__ 1
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define __AVX512F__ 1
#define __AVX512BW__ 1
#define __AVX512VNNI__ 1
#define __AVX512BF16__ 1
#define __AMX_TILE__ 1
#define __AMX_INT8__ 1
#define __x86_64__ 1
"""
ZEN3 = "#define __SSE2__ 1\n#define __AVX__ 1\n#define __AVX2__ 1\n#define __FMA__ 1\n"
AARCH64 = "#define __aarch64__ 1\n#define __ARM_NEON 1\n"


def macros(text: str) -> set[str]:
    return {line.split()[1] for line in text.splitlines()}


def test_parse_kind_and_options():
    t = Target("llvm -mcpu=skylake-avx512 -num-cores=4")
    assert t.kind == "llvm" and t.kind.name == "llvm" and t.is_cpu and t.device_type == 1
    assert t.attrs == {"mcpu": "skylake-avx512", "num-cores": "4"} and t.mcpu == "skylake-avx512"
    assert str(t) == "llvm -mcpu=skylake-avx512 -num-cores=4" and Target(t).attrs == t.attrs
    g = kiln.target.cuda(arch="sm_80")
    assert (g.keys, g.max_num_threads, g.thread_warp_size, g.attrs["arch"]) == \
        (["cuda", "gpu"], 1024, 32, "sm_80")
    assert Target("cuda -max_num_threads=512").max_num_threads == 512
    assert Target("c").max_num_threads == 1 and kiln.target.create("c").keys == ["cpu"]


@pytest.mark.parametrize("text, message", [
    ("", "empty target string"), ("rocm", "unknown target 'rocm'"),
    ("llvm mcpu=haswell", "must look like -key=value")])
def test_bad_target_strings(text, message):
    with pytest.raises(TVMError, match=message):
        Target(text)


def test_current_target_stacks():
    assert Target.current() is None
    with pytest.raises(TVMError, match="no target is in scope"):
        Target.current(allow_none=False)
    with Target("llvm") as outer:
        with Target("cuda") as inner:
            assert Target.current() is inner
        assert Target.current() is outer
    assert Target.current() is None


def test_features_from_the_compiler_macros():
    spr = cpu.cpu_from_macros(macros(SAPPHIRE_RAPIDS))
    assert (spr.isa, spr.vector_bytes, spr.vector_registers) == ("avx512", 64, 32)
    assert {"avx2", "avx512f", "avx512vnni", "avx512bf16", "amx-tile", "amx-int8"} <= \
        spr.features
    zen3 = cpu.cpu_from_macros(macros(ZEN3))
    assert (zen3.isa, zen3.vector_bytes, zen3.vector_registers) == ("avx2", 32, 16)
    assert zen3.features == {"sse2", "avx", "avx2", "fma"}
    arm = cpu.cpu_from_macros(macros(AARCH64))
    assert (arm.isa, arm.vector_bytes, arm.vector_registers, arm.features) == \
        ("neon", 16, 32, {"neon"})
    bare = cpu.cpu_from_macros(set())
    assert (bare.isa, bare.vector_bytes, bare.vector_registers, bare.features) == \
        ("generic", 16, 16, frozenset())


@pytest.mark.parametrize("text, fp32, fp64", [
    (SAPPHIRE_RAPIDS, 16, 8), (ZEN3, 8, 4), (AARCH64, 4, 2), ("#define __SSE2__ 1", 4, 2)])
def test_vector_lanes_per_isa(text, fp32, fp64):
    info = cpu.cpu_from_macros(macros(text))
    assert (info.vector_lanes(4), info.vector_lanes(8)) == (fp32, fp64)
    assert info.vector_lanes(128) == 1


@pytest.mark.parametrize("mcpu, isa", [
    ("skylake-avx512", "avx512"), ("icelake-server", "avx512"), ("sapphirerapids", "avx512"),
    ("znver4", "avx512"), ("x86-64-v4", "avx512"), ("haswell", "avx2"), ("skylake", "avx2"),
    ("znver3", "avx2"), ("core-avx2", "avx2"), ("bdver4", "avx2"), ("x86-64-v3", "avx2"),
    ("sandybridge", "avx"), ("core-avx-i", "avx"), ("bdver2", "avx"), ("btver2", "avx")])
def test_mcpu_table(mcpu, isa, monkeypatch):
    monkeypatch.delenv("KILN_VECTOR_BYTES", raising=False)
    described = cpu.cpu_for_mcpu(mcpu)
    assert described.isa == isa
    assert Target(f"llvm -mcpu={mcpu}").cpu == described
    assert (described.vector_bytes, described.vector_registers) == \
        {"avx512": (64, 32), "avx2": (32, 16), "avx": (32, 16)}[isa]
    assert "avx" in described.features and ("avx512f" in described.features) == (isa == "avx512")
    assert Target(f"llvm -mcpu={mcpu}").c_flags() == [f"-march={mcpu}"]


def test_unknown_mcpu_plans_for_this_machine_and_the_compiler_rejects_it(monkeypatch, tmp_path):
    monkeypatch.delenv("KILN_VECTOR_BYTES", raising=False)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    assert cpu.cpu_for_mcpu("no-such-cpu") is None
    assert Target("llvm -mcpu=no-such-cpu").cpu == host_cpu()
    assert Target("llvm -mcpu=native").cpu == host_cpu() and Target("llvm").c_flags() == []
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(CompileError, match="-march=no-such-cpu"):
        kiln.build(te.create_schedule(B.op), [A, B], "llvm -mcpu=no-such-cpu")


def test_a_foreign_triple_is_rejected():
    with pytest.raises(TVMError, match="cannot compile for target triple"):
        Target("llvm -target=riscv64-unknown-none-elf").c_flags()
    assert Target(f"llvm -target={kiln.target.host_triple()}").c_flags() == []


def test_host_cpu_is_what_the_compiler_enables(monkeypatch):
    monkeypatch.delenv("KILN_VECTOR_BYTES", raising=False)
    host = host_cpu()
    assert host.isa in ("avx512", "avx2", "avx", "neon", "sse2", "generic")
    assert host == cpu.cpu_from_macros(
        cc.predefined_macros(cc.compiler_command(), ("-march=native",)))
    assert current_cpu() == host and Target("cuda").cpu == host
    with Target("llvm -mcpu=haswell"):
        assert current_cpu().vector_bytes == 32


@pytest.mark.parametrize("width, isa, registers", [("16", "sse2", 16), ("32", "avx2", 16),
                                                   ("64", "avx512", 32)])
def test_vector_bytes_pin(width, isa, registers, monkeypatch):
    monkeypatch.setenv("KILN_VECTOR_BYTES", width)
    pinned = host_cpu()
    assert (pinned.isa, pinned.vector_bytes, pinned.vector_registers) == \
        (isa, int(width), registers)
    assert Target("llvm -mcpu=haswell").cpu.vector_bytes == 32  # a named CPU wins


def test_bad_vector_bytes_pin(monkeypatch):
    monkeypatch.setenv("KILN_VECTOR_BYTES", "24")
    with pytest.raises(ValueError, match="KILN_VECTOR_BYTES must be 16, 32 or 64"):
        host_cpu()


def test_a_kernel_planned_for_the_target_runs(monkeypatch):
    """A vector loop as wide as the target's fp32 lanes compiles and computes correctly."""
    monkeypatch.delenv("KILN_VECTOR_BYTES", raising=False)
    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=Target("llvm").cpu.vector_lanes(4))
    s[B].vectorize(inner)
    f = kiln.build(s, [A, B], "llvm")
    a = kiln.nd.array(np.arange(n, dtype="float32"))
    b = kiln.nd.empty((n,))
    f(a, b)
    np.testing.assert_allclose(b.numpy(), 2 * a.numpy())


def test_the_package_depends_only_on_the_standard_library_and_errors():
    """kiln.target sits low in the layering: runtime, codegen, topi and relay import it."""
    package = Path(kiln.target.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "__future__" or \
                    name == "kiln.errors", f"{path.name} imports {name}"


def test_named_cpu_has_the_features_the_compiler_enables_for_it(monkeypatch):
    """``-mcpu=sapphirerapids`` plans for its bf16, VNNI and AMX instructions where the C
    compiler knows the name (its ``-march=`` macros), not only for AVX-512's baseline."""
    monkeypatch.delenv("KILN_VECTOR_BYTES", raising=False)
    from kiln.target.cc import compiler_command, predefined_macros

    if "__AVX512BF16__" not in predefined_macros(compiler_command(), ("-march=sapphirerapids",)):
        pytest.skip("this C compiler does not know -march=sapphirerapids")
    features = cpu.cpu_for_mcpu("sapphirerapids").features
    assert {"avx512bf16", "avx512vnni", "amx-bf16"} <= features
    assert "avx512bf16" not in cpu.cpu_for_mcpu("skylake-avx512").features


@pytest.mark.parametrize("mcpu", ["sapphirerapids", "emeraldrapids", "graniterapids"])
def test_named_cpu_has_bf16_and_amx_where_the_compiler_cannot_say(monkeypatch, mcpu):
    """A compiler that does not know the name (GCC 12 and ``graniterapids``), or none at all:
    the table :data:`cpu.MCPU_FEATURES` still plans for the CPU's bf16 and AMX paths."""
    monkeypatch.setattr(cpu, "_march_features", lambda name, isa: None)
    features = cpu.cpu_for_mcpu(mcpu).features
    assert {"avx512f", "avx512bf16", "avx512vnni", "amx-tile", "amx-bf16", "amx-int8"} <= features
    assert "avx512bf16" in cpu.cpu_for_mcpu("znver4").features
    assert "amx-tile" not in cpu.cpu_for_mcpu("znver4").features
    assert "avx512bf16" not in cpu.cpu_for_mcpu("icelake-server").features


def test_a_foreign_triple_is_planned_as_a_generic_cpu():
    """A target of another architecture gets none of this x86 host's vector facts (the
    auto-scheduler and topi read them to size tiles); the host's own triple keeps them."""
    foreign = Target("llvm -mtriple=aarch64-linux-gnu").cpu
    assert foreign.isa == "generic" and not foreign.features
    assert Target(f"llvm -mtriple={host_triple()}").cpu == Target("llvm").cpu
