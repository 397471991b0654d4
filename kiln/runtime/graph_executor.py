"""Graph executor (TVM's ``graph_executor``): runs the kernels of a built graph in order on
NDArrays laid out by the static memory plan.

The runtime half of the graph compiler: it needs a compiled library and the execution plan
(``graph_json``: tensors, kernel calls, storage sizes), never the graph IR, so it runs
wherever a module loads (an RPC server included). ``kiln.relay`` builds the plan
(:mod:`kiln.relay.execution_plan`) and re-exports these names.

Every tensor of the plan lives on the device the graph runs on: for a graph built for
``cuda``, ``GraphModule(lib["default"](kiln.cuda(0)))`` allocates the parameters and the
planned storages on the GPU once, ``set_input`` copies host data in, ``run`` launches the
kernels on the default stream and ``get_output`` copies the result out.

Both of TVM's flows work:

* the factory: ``lib = relay.build(...)``; ``GraphModule(lib["default"](dev))``;
  ``lib.export_library("m.tar")`` / :func:`load_module` (library, plan and parameters in one);
* the classic triple (TVM 0.6-0.7, the book §1.3): ``graph, lib, params = relay.build(...)``;
  ``graph_runtime.create(graph, lib, dev)``; ``set_input(**params)`` or
  ``load_params(relay.save_param_dict(params))``; ``lib.export_library`` /
  ``kiln.runtime.load_module`` for the library alone.
"""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import tarfile
import tempfile
import weakref
from collections.abc import Callable

import numpy as np

from ..errors import TVMError
from .device import CUDA, Device, cpu, cuda
from .module import load_module as _load_lib
from .module import time_evaluator as _wall_clock_evaluator
from .ndarray import NDArray, array, empty


def _view(storage: NDArray, shape, dtype) -> NDArray:
    """An NDArray of ``shape``/``dtype`` sharing the memory of ``storage`` (on any device),
    keeping ``storage`` alive while the view lives."""
    return NDArray._view(storage._ptr, shape, dtype, storage.device, lambda: storage)


def _plan_device(plan: dict, dev: Device | None) -> Device:
    """The device a graph of ``plan`` runs on: ``dev`` (by default cpu(0), or cuda(0) for a
    graph built for cuda), checked against the device its kernels were compiled for."""
    built_for = plan.get("device", "cpu")
    if dev is None:
        return cuda(0) if built_for == "cuda" else cpu(0)
    kind = "cuda" if dev.device_type == CUDA else "cpu"
    if kind != built_for:
        raise TVMError(f"GraphModule: this graph was built for {built_for} and cannot run on "
                       f"{dev}; create it with lib['default'](kiln.{built_for}(0))")
    return dev


class GraphExecutorFactoryModule:
    """What ``relay.build`` returns: the compiled library, the execution plan (``graph_json``)
    and the parameters. ``lib["default"](dev)`` creates a :class:`GraphModule`."""

    def __init__(self, plan: dict, lib, consts: dict[str, np.ndarray]) -> None:
        self.plan = plan
        self.lib = lib
        self.consts = consts
        self.summary = ""
        self.build_seconds = 0.0

    # ---- TVM factory API ------------------------------------------------------------
    def __iter__(self):
        """``graph, lib, params = relay.build(...)``: the classic triple (graph JSON, the
        compiled library, the parameters as NDArrays)."""
        return iter((self.get_graph_json(), self.lib, self.get_params()))

    def __getitem__(self, name: str):
        if name != self.plan.get("mod_name", "default"):
            raise KeyError(f"factory module has no function {name!r}")
        return lambda dev=None: GraphModule(self, dev)

    def get_graph_json(self) -> str:
        return json.dumps(self.plan)

    def get_lib(self):
        return self.lib

    def get_params(self) -> dict:
        return {k: array(v) for k, v in self.consts.items()}

    def export_library(self, path) -> None:
        """Save library + plan + parameters in one tar file; load with
        :func:`kiln.relay.load_module`."""
        path = os.fspath(path)
        with tempfile.TemporaryDirectory() as d:
            so = os.path.join(d, "lib.so")
            if self.lib is not None:
                self.lib.export_library(so)
            buf = io.BytesIO()
            np.savez(buf, **self.consts)
            with tarfile.open(path, "w") as tf:
                if self.lib is not None:
                    tf.add(so, "lib.so")
                for name, data in (("graph.json", self.get_graph_json().encode()),
                                   ("params.npz", buf.getvalue())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))


