"""AutoTVM suite (issue 7): best GFLOP/s found against trials, per tuner.

``python -m benchmarks.tuning [--quick] [--trials N] [--random-trials N] [--workloads
gemm,conv2d]`` tunes two templates with RandomTuner, GATuner and XGBTuner and records the
best GFLOP/s seen after each trial:

* ``gemm``: ``C = A @ B``, N = 1024, in the structure of examples/cpu/gemm.py (B packed
  into column panels, a register tile in a local write cache, the reduction split and
  unrolled) with its sizes and loop plan as knobs;
* ``conv2d``: a ResNet-18 layer (1x64x56x56, 64 filters 3x3, pad 1) in the structure of
  topi.x86's blocked NCHW schedule with its block sizes and loop orders as knobs.

Every candidate is checked against numpy before it is timed (LocalRunner ``ref_func``). At
the end the hand schedule, the template's untuned (fallback) config and each tuner's best
config are rebuilt in this process and timed interleaved, so their ratios are measured
under the same load.

``--backends local,rpc1,rpc2,dask`` (the default) also measures the same candidates of a
small GEMM with each measurement backend and reports candidates measured per minute and
the overhead per candidate against LocalRunner: ``local`` (LocalBuilder + LocalRunner),
``rpc1``/``rpc2`` (LocalBuilder + RPCRunner through a tracker with 1 or 2 RPC servers on
this machine) and ``dask`` (DaskBuilder + DaskRunner on a 2-worker
``distributed.LocalCluster``, one ``device:cpu`` each; skipped without ``kiln[dask]``).

Writes ``results/tuning.json``, ``results/tuning.md`` and the tuning logs
``results/tuning-<workload>-<tuner>.log``. Nothing here asserts on timings.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/tuning.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from kiln import autotvm, te  # noqa: E402
from kiln.autotvm.task.space import OtherOptionEntity, SplitEntity  # noqa: E402

NAME = "tuning"
DESCRIPTION = "AutoTVM: best GEMM GFLOP/s vs trials for Random, GA and XGB tuners (issue 7)"


def hand_config() -> dict[str, int]:
    """The knobs of examples/cpu/gemm.py's defaults on this machine (6-row tiles, reduction
    unrolled by 4, vectors and panels from ``default_tile``): the template's fallback."""
    vl, bn = common.load_example("cpu", "gemm").default_tile()
    return {"tile_x": bn, "tile_y": 6, "tile_k": 4, "vl": vl}


MR = (1, 2, 4, 6, 8, 12, 16)
PLANS = ["panels_pack_inside", "panels", "rows"]


