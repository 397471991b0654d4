"""Per-kernel profile of ResNet-18, ResNet-50 and MobileNetV2 (224x224, batch 1), the
BERT-base encoder (sequence 128) and ViT-B/16 (kiln.relay.testing's models;
``bert_layer``: one BERT-base layer), with the whole-model latency of kiln and onnxruntime
interleaved in one process (``python -m benchmarks models`` is the full suite). Not a test
(no timing assertions): run it by hand with the thread count fixed, e.g.

    OMP_NUM_THREADS=2 python -m benchmarks.profile_models [resnet18] [resnet50] [mobilenet_v2]
        [bert_encoder] [bert_layer] [vit] [vit_layer] [--profile N] [--ort-no-spin]

``--profile N`` prints kiln's N slowest kernels (``GraphModule.profile``) and onnxruntime's
N slowest operators (its session profiler, per node, median over the runs), the same
model and input, so a kernel's gap shows next to the operators it stands for.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np


def _models():
    from kiln.relay import testing

    return {"resnet18": testing.resnet18, "resnet50": testing.resnet50,
            "mobilenet_v2": testing.mobilenet_v2,
            "bert_encoder": testing.bert_encoder, "bert_layer": lambda: testing.bert_encoder(
                layers=1), "vit": testing.vit, "vit_layer": lambda: testing.vit(layers=1)}


def measure(name: str, rounds: int = 15, number: int = 5, profile: int = 0,
            ort_spin: bool = True) -> dict:
    import onnxruntime as ort

    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.relay import testing

    m = _models()[name]()
    mod, params = relay.frontend.from_onnx(m)
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, "llvm", params=params)
    inp, x = testing.random_input(m)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.run(**{inp: x})
    y = gm.get_output(0).numpy()
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    so.inter_op_num_threads = 1
    if not ort_spin:  # on a loaded machine spinning workers lose the most to preemption
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {inp: x})[0]
    kt, ot = [], []
    for _ in range(rounds):
        kt.append(gm.benchmark(number=number, repeat=1))
        t = time.perf_counter()
        for _ in range(number):
            sess.run(None, {inp: x})
        ot.append((time.perf_counter() - t) / number)
    res = {"model": name, "build_s": lib.build_seconds, "kiln_ms": 1e3 * float(np.median(kt)),
           "ort_ms": 1e3 * float(np.median(ot)),
           "kiln_min_ms": 1e3 * float(np.min(kt)), "ort_min_ms": 1e3 * float(np.min(ot)),
           "max_rel_diff": float(np.abs(y - ref).max() / np.abs(ref).max()),
           "summary": lib.summary}
    if profile:
        lines = lib.summary.splitlines()[1:-1]
        prof = gm.profile(number=10)
        res["kernels"] = sorted(((t * 1e3, ln.strip()) for (_, t), ln in
                                 zip(prof, lines, strict=True)), reverse=True)[:profile]
        res["ort_ops"] = ort_profile(m, so, {inp: x})[:profile]
    return res


def ort_profile(model, so, feed: dict, runs: int = 10) -> list[tuple[float, str]]:
    """onnxruntime's operators by time: ``(ms, "node (op type)")``, the median over
    ``runs`` of each node's kernel time (the session profiler's ``Node`` events),
    slowest first."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        for _ in range(runs + 1):
            sess.run(None, feed)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
        so.enable_profiling = False
    times: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            key = f"{e['name'][:-len('_kernel_time')]} ({e['args'].get('op_name', '?')})"
            times[key].append(e["dur"] / 1e3)
    return sorted(((float(np.median(ts[1:] or ts)), k) for k, ts in times.items()),
                  reverse=True)


def main(argv: list[str]) -> None:
    profile = int(argv[argv.index("--profile") + 1]) if "--profile" in argv else 0
    names = [a for a in argv if a in _models()] or ["resnet18", "mobilenet_v2"]
    for name in names:
        r = measure(name, profile=profile, ort_spin="--ort-no-spin" not in argv)
        print(f"{name}: kiln {r['kiln_ms']:.2f} ms, onnxruntime {r['ort_ms']:.2f} ms "
              f"(kiln/ort {r['kiln_ms'] / r['ort_ms']:.2f}; best of rounds "
              f"{r['kiln_min_ms']:.2f} / {r['ort_min_ms']:.2f} ms), build {r['build_s']:.1f} s, "
              f"max |diff| / max |ref| {r['max_rel_diff']:.1e}")
        print("  " + r["summary"].splitlines()[0] + "; " + r["summary"].splitlines()[-1])
        for t, ln in r.get("kernels", []):
            print(f"  {t:7.3f} ms  {ln}")
        if "ort_ops" in r:
            print("  onnxruntime:")
        for t, op in r.get("ort_ops", []):
            print(f"  {t:7.3f} ms  {op}")


if __name__ == "__main__":
    main(sys.argv[1:])
