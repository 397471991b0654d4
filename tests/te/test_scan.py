"""te.scan: recurrences over the first axis, checked against numpy.

The programs are classic TVM's "Scan and Recurrent Kernel" tutorial (cumulative sum, a
multi-stage cell, multiple states) plus an update with a reduction, CPU schedules, a scan read
by a later stage, CUDA (compiled with NVRTC where installed, run on the CPU emulator of
tests/codegen/cuda_emulator.py) and te.scan's error messages.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te

from ..codegen import cuda_emulator
from ..codegen.cuda_workloads import NVRTC_MISSING, build_cuda, have_nvrtc

RNG = np.random.default_rng(0)


def _text(s, args) -> str:
    return str(tvm.lower(s, args, simple_mode=True))


def _run(s, args, inputs, out_shapes):
    """Build for the CPU, run on ``inputs`` and return the outputs as numpy arrays."""
    f = tvm.build(s, args)
    outs = [tvm.nd.array(np.zeros(shape, "float32")) for shape in out_shapes]
    f(*[tvm.nd.array(x) for x in inputs], *outs)
    return [o.numpy() for o in outs]


def cumsum():
    """The tutorial's scan: row t of the result is the sum of rows 0..t of X."""
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n), name="s_state")
    s_init = te.compute((1, n), lambda _, i: X[0, i], name="s_init")
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i], name="s_update")
    s_scan = te.scan(s_init, s_update, s_state, inputs=[X])
    return X, s_init, s_update, s_scan


def test_cumsum_lowered_and_run():
    X, s_init, s_update, s_scan = cumsum()
    s = te.create_schedule(s_scan.op)
    text = _text(s, [X, s_scan])
    assert "produce scan" in text
    assert "for (scan.idx, 0, (m - 1))" in text, text
    # the init is computed once, before the loop; the update reads the previous row
    assert text.index("produce s_init") < text.index("for (scan.idx") < \
        text.index("produce s_update")
    assert "scan[((scan.idx*n) + i)]" in text, text
    assert s_scan.op.scan_axis.var.name == "scan.idx"
    assert isinstance(s_scan.op, te.ScanOp) and s_scan.shape[0] is s_update.shape[0]
    x = RNG.random((7, 5)).astype("float32")
    (out,) = _run(s, [X, s_scan], [x], [(7, 5)])
    np.testing.assert_allclose(out, np.cumsum(x, axis=0), rtol=1e-5)


def test_update_compute_at_scan_axis_is_the_default():
    X, s_init, s_update, s_scan = cumsum()
    s = te.create_schedule(s_scan.op)
    default = _text(s, [X, s_scan])
    s[s_update].compute_at(s[s_scan], s_scan.op.scan_axis)
    assert _text(s, [X, s_scan]) == default


def test_bounds_one_row_per_step():
    """The update computes row scan.idx + 1 per step; the init its one row."""
    X, s_init, s_update, s_scan = cumsum()
    s = te.create_schedule(s_scan.op)
    ranges = te.schedule.InferBound(s)
    t = ranges[s_update.op.axis[0]]
    assert str(t.extent) == "1" and str(t.min) == "(scan.idx + 1)"
    assert str(ranges[s_init.op.axis[0]].extent) == "1"
    assert str(ranges[s_scan.op.scan_axis].extent) == "(m - 1)"


def _two_stage_cell():
    """The tutorial's cell: s1 = 2 * state[t-1], s2 = s1 + X[t]; returns (X, s1, s2, scan)."""
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s1 = te.compute((m, n), lambda t, i: s_state[t - 1, i] * 2, name="s1")
    s2 = te.compute((m, n), lambda t, i: s1[t, i] + X[t, i], name="s2")
    s_scan = te.scan(s_init, s2, s_state, inputs=[X])
    return X, s1, s2, s_scan


def test_multi_stage_cell_with_compute_at():
    """The tutorial's multi-stage cell: s1 computed per 32-wide chunk of the update."""
    X, s1, s2, s_scan = _two_stage_cell()
    s = te.create_schedule(s_scan.op)
    xo, _ = s[s2].split(s2.op.axis[1], factor=32)
    s[s1].compute_at(s[s2], xo)
    text = _text(s, [X, s_scan])
    assert "allocate s1[float32 * 32]" in text, text
    x = RNG.random((6, 40)).astype("float32")
    ref = x.copy()
    for t in range(1, 6):
        ref[t] = ref[t - 1] * 2 + x[t]
    (out,) = _run(s, [X, s_scan], [x], [(6, 40)])
    np.testing.assert_allclose(out, ref, rtol=1e-5)


