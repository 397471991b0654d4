"""topi.x86's schedule of products of two activations (``matmul``, ``batch_matmul``) against
numpy: static shapes with row and column tails, every layout, an epilogue, and symbolic
shapes (a sequence length known at run time) built once and run at every edge size of the
register block, plus a property test drawing random products (fuzzer-style)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import te, topi
from kiln.topi.x86.batch_matmul import gemm_block

from .common import randn


def _reference(a: np.ndarray, b: np.ndarray, ta: bool, tb: bool) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)


def _product(batch, m, k, n, ta=False, tb=False, scale=False):
    """Placeholders and the product (``/ 8`` after it with ``scale``): 2-D ``matmul``
    without ``batch``, else ``batch_matmul``."""
    lead = () if batch is None else (batch,)
    A = te.placeholder(lead + ((k, m) if ta else (m, k)), name="A")
    B = te.placeholder(lead + ((n, k) if tb else (k, n)), name="B")
    if batch is None:
        C, sched = topi.nn.matmul(A, B, transpose_a=ta, transpose_b=tb), topi.x86.schedule_matmul
    else:
        C = topi.nn.batch_matmul(A, B, transpose_a=ta, transpose_b=tb)
        sched = topi.x86.schedule_batch_matmul
    out = topi.divide(C, 8.0) if scale else C
    return A, B, out, sched


def _run(mod, a: np.ndarray, b: np.ndarray, out_shape) -> np.ndarray:
    out = kiln.nd.array(np.zeros(out_shape, dtype="float32"))
    mod(kiln.nd.array(a), kiln.nd.array(b), out)
    return out.numpy()


def _shapes(batch, m, k, n, ta, tb):
    lead = () if batch is None else (batch,)
    return lead + ((k, m) if ta else (m, k)), lead + ((n, k) if tb else (k, n)), lead + (m, n)


@pytest.mark.parametrize("batch, m, k, n, ta, tb, scale", [
    (None, 13, 24, 40, False, False, False),  # row and column tails
    (None, 16, 64, 32, False, False, True),  # whole blocks, attention's scale epilogue
    (3, 13, 8, 19, False, False, False),  # batched, both tails
    (2, 7, 5, 7, False, False, True),  # smaller than one block
    (1, 9, 16, 33, True, False, False),  # transpose_a, a batch of one (rows in parallel)
    (2, 12, 16, 20, False, True, False),  # transpose_b: dense's dot plan
    (2, 12, 6, 20, False, True, False),  # transpose_b with k % 4 != 0: the block plan
])
def test_static_products_match_numpy(batch, m, k, n, ta, tb, scale):
    A, B, out, sched = _product(batch, m, k, n, ta, tb, scale)
    mod = kiln.build(sched([out]), [A, B, out])
    sa, sb, so = _shapes(batch, m, k, n, ta, tb)
    a, b = randn(sa, 1), randn(sb, 2)
    want = _reference(a, b, ta, tb) / (8.0 if scale else 1.0)
    np.testing.assert_allclose(_run(mod, a, b, so), want, rtol=1e-4, atol=1e-4)


def _edge_sizes() -> list[int]:
    """0, 1, and one less than, equal to and one more than the block's rows and columns,
    and a large size."""
    mb, nb = gemm_block("float32")
    return sorted({0, 1, mb - 1, mb, mb + 1, nb - 1, nb, nb + 1, 3 * nb + 5})


@pytest.mark.parametrize("form", [
    "context",
    # a symbolic column count compiles the column tail's copies of the block (2-3 s)
    pytest.param("scores", marks=pytest.mark.slow),
    pytest.param("batched", marks=pytest.mark.slow),
])
def test_symbolic_sequence_length_one_build_every_size(form):
    """Attention's products over a symbolic sequence length ``s``, each built once:
    ``scores = q kᵀ / 8`` (``[s, 16] x [16, s]``), ``context = p v`` (``[s, s] x [s, 16]``,
    ``s`` also the reduction) and a batched ``[2, s, 16] x [2, 16, s]``."""
    s = te.var("s")
    batch, m, k, n = {"scores": (None, s, 16, s), "context": (None, s, s, 16),
                      "batched": (2, s, 16, s)}[form]
    A, B, out, sched = _product(batch, m, k, n, scale=form == "scores")
    mod = kiln.build(sched([out]), [A, B, out])
    for size in _edge_sizes():
        bind = {"s": size}
        dims = [bind.get(str(d), d) for d in (m, k, n)]
        sa, sb, so = _shapes(batch, *dims, False, False)
        a, b = randn(sa, size), randn(sb, size + 1)
        want = _reference(a, b, False, False) / (8.0 if form == "scores" else 1.0)
        np.testing.assert_allclose(_run(mod, a, b, so), want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"s = {size}")


def test_symbolic_block_is_guard_free_in_one_parallel_loop():
    """Over a symbolic extent the full register blocks keep no test: the rows' and the
    columns' checks are separate guards, each cut by loop partitioning; the row tail is a
    branch of the one parallel loop over the row blocks (one fork of the threads per
    call, none for a product below the parallel threshold: tested at run time), not a
    second parallel loop."""
    s = te.var("s")
    A, B, out, sched = _product(None, s, 16, s)
    text = str(kiln.lower(sched([out]), [A, B, out]))
    # the first block's accumulation over k, up to the store of the block
    first_block = text.split("for (k, ", 1)[1].split("for (i.inner, 0, ", 1)[0]
    assert "ramp(" in first_block and "likely" not in first_block
    mb, _ = gemm_block("float32")
    assert text.count("parallel (") == 1
    assert f"< floordiv(s, {mb})))) {{" in text  # the tail block: a branch of that loop
    assert "pragma_parallel_if = (" in text  # (s*16*s) >= 4 * PARALLEL_MIN_ELEMS


def test_symbolic_scores_have_no_dead_copy_of_the_block():
    """``q kᵀ / 8`` over a symbolic sequence length: the register block for full rows and for
    the tail rows, each with full columns and with the column tail compiled once per
    number of whole vectors it holds (0, 1 or 2: ``specialize_remainder``), and no test
    left but the parallel loop's branch and those cases; a tail past a cut keeps no
    guarded copy of the block (issue 19: they were a fifth of the lowered code and of its
    compile time)."""
    s = te.var("s")
    A, B, out, sched = _product(None, s, 16, s, scale=True)
    text = str(kiln.lower(sched([out]), [A, B, out]))
    assert text.count("for (k, ") == 2 * (1 + 3)
    assert text.count("likely(") == 1
    assert text.count(" == 0))") == text.count(" == 1))") == 2  # the cases, per row branch


@pytest.mark.slow  # builds the 8 copies of the block (3-5 s)
def test_symbolic_context_row_tail_is_compiled_per_rows_left():
    """``p v`` over a symbolic sequence length (64 columns, a constant): the tail rows'
    block is compiled once per number of rows left (``specialize_remainder``), so no block
    loops over a run-time row count; exact at every count of rows left."""
    s = te.var("s")
    A, B, out, sched = _product(None, s, s, 64)
    text = str(kiln.lower(sched([out]), [A, B, out]))
    mb, _ = gemm_block("float32")
    assert text.count("for (k, ") == mb  # the full block's and one per rows left
    assert f"0, min((s - (i0.outer*{mb})), {mb}))" not in text
    mod = kiln.build(sched([out]), [A, B, out])
    for size in range(2 * mb + 1):
        a, b = randn((size, size), size), randn((size, 64), size + 1)
        np.testing.assert_allclose(_run(mod, a, b, (size, 64)), _reference(a, b, False, False),
                                   rtol=1e-4, atol=1e-4, err_msg=f"s = {size}")


@pytest.mark.slow  # the column tail's copies of the block take 2-5 s to compile
def test_symbolic_scores_column_tail_is_a_masked_vector():
    """``q kᵀ / 8`` over a symbolic sequence length: the block's columns past the last whole
    vector are one vector whose loads and stores are masked (``tail="predicate"`` in C), so
    no scalar loop over a run-time column count is left, and the product is exact at 0, 1,
    around the vector width and at 7, 64 and 500 columns. The kernel of
    test_symbolic_sequence_length_one_build_every_size's scores: compiled once a session."""
    s = te.var("s")
    A, B, out, sched = _product(None, s, 16, s, scale=True)
    mod = kiln.build(sched([out]), [A, B, out])
    src = mod.get_source()
    assert "kiln_mask_load_float" in src and "kiln_mask_store_float" in src
    assert "j_inner_inner" not in src and "i1_inner_inner_inner" not in src
    width = gemm_block("float32")[1] // 2
    for size in sorted({0, 1, 2, width - 1, width, width + 1, 7, 64, 500}):
        a, b = randn((size, 16), size), randn((16, size), size + 1)
        np.testing.assert_allclose(_run(mod, a, b, (size, size)), _reference(a, b, False, False)
                                   / 8.0, rtol=1e-4, atol=1e-4, err_msg=f"s = {size}")