def load_module(path) -> GraphExecutorFactoryModule:
    """Load what :meth:`GraphExecutorFactoryModule.export_library` saved."""
    d = tempfile.mkdtemp(prefix="kiln-relay-")
    with tarfile.open(os.fspath(path)) as tf:
        tf.extractall(d, filter="data")
    with open(os.path.join(d, "graph.json")) as f:
        plan = json.load(f)
    with np.load(os.path.join(d, "params.npz")) as z:
        consts = {k: z[k] for k in z.files}
    so = os.path.join(d, "lib.so")
    lib = _load_lib(so) if os.path.exists(so) else None
    factory = GraphExecutorFactoryModule(plan, lib, consts)
    # the library stays loaded from d (its path is kept for re-export): remove d with it
    weakref.finalize(factory, shutil.rmtree, d, True)
    return factory


def save_param_dict(params: dict) -> bytes:
    """``relay.save_param_dict``: parameters (name -> NDArray or numpy array) as bytes."""
    buf = io.BytesIO()
    np.savez(buf, **{k: v.numpy() if isinstance(v, NDArray) else np.asarray(v)
                     for k, v in params.items()})
    return buf.getvalue()


def load_param_dict(data: bytes | bytearray) -> dict:
    """``relay.load_param_dict``: what :func:`save_param_dict` wrote, as NDArrays."""
    try:
        with np.load(io.BytesIO(bytes(data))) as z:
            return {k: array(z[k]) for k in z.files}
    except (ValueError, OSError) as e:
        raise TVMError(f"load_param_dict: not a kiln parameter blob ({e})") from None


class GraphModule:
    """``GraphModule(lib["default"](dev))`` or ``graph_runtime.create``: set_input / run /
    get_output."""

    def __new__(cls, module=None, dev=None):
        # a graph module already running on an RPC server (remote_mod["default"](ctx)), or
        # the one lib["default"](dev) made: GraphModule(lib["default"](dev)) is that module
        # (its parameters and storages are not allocated twice)
        if module.__class__.__name__ == "RemoteGraphModule" or (
                isinstance(module, GraphModule) and dev in (None, module.dev)):
            return module
        return super().__new__(cls)

    def __init__(self, module, dev=None) -> None:
        if module is self:  # returned by __new__, already set up
            return
        if isinstance(module, GraphModule):
            module = module.factory
        self.factory = module
        plan = module.plan
        self.dev = _plan_device(plan, dev)
        store = [empty((max(s, 1) + 64,), "uint8", self.dev) for s in plan["storages"]]
        self._arrays: list[NDArray] = []
        self._inputs: dict[str, NDArray] = {}
        self._params: dict[str, NDArray] = {}
        for t in plan["tensors"]:
            if "const" in t and t["const"] in module.consts:
                a = array(np.array(module.consts[t["const"]], order="C"), self.dev)
                self._params[t["const"]] = a
            elif "const" in t:  # a graph JSON without its parameters: set_input/load_params
                a = empty(t["shape"], t["dtype"], self.dev)
                self._params[t["const"]] = a
            elif "storage" in t:
                a = _view(store[t["storage"]], t["shape"], t["dtype"])
            else:
                a = empty(t["shape"], t["dtype"], self.dev)
                if "input" in t:
                    self._inputs[t["input"]] = a
            self._arrays.append(a)
        self._store = store
        lib = module.lib
        self._calls = [(lib.get_function(s["func"]), [self._arrays[i] for i in s["args"]])
                       for s in plan["steps"]]
        self._launches = [_prepared(f, args) for f, args in self._calls]
        self._outputs = [self._arrays[i] for i in plan["outputs"]]

    def set_input(self, key=None, value=None, **params) -> None:
        if key is not None:
            if isinstance(key, int):
                key = self.factory.plan["inputs"][key]
            if key not in self._inputs:
                raise KeyError(f"graph has no input {key!r} (inputs: "
                               f"{', '.join(self._inputs)})")
            self._inputs[key].copyfrom(value.numpy() if isinstance(value, NDArray) else value)
        for k, v in params.items():
            if k in self._inputs:
                self.set_input(k, v)
            elif k in self._params:
                self._params[k].copyfrom(v.numpy() if isinstance(v, NDArray) else v)

    def load_params(self, data: bytes | bytearray) -> None:
        """Set the parameters from :func:`save_param_dict`'s bytes."""
        self.set_input(**load_param_dict(data))

    def run(self, **inputs) -> None:
        if inputs:
            self.set_input(**inputs)
        for launch in self._launches:
            launch()

    def get_output(self, index: int, out=None) -> NDArray:
        a = self._outputs[index]
        if out is not None:
            out.copyfrom(a)
            return out
        return array(a.numpy(), self.dev)

    def get_input(self, key) -> NDArray:
        if isinstance(key, int):
            key = self.factory.plan["inputs"][key]
        return self._inputs[key]

    def get_num_outputs(self) -> int:
        return len(self._outputs)

    def get_num_inputs(self) -> int:
        return len(self._inputs)

    @property
    def module(self) -> GraphModule:
        """TVM's ``m.module``, the graph's runtime module: ``m.module.time_evaluator("run",
        dev, number=10, repeat=3)()``."""
        return self

    def time_evaluator(self, func_name: str = "run", dev: Device | None = None,
                       number: int = 10, repeat: int = 1, min_repeat_ms: float = 0):
        """A function timing ``run`` (the whole graph; inputs as set): CUDA events on a
        GPU, the wall clock on a CPU; returns a ``BenchmarkResult`` of seconds per run."""
        if func_name != "run":
            raise AttributeError(f"time_evaluator: a graph module times 'run', not "
                                 f"{func_name!r}")
        return _evaluator(self.run, dev or self.dev, number, repeat, min_repeat_ms)

    def benchmark(self, number: int = 10, repeat: int = 3) -> float:
        """Median seconds per run."""
        return self.time_evaluator("run", self.dev, number, repeat)().median

    def profile(self, number: int = 5) -> list[tuple[str, float]]:
        """Mean seconds of each kernel over ``number`` runs, in run order."""
        self.run()
        return [(f.name, _evaluator(f, self.dev, number, 1)(*args).mean)
                for f, args in self._calls]