def test_compute_root_returns_a_group_stage_to_the_scan_loop():
    X, s1, s2, s_scan = _two_stage_cell()
    s = te.create_schedule(s_scan.op)
    s[s1].compute_inline()
    s[s1].compute_root()
    text = _text(s, [X, s_scan])
    assert text.index("for (scan.idx") < text.index("produce s1"), text
    x = RNG.random((5, 3)).astype("float32")
    ref = x.copy()
    for t in range(1, 5):
        ref[t] = ref[t - 1] * 2 + x[t]
    np.testing.assert_allclose(_run(s, [X, s_scan], [x], [(5, 3)])[0], ref, rtol=1e-5)


def test_multiple_states():
    m, n, l = te.var("m"), te.var("n"), te.var("l")
    X = te.placeholder((m, n), name="X")
    s_state1 = te.placeholder((m, n))
    s_state2 = te.placeholder((m, l))
    s_init1 = te.compute((1, n), lambda _, i: X[0, i])
    s_init2 = te.compute((1, l), lambda _, i: 0.0)
    s_update1 = te.compute((m, n), lambda t, i: s_state1[t - 1, i] + X[t, i])
    s_update2 = te.compute((m, l), lambda t, i: s_state2[t - 1, i] + s_state1[t - 1, 0])
    s_scan1, s_scan2 = te.scan([s_init1, s_init2], [s_update1, s_update2],
                               [s_state1, s_state2], inputs=[X])
    assert (s_scan1.name, s_scan2.name) == ("scan.v0", "scan.v1")
    s = te.create_schedule(s_scan1.op)
    x = RNG.random((6, 4)).astype("float32")
    out1, out2 = _run(s, [X, s_scan1, s_scan2], [x], [(6, 4), (6, 3)])
    ref1 = np.cumsum(x, axis=0)
    ref2 = np.zeros((6, 3), "float32")
    for t in range(1, 6):
        ref2[t] = ref2[t - 1] + ref1[t - 1, 0]
    np.testing.assert_allclose(out1, ref1, rtol=1e-5)
    np.testing.assert_allclose(out2, ref2, rtol=1e-5)