@autotvm.template("tuning_gemm")
def gemm_template(N):
    """``C = A @ B`` (N x N fp32) in the structure of examples/cpu/gemm.py, sizes tuned.

    Knobs: ``tile_x`` (bn, columns of a register tile and width of a packed B panel),
    ``tile_y`` (mr, rows of a register tile), ``tile_k`` (ku, reduction unroll), ``vl``
    (lanes of one machine vector), ``plan`` (the parallel loop runs over column panels,
    each packing its own B panel, or over panels with B packed beforehand, or over row
    tiles) and ``unroll_rows``. Its fallback config is the hand schedule's."""
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    cfg = autotvm.get_config()
    if cfg.is_fallback:
        hand = hand_config()
        for name in ("tile_x", "tile_y", "tile_k"):
            cfg[name] = SplitEntity([-1, hand[name]])
        cfg["vl"] = OtherOptionEntity(hand["vl"])
    cfg.define_split("tile_x", N, max_factor=256, filter=lambda e: e.size[-1] >= 8)
    cfg.define_split("tile_y", N, policy="candidate", candidate=[[-1, r] for r in MR])
    cfg.define_split("tile_k", N, max_factor=8)
    cfg.define_knob("vl", [8, 16])
    cfg.define_knob("plan", PLANS)
    cfg.define_knob("unroll_rows", [True, False])
    bn, vl = cfg["tile_x"].size[-1], cfg["vl"].val
    if bn % vl:
        cfg.raise_error(f"the panel width {bn} is not a multiple of the vector width {vl}")
    panel_outer = cfg["plan"].val != "rows"

    PB = te.compute((N // bn, N, bn), lambda jo, k, ji: B[k, jo * bn + ji], name="PB")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * PB[j // bn, k, j % bn], axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    pjo, _, pji = s[PB].op.axis
    s[PB].vectorize(pji)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = cfg["tile_y"].apply(s, C, i)
    jo, ji = cfg["tile_x"].apply(s, C, j)
    outer, inner = (jo, io) if panel_outer else (io, jo)
    s[C].reorder(outer, inner, ii, ji)
    s[C].parallel(outer)
    s[C].vectorize(ji)
    s[CC].compute_at(s[C], inner)
    if cfg["plan"].val == "panels_pack_inside":
        s[PB].compute_at(s[C], jo)
    else:
        s[PB].parallel(pjo)
    xc, yc = s[CC].op.axis
    ko, ki = cfg["tile_k"].apply(s, CC, CC.op.reduce_axis[0])
    yo, yi = s[CC].split(yc, factor=vl)
    s[CC].reorder(ko, ki, xc, yo, yi)
    s[CC].unroll(ki)
    if cfg["unroll_rows"].val:
        s[CC].unroll(xc)
    s[CC].unroll(yo)
    s[CC].vectorize(yi)
    return s, [A, B, C]


def _numpy_gemm(a, b):
    return a @ b


RESNET_LAYER = (1, 64, 56, 56, 64, 3, 1, 1)  # N, CI, H, W, CO, K, stride, pad (conv2_x)


@autotvm.template("tuning_conv2d")
def conv2d_template(N, CI, H, W, CO, K, stride, pad):
    """NCHW conv2d in the structure of topi.x86's blocked schedule, sizes and orders tuned.

    Knobs: ``tile_f`` (output channels of a register block), ``tile_x`` (output columns of
    a block), ``outer`` (the parallel loop: rows or channel blocks), ``reduce_order``
    (order of the input-channel and kernel loops), ``unroll_kw`` and ``vec`` (vectorize the
    columns). Its fallback config is topi.x86's choice."""
    from kiln import topi
    from kiln.topi.x86._common import is_pow2, largest_divisor, row_block

    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, K, K), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, pad, 1)
    s = te.create_schedule(conv.op)
    ow = int(conv.shape[3].value)
    cfg = autotvm.get_config()
    if cfg.is_fallback:
        vw = row_block(ow, 16)
        cfg["tile_f"] = SplitEntity([-1, largest_divisor(CO, 8)])
        cfg["tile_x"] = SplitEntity([-1, vw])
        cfg["vec"] = OtherOptionEntity(is_pow2(vw))
    padded = conv.op.input_tensors[0]
    if padded.op is not data.op:
        s[padded].parallel(padded.op.axis[1])
    CC = s.cache_write(conv, "local")
    n, f, y, x = s[conv].op.axis
    cfg.define_split("tile_f", f, max_factor=32)
    cfg.define_split("tile_x", x, max_factor=64)
    cfg.define_knob("outer", ["rows", "channels"])
    cfg.define_knob("unroll_kw", [False, True])
    cfg.define_knob("vec", [True, False])
    vw = cfg["tile_x"].size[-1]
    if cfg["vec"].val and vw & (vw - 1):
        cfg.raise_error(f"{vw} columns are not a power-of-two vector")
    fo, fi = cfg["tile_f"].apply(s, conv, f)
    xo, xi = cfg["tile_x"].apply(s, conv, x)
    order = [y, fo] if cfg["outer"].val == "rows" else [fo, y]
    s[conv].reorder(n, *order, xo, fi, xi)
    s[conv].parallel(order[0])
    s[CC].compute_at(s[conv], xo)
    ni, fi2, yi, xi2 = s[CC].op.axis
    rc, ry, rx = s[CC].op.reduce_axis
    cfg.define_reorder("reduce_order", [rc, ry, rx], "all")
    ordered = [[rc, ry, rx][i] for i in cfg["reduce_order"].perm]
    s[CC].reorder(ni, yi, *ordered, fi2, xi2)
    s[CC].unroll(fi2)
    if cfg["unroll_kw"].val:
        s[CC].unroll(rx)
    if cfg["vec"].val:
        s[conv].vectorize(xi)
        s[CC].vectorize(xi2)
    return s, [data, kernel, conv]


def _numpy_conv2d(data, kernel, stride=1, pad=1):
    k = kernel.shape[-1]
    padded = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]
    return np.einsum("nchwkl,fckl->nfhw", win, kernel, optimize=True).astype(np.float32)


def _hand_gemm(n):
    return common.load_example("cpu", "gemm").gemm_schedule(n)