def _prepared(func, args: list[NDArray]) -> Callable[[], None]:
    """``func(*args)`` as a call without arguments; the arguments checked once here when the
    function can bind them (a CUDA host function), else at each call (the arrays of a graph
    module never move, so checking them once is enough)."""
    bind = getattr(func, "bind", None)
    return bind(*args) if bind is not None else functools.partial(func, *args)


def _evaluator(func, dev: Device, number: int, repeat: int, min_repeat_ms: float = 0):
    """``func`` timed on ``dev``: with CUDA events on a GPU, by the wall clock elsewhere."""
    if dev.device_type == CUDA:
        from .cuda_driver import time_evaluator

        return time_evaluator(func, dev.device_id, number, repeat, min_repeat_ms)
    return _wall_clock_evaluator(func, dev, number, repeat, min_repeat_ms)


def create(graph_json_or_factory, lib=None, device=None) -> GraphModule:
    """``graph_runtime.create(factory_or_graph_json, lib, dev)``: from the module
    ``relay.build`` returned, or from its graph JSON and compiled library (the parameters then
    come with ``set_input(**params)`` or ``load_params``)."""
    if isinstance(graph_json_or_factory, GraphExecutorFactoryModule):
        return GraphModule(graph_json_or_factory, device)
    if isinstance(lib, GraphExecutorFactoryModule):
        return GraphModule(lib, device)
    try:
        plan = json.loads(graph_json_or_factory)
    except (TypeError, ValueError):
        raise TVMError("graph_runtime.create: the first argument must be the graph JSON "
                       "relay.build returned (or the built module itself)") from None
    if not isinstance(plan, dict) or "steps" not in plan or "tensors" not in plan:
        raise TVMError("graph_runtime.create: this JSON is not a kiln execution graph")
    if lib is None or not hasattr(lib, "get_function"):
        raise TVMError("graph_runtime.create: the compiled library (relay.build's second "
                       "result, or runtime.load_module of its export) is required")
    return GraphModule(GraphExecutorFactoryModule(plan, lib, {}), device)