def test_two_init_rows():
    """Fibonacci-like: the update reads two earlier steps; init covers rows 0 and 1."""
    m, n = 8, 3
    X = te.placeholder((2, n), name="X")
    state = te.placeholder((m, n))
    init = te.compute((2, n), lambda t, i: X[t, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + state[t - 2, i], name="fib")
    res = te.scan(init, update, state, name="fib_scan")
    s = te.create_schedule(res.op)
    assert "for (fib_scan.idx, 0, 6)" in _text(s, [X, res])
    x = RNG.random((2, n)).astype("float32")
    ref = np.zeros((m, n), "float32")
    ref[:2] = x
    for t in range(2, m):
        ref[t] = ref[t - 1] + ref[t - 2]
    np.testing.assert_allclose(_run(s, [X, res], [x], [(m, n)])[0], ref, rtol=1e-5)


def rnn(T=5, H=6):
    """h[t] = tanh(sum_k W[j, k] * h[t-1, k] + X[t, j]): an update with a reduction."""
    X = te.placeholder((T, H), name="X")
    W = te.placeholder((H, H), name="W")
    h_state = te.placeholder((T, H), name="h_state")
    h_init = te.compute((1, H), lambda _, j: 0.0, name="h_init")
    k = te.reduce_axis((0, H), name="k")
    h2h = te.compute((T, H), lambda t, j: te.sum(W[j, k] * h_state[t - 1, k], axis=k),
                     name="h2h")
    h_update = te.compute((T, H), lambda t, j: te.tanh(h2h[t, j] + X[t, j]), name="h_update")
    h = te.scan(h_init, h_update, h_state, inputs=[X], name="rnn")
    return X, W, h2h, h_update, h


def rnn_reference(x, w):
    h = np.zeros_like(x)
    for t in range(1, x.shape[0]):
        h[t] = np.tanh(w @ h[t - 1] + x[t])
    return h


def test_update_with_reduction_parallel_and_vectorized():
    X, W, h2h, h_update, h = rnn(T=5, H=16)
    s = te.create_schedule(h.op)
    jo, ji = s[h2h].split(h2h.op.axis[1], factor=4)
    s[h2h].parallel(jo)
    s[h2h].reorder(jo, h2h.op.reduce_axis[0], ji)
    s[h2h].vectorize(ji)
    uo, ui = s[h_update].split(h_update.op.axis[1], factor=8)
    s[h_update].vectorize(ui)
    text = _text(s, [X, W, h])
    assert "parallel (j.outer, 0, 4)" in text and "ramp(" in text, text
    x = RNG.random((5, 16)).astype("float32")
    w = (RNG.random((16, 16)).astype("float32") - 0.5) / 4
    out = _run(s, [X, W, h], [x, w], [(5, 16)])[0]
    np.testing.assert_allclose(out, rnn_reference(x, w), rtol=1e-4, atol=1e-5)


def test_dataflow_primitives_on_the_update_group():
    """cache_read / cache_write of an update and rfactor of a group stage keep the new stages
    in the scan loop and the scan reading the new update."""
    x = RNG.random((5, 3)).astype("float32")
    X, s_init, s_update, s_scan = cumsum()
    s = te.create_schedule(s_scan.op)
    s.cache_read(X, "local", [s_update])
    s.cache_write(s_update, "local")
    text = _text(s, [X, s_scan])
    assert text.index("for (scan.idx") < text.index("produce s_update.local"), text
    np.testing.assert_allclose(_run(s, [X, s_scan], [x], [(5, 3)])[0], np.cumsum(x, axis=0),
                               rtol=1e-5)

    X, W, h2h, h_update, h = rnn(T=5, H=16)
    s = te.create_schedule(h.op)
    _, ki = s[h2h].split(h2h.op.reduce_axis[0], factor=4)
    s.rfactor(h2h, ki)
    assert _text(s, [X, W, h]).index("for (rnn.idx") < _text(s, [X, W, h]).index("h2h.rf")
    x = RNG.random((5, 16)).astype("float32")
    w = (RNG.random((16, 16)).astype("float32") - 0.5) / 4
    np.testing.assert_allclose(_run(s, [X, W, h], [x, w], [(5, 16)])[0], rnn_reference(x, w),
                               rtol=1e-4, atol=1e-5)


def test_cache_of_a_state_goes_inside_the_loop():
    X, s_init, s_update, s_scan = cumsum()
    s = te.create_schedule(s_scan.op)
    state = s_update.op.input_tensors[0]
    cache = s.cache_read(state, "local", [s_update])
    with pytest.raises(tvm.ScheduleError, match=r"stage 's_state.local' reads a state of scan "
                                                r"'scan' but is computed outside its loop"):
        tvm.lower(s, [X, s_scan])
    s[cache].compute_at(s[s_scan], s_scan.op.scan_axis)
    assert "s_state.local[i1] = scan[((scan.idx*n) + i1)]" in _text(s, [X, s_scan])
    x = RNG.random((5, 3)).astype("float32")
    np.testing.assert_allclose(_run(s, [X, s_scan], [x], [(5, 3)])[0], np.cumsum(x, axis=0),
                               rtol=1e-5)


def test_scan_read_by_a_later_stage():
    """A scan that is not an argument is allocated whole; init and update write into it."""
    X, s_init, s_update, s_scan = cumsum()
    m, n = X.shape
    Y = te.compute((m, n), lambda t, i: s_scan[t, i] * 2, name="Y")
    s = te.create_schedule(Y.op)
    text = _text(s, [X, Y])
    assert "allocate scan[" in text, text
    x = RNG.random((4, 3)).astype("float32")
    np.testing.assert_allclose(_run(s, [X, Y], [x], [(4, 3)])[0], 2 * np.cumsum(x, axis=0),
                               rtol=1e-5)


def cuda_cumsum(num_thread=32):
    """The tutorial's CUDA schedule: init and update rows split over blocks and threads."""
    X, s_init, s_update, s_scan = cumsum()
    s = te.create_schedule(s_scan.op)
    for stage in (s_init, s_update):
        xo, xi = s[stage].split(stage.op.axis[1], factor=num_thread)
        s[stage].bind(xo, te.thread_axis("blockIdx.x"))
        s[stage].bind(xi, te.thread_axis("threadIdx.x"))
    return s, X, s_scan


def test_cuda_lowered_form():
    s, X, s_scan = cuda_cumsum()
    text = _text(s, [X, s_scan])
    loop = text.index("for (scan.idx, 0, (m - 1))")
    assert text.count("// attr [threadIdx.x] thread_extent = 32") == 2
    assert text.index("produce s_init") < loop < text.index("// attr [blockIdx.x]", loop)


@pytest.mark.gpu
def test_cuda_compiles():
    if not have_nvrtc():
        pytest.skip(NVRTC_MISSING)
    from kiln.codegen.cuda_backend import compile_source

    s, X, s_scan = cuda_cumsum(256)
    mod = tvm.build(s, [X, s_scan], "cuda", name="myscan")
    src = mod.imported_modules[0].get_source()
    for arch in ("sm_80", "sm_90"):
        assert compile_source(src, arch)
    dev = tvm.cuda(0)
    if not dev.exist:
        pytest.skip("no CUDA GPU: compiled for sm_80 and sm_90, launch skipped")
    x = RNG.random((64, 300)).astype("float32")
    out = tvm.nd.array(np.zeros((64, 300), "float32"), dev)
    mod(tvm.nd.array(x, dev), out)
    np.testing.assert_allclose(out.numpy(), np.cumsum(x, axis=0), rtol=1e-4)


@pytest.mark.slow  # compiling the emulated kernels with g++ takes seconds
@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
def test_cuda_emulated():
    """One init kernel, then one update kernel per step launched from the host loop."""
    s, X, s_scan = cuda_cumsum(8)
    mod = build_cuda(s, [X, s_scan], name="myscan")
    x = RNG.random((6, 20)).astype("float32")
    out = np.zeros((6, 20), "float32")
    cuda_emulator.Emulated(mod)(x, out)
    np.testing.assert_allclose(out, np.cumsum(x, axis=0), rtol=1e-5)


# ---- errors --------------------------------------------------------------------------------
def _parts(n=4, m=8, dtype="float32"):
    X = te.placeholder((m, n), name="X", dtype=dtype)
    state = te.placeholder((m, n), name="state", dtype=dtype)
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    return X, state, init, update


def test_error_counts():
    X, state, init, update = _parts()
    with pytest.raises(ValueError, match=r"got 2 init, 1 update and 1 state_placeholder"):
        te.scan([init, init], update, state)


def test_error_dtypes():
    X, state, init, _ = _parts()
    update = te.compute((8, 4), lambda t, i: (state[t - 1, i] + X[t, i]).astype("float64"),
                        name="update")
    with pytest.raises(TypeError, match=r"state 0: dtypes differ: init 'init' is float32, "
                                        r"update 'update' is float64"):
        te.scan(init, update, state)


def test_error_update_shape():
    X, state, init, _ = _parts()
    update = te.compute((8, 3), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    with pytest.raises(ValueError, match=r"update 'update' has shape \(8, 3\) but "
                                         r"state_placeholder 'state' has \(8, 4\).*dimension 1"):
        te.scan(init, update, state)


def test_error_init_shape():
    X, state, _, update = _parts()
    init = te.compute((1, 5), lambda _, i: 0.0, name="init")
    with pytest.raises(ValueError, match=r"init 'init' has shape \(1, 5\) but the state is "
                                         r"\(8, 4\)"):
        te.scan(init, update, state)


def test_error_init_rows():
    X, state, _, update = _parts()
    init = te.compute((8, 4), lambda t, i: X[t, i], name="init")
    with pytest.raises(ValueError, match=r"init 'init' has 8 rows but the state has 8"):
        te.scan(init, update, state)


def test_error_update_does_not_read_state():
    X, state, init, _ = _parts()
    update = te.compute((8, 4), lambda t, i: X[t, i] * 2, name="update")
    with pytest.raises(ValueError, match=r"update 'update' does not read the state "
                                         r"placeholder \('state'\)"):
        te.scan(init, update, state)


def test_error_scan_stage_takes_no_loop_primitive():
    X, s_init, s_update, s_scan = cumsum()
    s = te.create_schedule(s_scan.op)
    with pytest.raises(tvm.ScheduleError, match=r"split: stage 'scan' is a te.scan"):
        s[s_scan].split(s_scan.op.scan_axis, factor=2)


def test_error_update_inlined():
    X, s_init, s_update, s_scan = cumsum()
    s = te.create_schedule(s_scan.op)
    s[s_update].compute_inline()
    with pytest.raises(tvm.ScheduleError, match=r"'s_update' is an update of scan 'scan'"):
        tvm.lower(s, [X, s_scan])
