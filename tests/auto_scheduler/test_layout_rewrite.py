"""Layout rewrite (``layout_rewrite_option``): a layout-free weight stored in its tiled
reader's loop order computes the same results, and the kernel reads the rewritten buffer."""

from __future__ import annotations

import random

import numpy as np
import pytest

import kiln
from kiln import auto_scheduler, te
from kiln.auto_scheduler import LayoutRewriteOption
from kiln.auto_scheduler.annotation import sample_candidate
from kiln.auto_scheduler.loop_state import SplitStep
from kiln.auto_scheduler.sketch import generate_sketches

FREE = "layout_free_placeholders"


@auto_scheduler.register_workload
def lr_test_dense(n, k, m):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C",
                   attrs={FREE: [B]})
    return [A, B, C]


@auto_scheduler.register_workload
def lr_test_dense_relu(n, k, m):
    A, B, C = lr_test_dense(n, k, m)
    return [A, B, te.compute((n, m), lambda i, j: te.max(C[i, j], 0.0), name="relu")]


@auto_scheduler.register_workload
def lr_test_conv2d(n, c, h, w, co, kh):
    data = te.placeholder((n, c, h, w), name="data")
    kernel = te.placeholder((co, c, kh, kh), name="kernel")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kh), name="rx")
    oh, ow = h - kh + 1, w - kh + 1
    conv = te.compute((n, co, oh, ow), lambda b, f, y, x: te.sum(
        data[b, rc, y + ry, x + rx] * kernel[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv", attrs={FREE: [kernel]})
    return [data, kernel, conv]


def _conv_ref(data: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    kh = kernel.shape[2]
    oh, ow = data.shape[2] - kh + 1, data.shape[3] - kh + 1
    out = np.zeros((data.shape[0], kernel.shape[0], oh, ow), np.float32)
    for y in range(kh):
        for x in range(kh):
            out += np.einsum("nchw,fc->nfhw", data[:, :, y:y + oh, x:x + ow],
                             kernel[:, :, y, x])
    return out


def _states(task, count: int, seed: int = 0):
    """``count`` random states whose splits have no partial tile (a tail split keeps the
    weight's layout: test_a_tail_split_keeps_the_layout)."""
    sketches = generate_sketches(task.compute_dag)
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        c = sample_candidate(sketches, rng)
        state = c.state(sketches[c.sketch])
        if not any(isinstance(s, SplitStep) and s.tail for s in state.steps):
            out.append(state)
    return out


def test_a_tail_split_keeps_the_layout():
    """A state whose vectorized tile leaves a partial tile (32 of 48 columns) rewrites no
    layout (its levels do not tile the weight) and gives numpy's product."""
    task = auto_scheduler.SearchTask(func=lr_test_dense, args=(32, 24, 48), target="llvm")
    sketches = generate_sketches(task.compute_dag)
    rng = random.Random(0)
    state = next(s for s in (c.state(sketches[c.sketch])
                             for c in (sample_candidate(sketches, rng) for _ in range(200)))
                 if any(isinstance(t, SplitStep) and t.tail for t in s.steps))
    assert task.compute_dag.layout_rewrites(state) == []
    rng_np = np.random.default_rng(0)
    a, b = (rng_np.random(s, dtype=np.float32) for s in ((32, 24), (24, 48)))
    got = _run(*task.instantiate(state), [a, b], (32, 48))
    np.testing.assert_allclose(got, a @ b, rtol=1e-4)


def _run(sch, args, inputs, out_shape) -> np.ndarray:
    f = kiln.build(sch, args, "llvm")
    out = kiln.nd.array(np.full(out_shape, np.nan, np.float32))
    f(*[kiln.nd.array(x) for x in inputs], out)
    return out.numpy()


def test_option_names_and_defaults():
    assert [o.name for o in LayoutRewriteOption] == [
        "NO_REWRITE", "INSERT_TRANSFORM_STAGE", "REWRITE_FOR_PRE_TRANSFORMED"]
    get = LayoutRewriteOption.get_target_default
    assert get("llvm") == LayoutRewriteOption.INSERT_TRANSFORM_STAGE
    assert get("llvm", True) == LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED
    assert get("cuda") == LayoutRewriteOption.NO_REWRITE
    task = auto_scheduler.SearchTask(
        func=lr_test_dense, args=(8, 8, 8), target="llvm",
        layout_rewrite_option=LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED)
    assert task.layout_rewrite_option == LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED


@pytest.mark.parametrize("workload", [lr_test_dense, lr_test_dense_relu])
def test_dense_results_unchanged_in_both_forms(workload):
    """Random states of every sketch (root tiling, tiling fused into the ReLU, cache
    write): the weight copied by a stage of the kernel, or pre-transformed with
    ``LayoutRewrite.transform``, gives numpy's product."""
    task = auto_scheduler.SearchTask(func=workload, args=(32, 24, 48), target="llvm")
    dag = task.compute_dag
    rng = np.random.default_rng(0)
    a, b = (rng.random(s, dtype=np.float32) for s in ((32, 24), (24, 48)))
    want = a @ b if workload is lr_test_dense else np.maximum(a @ b, 0)
    for state in _states(task, 2):
        (rewrite,) = dag.layout_rewrites(state)
        assert rewrite.placeholder == "B" and np.prod(rewrite.new_shape) == 24 * 48
        got = _run(*task.instantiate(state), [a, b], want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4)
        sch, args = dag.apply_steps_from_state(
            state, LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED)
        assert tuple(int(d) for d in args[1].shape) == rewrite.new_shape
        got = _run(sch, args, [a, rewrite.transform(b)], want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4)


def test_rewritten_layout_follows_the_tiles_and_is_read_contiguously():
    """GEMM tiled ``i.0 j.0 i.1 j.1 k.0 i.2 j.2 k.1 i.3 j.3``: ``B`` is laid out as its
    loops ``j.0 j.1 k.0 j.2 k.1 j.3`` (extent-1 levels dropped), and the innermost loops
    read one vector of the rewritten buffer at ``... + k.inner * 8``."""
    task = auto_scheduler.SearchTask(func=lr_test_dense, args=(32, 24, 48), target="llvm")
    dag = task.compute_dag
    sketches = generate_sketches(dag)
    tiled = next(k for k, s in enumerate(sketches) if "SSRSRS" in str(s))
    sketch = sketches[tiled]
    c = sample_candidate([sketch], random.Random(0))
    splits = sorted(c.tiles)
    tiles = {splits[0]: (2, 2, 2, 4), splits[1]: (2, 3, 1, 8), splits[2]: (6, 4)}
    state = type(c)(0, tiles, c.unrolls).state(sketch)
    (rewrite,) = dag.layout_rewrites(state)
    assert rewrite.new_shape == (2, 3, 6, 4, 8)  # j.0 j.1 k.0 (j.2 = 1) k.1 j.3
    b = np.arange(24 * 48, dtype=np.float32).reshape(24, 48)
    moved = rewrite.transform(b)
    assert moved[1, 2, 5, 3, 7] == b[5 * 4 + 3, 1 * 24 + 2 * 8 + 7]
    sch, args = dag.apply_steps_from_state(state,
                                           LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED)
    text = str(kiln.lower(sch, args, simple_mode=True))
    assert "B_rewritten[" in text and "B[" not in text
    assert "(k.outer*32)) + (k.inner*8)), 1, 8)]" in text, text


def test_no_rewrite_without_layout_free_placeholders():
    from tests.auto_scheduler import workloads  # noqa: F401 - registers as_test_matmul

    task = auto_scheduler.SearchTask(func="as_test_matmul", args=(16, 16, 16, "float32"),
                                     target="llvm")
    (state,) = _states(task, 1)
    assert task.compute_dag.layout_rewrites(state) == []


@pytest.mark.slow
def test_conv2d_results_unchanged():
    """A conv's kernel ``W[f, rc, ry, rx]`` re-laid out for random tilings."""
    task = auto_scheduler.SearchTask(func=lr_test_conv2d, args=(1, 8, 10, 10, 16, 3),
                                     target="llvm")
    dag = task.compute_dag
    rng = np.random.default_rng(0)
    data = rng.random((1, 8, 10, 10), dtype=np.float32)
    kernel = rng.random((16, 8, 3, 3), dtype=np.float32)
    want = _conv_ref(data, kernel)
    for state in _states(task, 2, seed=3):
        (rewrite,) = dag.layout_rewrites(state)
        sch, args = dag.apply_steps_from_state(
            state, LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED)
        assert "kernel_rewritten[" in str(kiln.lower(sch, args, simple_mode=True))
        got = _run(sch, args, [data, rewrite.transform(kernel)], want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4)
        np.testing.assert_allclose(_run(*task.instantiate(state), [data, kernel],
                                        want.shape), want, rtol=1e-4)


@auto_scheduler.register_workload
def lr_test_topi_conv(c, size, f, depthwise):
    from kiln import topi

    data = te.placeholder((1, c, size, size), name="data")
    if depthwise:
        kernel = te.placeholder((c, 1, 3, 3), name="kernel")
        return [data, kernel, topi.nn.depthwise_conv2d_nchw(data, kernel, 1, 1, 1)]
    kernel = te.placeholder((f, c, 3, 3), name="kernel")
    return [data, kernel, topi.nn.conv2d_nchw(data, kernel, 1, 1, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("depthwise", [False, True])
def test_the_replayed_record_is_the_measured_kernel(tmp_path, depthwise):
    """What a benchmark or ``relay.build`` replays from the log is the kernel the runner
    timed: ``apply_best`` with the measured form (the copy stage) lowers to the measured
    candidate's loops exactly, and taking the weight pre-transformed only drops that copy
    (the conv's padding and its loops are the same). topi's padded convolutions (the
    depthwise one declares no layout-free weight, so every form is one kernel)."""
    task = auto_scheduler.SearchTask(func=lr_test_topi_conv, args=(8, 6, 8, depthwise),
                                     target="llvm")
    sketches = generate_sketches(task.compute_dag)
    rng = random.Random(4)
    log = str(tmp_path / "log.json")
    for k in range(2):
        c = sample_candidate(sketches, rng, filled=k == 0)
        state = c.state(sketches[c.sketch])
        (tmp_path / "log.json").unlink(missing_ok=True)
        auto_scheduler.save_records(log, [auto_scheduler.MeasureInput(task, state)],
                                    [auto_scheduler.MeasureResult((1e-3,), 0, 0.1, 0.0)])
        measured = str(kiln.lower(*task.instantiate(state)))
        insert = LayoutRewriteOption.INSERT_TRANSFORM_STAGE
        pre = LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED
        assert str(kiln.lower(*task.apply_best(log, layout_rewrite_option=insert))) == measured
        deployed = str(kiln.lower(*task.apply_best(log, layout_rewrite_option=pre)))
        if depthwise or not task.compute_dag.layout_rewrites(state):
            assert deployed == measured
        else:  # the padding and the convolution's loops the same, the copy dropped
            pad, conv = (measured.index(f"produce {n}") for n in ("pad_temp", "conv2d_nchw"))
            assert "produce kernel_rewritten" in measured[pad:conv]
            assert deployed == measured[:measured.index("allocate kernel_rewritten")] \
                + measured[conv:]
