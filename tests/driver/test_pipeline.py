"""The pipeline table (kiln/driver/pipeline.py): what runs, what KILN_DEBUG prints, user passes
through PassContext, and docs/lowering.md generated from the table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.codegen.cuda_backend import CUDABackend
from kiln.driver import pipeline
from kiln.driver.build import build_module
from kiln.errors import TVMError
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.ir.functor import Mutator, post_order_visit

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lowering.md"


def _vector_add(n=64, factor=8):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    return s, A, B, C


def _names(phases):
    return [p.name for ph in phases for p in ph.passes]


def test_docs_lowering_md_is_generated_from_the_table():
    doc = DOCS.read_text()
    assert pipeline.with_table(doc) == doc, (
        "docs/lowering.md differs from the pipeline table; run `python -m kiln.driver "
        "--write-docs` and review the diff")


def test_kiln_debug_prints_every_pass_of_the_c_path(monkeypatch, capsys):
    monkeypatch.setenv("KILN_DEBUG", "1")
    s, A, B, C = _vector_add()
    kiln.build(s, [A, B, C])
    out = capsys.readouterr().out
    for name in _names(pipeline.LOWER_PHASES) + _names(pipeline.TARGET_PHASES["c"]):
        assert f"// ---- after {name} ----" in out
    # every pass is printed in table order
    positions = [out.index(f"after {n} ") for n in ("inline", "schedule_ops",
                                                   "storage_flatten", "remove_no_op",
                                                   "partition_conditions", "lower_divmod")]
    assert positions == sorted(positions)


def test_kiln_debug_0_prints_nothing(monkeypatch, capsys):
    monkeypatch.setenv("KILN_DEBUG", "0")
    s, A, B, C = _vector_add()
    kiln.lower(s, [A, B, C])
    assert "---- after" not in capsys.readouterr().out


def test_debug_prints_every_pass_of_the_cuda_path(capsys):
    s, A, B, C = _vector_add()
    bx, tx = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    mod = kiln.lower(s, [A, B, C], debug=True)
    build_module(mod, kiln.target.Target("cuda"), CUDABackend(compile_now=False), debug=True)
    out = capsys.readouterr().out
    for name in _names(pipeline.LOWER_PHASES) + _names(pipeline.TARGET_PHASES["cuda"]):
        assert f"// ---- after {name} ----" in out
    assert "default_function_kernel0<<<" in out or "_kernel0<<<" in out


class _AddToSub(Mutator):
    def visit_Add(self, e):
        return E.Sub(self.visit(e.a), self.visit(e.b))


def _run(s, args, n=64):
    mod = kiln.build(s, args)
    a = np.random.rand(n).astype("float32")
    b = np.random.rand(n).astype("float32")
    c = kiln.nd.empty((n,))
    mod(kiln.nd.array(a), kiln.nd.array(b), c)
    return a, b, c.numpy()


def test_classic_stmt_pass_runs_at_its_phase_and_is_printed(capsys):
    def add_to_sub(stmt):
        return _AddToSub().visit(stmt)

    s, A, B, C = _vector_add()
    with kiln.transform.PassContext(config={"tir.add_lower_pass": [(1, add_to_sub)]}):
        text = str(kiln.lower(s, [A, B, C], debug=True))
        a, b, c = _run(s, [A, B, C])
    assert "(A[i] - B[i])" in text
    np.testing.assert_allclose(c, a - b, rtol=1e-6)
    out = capsys.readouterr().out
    # after phase 1's built-in passes, before phase 2's
    assert out.index("after simplify") < out.index("after add_to_sub") < out.index(
        "after inject_virtual_thread")


def test_prim_func_pass_and_sequential():
    seen = []

    @kiln.tir.transform.prim_func_pass(opt_level=0)
    def record(func, mod, ctx):
        seen.append(func.name)
        return func

    s, A, B, C = _vector_add()
    with kiln.transform.PassContext(config={"tir.add_lower_pass": [(3, record)]}):
        mod = kiln.lower(s, [A, B, C], name="vadd")
    assert seen == ["vadd"]
    seq = kiln.transform.Sequential([kiln.tir.transform.Simplify(), record,
                                     kiln.tir.transform.RemoveNoOp()])
    out = seq(mod)
    assert isinstance(out, kiln.IRModule) and seen == ["vadd", "vadd"]
    assert str(out) == str(mod)


def test_annotated_prim_func_pass_and_opt_level():
    loops = []

    def count(func: kiln.tir.PrimFunc) -> kiln.tir.PrimFunc:
        post_order_visit(func.body, lambda n: loops.append(n) if isinstance(n, S.For) else 0)
        return func

    s, A, B, C = _vector_add()
    with kiln.transform.PassContext(config={"tir.add_lower_pass": [(2, count)]}):
        kiln.lower(s, [A, B, C])
    assert len(loops) == 1
    skipped = kiln.tir.transform.prim_func_pass(lambda f, m, c: 1 / 0, opt_level=3)
    with kiln.transform.PassContext(opt_level=2):
        mod = kiln.lower(s, [A, B, C])
        assert skipped(mod) is mod


@pytest.mark.parametrize("config, message", [
    ([(7, lambda s: s)], "phase must be 0, 1, 2 or 3"),
    ([lambda s: s], "takes (phase, pass) pairs"),
    ([(1, 42)], "neither a pass nor a function"),
    ([(1, lambda s: 42)], "returned int, not a Stmt"),
])
def test_bad_user_passes_are_clear_errors(config, message):
    s, A, B, C = _vector_add()
    with kiln.transform.PassContext(config={"tir.add_lower_pass": config}):
        with pytest.raises(TVMError, match=message.replace("(", r"\(").replace(")", r"\)")):
            kiln.lower(s, [A, B, C])


def test_table_has_one_backend_phase_list_per_backend():
    from kiln.codegen.backend import backend_for

    for kind in ("llvm", "c", "cuda"):
        assert backend_for(kiln.target.Target(kind)).name in pipeline.TARGET_PHASES
    with pytest.raises(TVMError, match="no backend"):
        backend_for(type("T", (), {"kind": "ext_dev"})())