def _hand_conv2d(N, CI, H, W, CO, K, stride, pad):
    from kiln import topi

    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, K, K), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, pad, 1)
    return topi.x86.schedule_conv2d_nchw([conv]), [data, kernel, conv]


WORKLOADS = {
    "gemm": {"template": "tuning_gemm", "fn": gemm_template, "args": (1024,),
             "ref": _numpy_gemm, "hand": lambda: _hand_gemm(1024),
             "hand_name": "examples/cpu/gemm.py", "label": "GEMM fp32 N=1024"},
    "conv2d": {"template": "tuning_conv2d", "fn": conv2d_template, "args": RESNET_LAYER,
               "ref": _numpy_conv2d, "hand": lambda: _hand_conv2d(*RESNET_LAYER),
               "hand_name": "topi.x86.schedule_conv2d_nchw",
               "label": "ResNet-18 conv2d 1x64x56x56, 64 filters 3x3, stride 1, pad 1"},
}


def make_tuner(name: str, task, seed: int):
    if name == "random":
        return autotvm.RandomTuner(task, seed=seed)
    if name == "ga":
        return autotvm.GATuner(task, pop_size=16, elite_num=2, seed=seed)
    if name == "xgb":
        return autotvm.XGBTuner(task, plan_size=16, feature_type="itervar", loss_type="rank",
                                diversity_filter_ratio=2, seed=seed)
    raise ValueError(name)


def tune_one(name: str, task, n_trial: int, log: Path, cfg: dict[str, Any], ref_func,
             say) -> dict[str, Any]:
    log.unlink(missing_ok=True)
    tuner = make_tuner(name, task, cfg["seed"])
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=cfg["n_parallel"], timeout=60),
        runner=autotvm.LocalRunner(number=cfg["number"], repeat=cfg["repeat"], timeout=20,
                                   min_repeat_ms=cfg["min_repeat_ms"], ref_func=ref_func))
    curve: list[float] = []
    errors: dict[int, int] = {}

    def record(tuner_, inputs, results):
        for res in results:
            curve.append(tuner_.best_flops / 1e9)
            errors[res.error_no] = errors.get(res.error_no, 0) + 1

    t0 = time.perf_counter()
    tuner.tune(n_trial, option, callbacks=[
        autotvm.callback.log_to_file(str(log)), record,
        autotvm.callback.progress_bar(n_trial, prefix=f"[{NAME}:{name}] ", stream=sys.stderr)])
    secs = time.perf_counter() - t0
    row = {"tuner": name, "trials": len(curve), "seconds": round(secs, 1),
           "best_gflops": tuner.best_flops / 1e9, "curve_gflops": curve,
           "errors": {str(k): v for k, v in sorted(errors.items())},
           "best_config": repr(tuner.best_config), "log": log.name}
    if name == "xgb":
        row["feature_seconds"] = round(tuner.cost_model.feature_seconds, 1)
    say(f"{name}: best {row['best_gflops']:.1f} GFLOP/s after {len(curve)} trials, {secs:.0f} s")
    return row


def final_comparison(wl: dict[str, Any], task, rows, cfg) -> dict[str, Any]:
    """Rebuild the hand schedule, the template's fallback (untuned) config and each tuner's
    best config in this process; time them interleaved on the same inputs."""
    import kiln
    from kiln.autotvm.measure.local import tensor_arg_info

    info = tensor_arg_info(task.instantiate(autotvm.task.space.FallbackConfigEntity())[1])
    rng = np.random.default_rng(0)
    arrays = [rng.random(shape, dtype=np.float32) for shape, _, _ in info]
    inputs = [a for a, (_, _, is_out) in zip(arrays, info, strict=True) if not is_out]
    ref = wl["ref"](*inputs)
    nd_inputs = [kiln.nd.array(a) for a in inputs]
    out_shape = info[-1][0]
    mods = {"hand": kiln.build(*wl["hand"](), "llvm"),
            "untuned": kiln.build(*task.instantiate(
                autotvm.task.space.FallbackConfigEntity()), "llvm")}
    for row in rows:
        with autotvm.apply_history_best(str(Path(cfg["out"]) / row["log"])):
            mods[f"tuned-{row['tuner']}"] = kiln.build(*wl["fn"](*wl["args"]), "llvm")
    env: dict[str, Any] = {}
    stmts, correct = {}, {}
    for key, mod in mods.items():
        out = kiln.nd.array(np.full(out_shape, np.nan, np.float32))
        mod(*nd_inputs, out)
        correct[key] = bool(np.allclose(out.numpy(), ref, rtol=1e-3, atol=1e-3))
        var = key.replace("-", "_")
        env[f"mod_{var}"], env[f"args_{var}"] = mod, [*nd_inputs, out]
        stmts[key] = f"mod_{var}(*args_{var})"
    timings = common.interleaved(stmts, env, repeat=cfg["final_repeat"], min_time=0.2, warmup=2)
    res = {k: {"gflops": task.flop / t.median / 1e9, "ms": t.median * 1e3,
               "correct": correct[k], "timing": t.to_dict()} for k, t in timings.items()}
    for k in res:
        res[k]["vs_hand"] = res[k]["gflops"] / res["hand"]["gflops"]
    return res