@settings(max_examples=10)
@given(data=st.data())
@pytest.mark.slow
def test_random_products_every_extent(data):
    """Fuzzer-style: a random product (2-D or batched, either operand transposed, an
    epilogue or not), some dimensions symbolic, built once and run at random sizes
    including 0 and the block's edges."""
    mb, nb = gemm_block("float32")
    batch = data.draw(st.sampled_from([None, 1, 3]))
    ta, tb, scale = (data.draw(st.booleans()) for _ in range(3))
    sizes = st.sampled_from([0, 1, mb - 1, mb, mb + 1, nb - 1, nb + 1, 2 * nb + 3])
    names = data.draw(st.lists(st.sampled_from("mkn"), max_size=3, unique=True))
    static = {d: data.draw(st.integers(1, 2 * nb + 3)) for d in "mkn"}
    dims = {d: te.var(d) if d in names else static[d] for d in "mkn"}
    A, B, out, sched = _product(batch, dims["m"], dims["k"], dims["n"], ta, tb, scale)
    mod = kiln.build(sched([out]), [A, B, out])
    for _ in range(3):
        bind = {d: data.draw(sizes) if d in names else static[d] for d in "mkn"}
        sa, sb, so = _shapes(batch, bind["m"], bind["k"], bind["n"], ta, tb)
        a, b = randn(sa, 1), randn(sb, 2)
        want = _reference(a, b, ta, tb) / (8.0 if scale else 1.0)
        np.testing.assert_allclose(_run(mod, a, b, so), want, rtol=1e-4, atol=1e-4,
                                   err_msg=str(bind))
