"""Threads (issue 25): ``relay.build`` from several threads at once, each in its own
``PassContext``, and one compiled module run by several graph executors (one per thread)
at once, give the results of a single thread. The contexts a ``with`` block enters
(``PassContext``, ``Target``) belong to the thread that entered them, as in TVM."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

import kiln
from kiln.ir.transform import PassContext
from kiln.target import Target

onnx = pytest.importorskip("onnx")

from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.relay import testing  # noqa: E402

THREADS = 4


def _in_threads(work: Callable[[int], object], n: int = THREADS) -> list:
    """``work(k)`` for k < n, all started together; their results, or the first error."""
    results: list = [None] * n
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def run(k: int) -> None:
        try:
            start.wait()
            results[k] = work(k)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def test_contexts_belong_to_their_thread():
    entered = threading.Barrier(2)

    def work(k: int):
        with PassContext(opt_level=k, config={"who": k}), Target("llvm" if k else "c"):
            entered.wait()  # both threads are inside their blocks now
            return (PassContext.current().opt_level, PassContext.current().config["who"],
                    str(Target.current()))

    assert _in_threads(work, 2) == [(0, 0, "c"), (1, 1, "llvm")]
    assert PassContext.current().opt_level == 3 and Target.current() is None


def _run(lib, name: str, x: np.ndarray) -> np.ndarray:
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.set_input(name, x)
    gm.run()
    return gm.get_output(0).numpy()


MODELS = [testing.conv_bias_relu, testing.pooling]


def _build(builder, opt_level: int):
    mod, params = relay.frontend.from_onnx(builder())
    with PassContext(opt_level=opt_level):
        return relay.build(mod, target="llvm", params=params)


@pytest.mark.slow
def test_relay_build_in_threads():
    """Four threads build two models (each twice, at opt levels 3 and 2) at once."""
    inputs = [testing.random_input(b()) for b in MODELS]
    expected = [_run(_build(b, 3), *inp) for b, inp in zip(MODELS, inputs, strict=True)]

    def work(k: int) -> np.ndarray:
        lib = _build(MODELS[k % 2], 3 if k < 2 else 2)
        return _run(lib, *inputs[k % 2])

    for k, y in enumerate(_in_threads(work)):
        np.testing.assert_allclose(y, expected[k % 2], rtol=1e-5, atol=1e-5)


def test_graph_executors_in_threads_share_a_module():
    lib = _build(testing.conv_bias_relu, 3)
    name, x = testing.random_input(testing.conv_bias_relu())
    xs = [x * (k + 1) for k in range(THREADS)]
    expected = [_run(lib, name, xk) for xk in xs]

    def work(k: int) -> list[np.ndarray]:
        gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
        outs = []
        for _ in range(20):
            gm.set_input(name, xs[k])
            gm.run()
            outs.append(gm.get_output(0).numpy())
        return outs

    for k, outs in enumerate(_in_threads(work)):
        for y in outs:
            np.testing.assert_array_equal(y, expected[k])