def settings(quick: bool, trials: int | None, random_trials: int | None) -> dict[str, Any]:
    base = {"seed": 0, "n_parallel": 2, "number": 2, "repeat": 5, "min_repeat_ms": 40}
    if quick:
        base.update(quick=True, trials=trials or 32, random_trials=random_trials or 32,
                    final_repeat=3, backend_trials=16)
    else:
        base.update(quick=False, trials=trials or 200, random_trials=random_trials or 1000,
                    final_repeat=7, backend_trials=64)
    return base


# ---------------------------------------------------------------------------------------
# Measurement backends: candidates per minute
# ---------------------------------------------------------------------------------------
BACKENDS = ("local", "rpc1", "rpc2", "dask")
BACKEND_GEMM = 256  # small: the backends' overhead, not the kernels, should dominate
RPC_KEY = "kiln-bench"


def _timing(cfg: dict[str, Any]) -> dict[str, Any]:
    """The runner settings every backend shares: every candidate checked against numpy."""
    return {"number": cfg["number"], "repeat": 3, "timeout": 20, "check_correctness": True,
            "ref_func": _numpy_gemm}


@contextlib.contextmanager
def _rpc_option(n_servers: int, cfg: dict[str, Any]):
    """A tracker and ``n_servers`` RPC servers on this machine, and the option measuring
    through them."""
    from kiln import rpc

    with rpc.Tracker("127.0.0.1", 0, silent=True) as tracker, contextlib.ExitStack() as stack:
        addr = ("127.0.0.1", tracker.port)
        for _ in range(n_servers):
            stack.enter_context(rpc.Server("127.0.0.1", 0, silent=True, tracker_addr=addr,
                                           key=RPC_KEY))
        client = rpc.connect_tracker(*addr)
        deadline = time.monotonic() + 30
        while client.summary()["queue_info"].get(RPC_KEY, {}).get("free") != n_servers:
            if time.monotonic() > deadline:
                raise RuntimeError("the RPC servers did not register with the tracker")
            time.sleep(0.05)
        yield autotvm.measure_option(
            builder=autotvm.LocalBuilder(n_parallel=cfg["n_parallel"], timeout=60),
            runner=autotvm.RPCRunner(RPC_KEY, *addr, cooldown_interval=0, **_timing(cfg)))


@contextlib.contextmanager
def _dask_option(cfg: dict[str, Any]):
    """A 2-worker ``distributed.LocalCluster`` (processes, one device each), and the option
    building and measuring on it."""
    import logging

    import distributed

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  resources={"device:cpu": 1}, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as client:
        yield autotvm.measure_option(
            builder=autotvm.DaskBuilder(client, n_parallel=cfg["n_parallel"], timeout=60),
            runner=autotvm.DaskRunner(client, resource="device:cpu", **_timing(cfg)))


def _backend_option(name: str, cfg: dict[str, Any]):
    if name == "local":
        return contextlib.nullcontext(autotvm.measure_option(
            builder=autotvm.LocalBuilder(n_parallel=cfg["n_parallel"], timeout=60),
            runner=autotvm.LocalRunner(**_timing(cfg))))
    if name in ("rpc1", "rpc2"):
        return _rpc_option(int(name[-1]), cfg)
    if name == "dask":
        return _dask_option(cfg)
    raise ValueError(f"unknown backend {name!r}; use {', '.join(BACKENDS)}")


def backend_throughput(backends: Sequence[str], cfg: dict[str, Any], say) -> list[dict]:
    """Tune ``backend_trials`` candidates of a GEMM (RandomTuner) with each backend, twice
    on the same cluster, tracker and servers (started before): a first, cold run (seed 0:
    measurement workers, sessions, imports on the Dask workers) and a warm one (seed 1);
    the wall time of each ``tune``, the reference included."""
    task = autotvm.task.create("tuning_gemm", (BACKEND_GEMM,), "llvm")
    n = cfg["backend_trials"]
    rows = []
    for name in backends:
        if name == "dask" and importlib.util.find_spec("distributed") is None:
            say("dask: skipped (pip install 'kiln[dask]')")
            rows.append({"backend": name, "skipped": "distributed is not installed"})
            continue
        errors: dict[int, int] = {}

        def count(tuner_, inputs, results, errors=errors):
            for res in results:
                errors[res.error_no] = errors.get(res.error_no, 0) + 1

        seconds = []
        with _backend_option(name, cfg) as option:
            for seed in (cfg["seed"], cfg["seed"] + 1):
                t0 = time.perf_counter()
                autotvm.RandomTuner(task, seed=seed).tune(n, option, callbacks=[count])
                seconds.append(time.perf_counter() - t0)
        cold, warm = seconds
        rows.append({"backend": name, "candidates": sum(errors.values()),
                     "cold_seconds": round(cold, 2), "seconds": round(warm, 2),
                     "per_minute": round(60 * n / warm, 1),
                     "errors": {str(k): v for k, v in sorted(errors.items())}})
        say(f"{name}: {n} candidates in {cold:.1f} s cold, {warm:.1f} s warm "
            f"({60 * n / warm:.0f} per minute)")
    local = next((r for r in rows if r["backend"] == "local"), None)
    for r in rows:
        if local is not None and "seconds" in r:
            r["overhead_ms"] = round(1e3 * (r["seconds"] - local["seconds"]) / n, 1)
    return rows


BACKEND_LABELS = {"local": "LocalBuilder + LocalRunner",
                  "rpc1": "LocalBuilder + RPCRunner, tracker, 1 server",
                  "rpc2": "LocalBuilder + RPCRunner, tracker, 2 servers",
                  "dask": "DaskBuilder + DaskRunner, LocalCluster of 2 workers"}


def backend_markdown(rows: list[dict], cfg: dict[str, Any]) -> str:
    lines = [f"### Measurement backends: {cfg['backend_trials']} candidates of GEMM "
             f"{BACKEND_GEMM} (RandomTuner, batches of {cfg['n_parallel']}), cold then warm",
             "", "| backend | cold run s | warm run s | per minute (warm) | overhead per "
             "candidate vs local (warm) | errors (error_no: count, both runs) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        label = BACKEND_LABELS.get(r["backend"], r["backend"])
        if "skipped" in r:
            lines.append(f"| {label} | — | — | — | — | skipped: {r['skipped']} |")
            continue
        errs = ", ".join(f"{k}: {v}" for k, v in r["errors"].items())
        over = f"{r['overhead_ms']:+.0f} ms" if "overhead_ms" in r else "—"
        lines.append(f"| {label} | {r['cold_seconds']:.1f} | {r['seconds']:.1f} | "
                     f"{r['per_minute']:.0f} | {over} | {errs} |")
    lines += ["", "Every backend runs on this machine: the RPC servers, the Dask workers, "
              "the builds and the measurements share its cores, so the figures are the "
              "backends' overhead under that contention, not a cluster's throughput. The "
              "cold run starts the measurement workers (and, for Dask, imports kiln and "
              "the template on each worker)."]
    return "\n".join(lines)


def _at(curve: list[float], k: int) -> float | None:
    return curve[min(k, len(curve)) - 1] if curve else None


def markdown(wl: dict[str, Any], rows, final) -> str:
    marks = [m for m in (16, 32, 64, 100, 200, 500, 1000)
             if any(len(r["curve_gflops"]) >= m for r in rows)]
    head = "| tuner | trials | " + " | ".join(f"best @{m}" for m in marks) + \
        " | best | seconds | errors (error_no: count) |"
    lines = [f"### {wl['label']}", "", head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [f"{_at(r['curve_gflops'], m):.1f}" if len(r["curve_gflops"]) >= m else "—"
                 for m in marks]
        errs = ", ".join(f"{k}: {v}" for k, v in r["errors"].items())
        lines.append(f"| {r['tuner']} | {r['trials']} | " + " | ".join(cells)
                     + f" | {r['best_gflops']:.1f} | {r['seconds']:.0f} | {errs} |")
    lines += ["", "Best GFLOP/s found so far (as measured while tuning: the median repeat; "
              "2 parallel builds load the machine between runs), after that many trials.", "",
              "| schedule (rebuilt, timed interleaved) | GFLOP/s | ms | vs hand | correct |",
              "|---|---|---|---|---|"]
    for k, v in final.items():
        name = f"hand ({wl['hand_name']})" if k == "hand" else k
        lines.append(f"| {name} | {v['gflops']:.1f} | {v['ms']:.2f} | {v['vs_hand']:.2f}× | "
                     f"{'yes' if v['correct'] else 'NO'} |")
    rnd = next((r for r in rows if r["tuner"] == "random"), None)
    xgb = next((r for r in rows if r["tuner"] == "xgb"), None)
    if rnd and xgb and rnd["best_gflops"] > 0:
        x100 = _at(xgb["curve_gflops"], 100)
        lines += ["", f"XGB after {min(100, xgb['trials'])} trials: {x100:.1f} GFLOP/s = "
                  f"{100 * x100 / rnd['best_gflops']:.0f} % of the best of {rnd['trials']} "
                  "random trials (goal: 90 % of 1,000 random trials)."]
    return "\n".join(lines)


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True, trials: int | None = None, random_trials: int | None = None,
        tuners: Sequence[str] = ("random", "ga", "xgb"),
        workloads: Sequence[str] = ("gemm", "conv2d"),
        backends: Sequence[str] = BACKENDS) -> str:
    del profile
    started = time.time()
    t0 = time.perf_counter()
    cfg = settings(quick, trials, random_trials)
    out = common.results_dir(out_dir)
    cfg["out"] = str(out)
    load_start = common.load_average()
    say = common.progress(NAME, verbose)
    results, sections = {}, []
    for wname in workloads:
        wl = WORKLOADS[wname]
        task = autotvm.task.create(wl["template"], wl["args"], "llvm")
        say(f"{wl['label']}: {len(task.config_space)} configs")
        rows = []
        for name in tuners:
            n_trial = cfg["random_trials"] if name == "random" else cfg["trials"]
            rows.append(tune_one(name, task, n_trial, out / f"{NAME}-{wname}-{name}.log",
                                 cfg, wl["ref"], say))
        say("final interleaved comparison ...")
        final = final_comparison(wl, task, rows, cfg)
        results[wname] = {"label": wl["label"], "space_size": len(task.config_space),
                          "flop": task.flop, "tuners": rows, "final": final}
        sections.append(markdown(wl, rows, final))
    if backends:
        say(f"measurement backends: {', '.join(backends)} ...")
        results["backends"] = backend_throughput(backends, cfg, say)
        sections.append(backend_markdown(results["backends"], cfg))
    machine = common.machine_info(load_start)
    machine["load_average_end"] = common.load_average()
    duration = time.perf_counter() - t0
    when = common.run_date(started)
    command = "python -m benchmarks.tuning" + (" --quick" if quick else "")
    data = {"suite": NAME, "date": when, "duration_s": round(duration, 1), "machine": machine,
            "settings": cfg, "workloads": results, "command": command}
    text = "\n".join([
        "# AutoTVM tuning", "",
        f"Run {when}, {duration:.0f} s, command: `{command}` (trials: random "
        f"{cfg['random_trials']}, others {cfg['trials']})", "",
        *(f"- {line}" for line in common.machine_lines(machine)), "",
        "\n\n".join(sections), "",
        "Nothing fails on these numbers. See docs/autotvm.md.", ""])
    _, md_path = common.write_results(NAME, data, text, out)
    common.show_report(text, md_path, verbose)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = common.suite_parser(NAME, DESCRIPTION, "32 trials per tuner")
    p.add_argument("--trials", type=int, default=None, help="trials of the GA and XGB tuners")
    p.add_argument("--random-trials", type=int, default=None, help="trials of RandomTuner")
    p.add_argument("--tuners", default="random,ga,xgb", help="comma-separated tuners to run")
    p.add_argument("--workloads", default="gemm,conv2d",
                   help=f"comma-separated workloads ({', '.join(WORKLOADS)}; '' for none)")
    p.add_argument("--backends", default=",".join(BACKENDS),
                   help=f"measurement backends to compare ({', '.join(BACKENDS)}; '' for "
                        "none)")
    args = p.parse_args(argv)
    run(quick=args.quick, out_dir=args.out, trials=args.trials,
        random_trials=args.random_trials, tuners=args.tuners.split(","),
        workloads=[w for w in args.workloads.split(",") if w],
        backends=[b for b in args.backends.split(",") if b])
    return 0


if __name__ == "__main__":
    sys.exit(main())
