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

A graph with symbolic dimensions (a dynamic batch or sequence length: the plan's
``shape_vars`` name them, tensor shapes hold their expressions, ``storages`` is null and
each intermediate tensor carries its ``live`` steps) is compiled once: the graph module
binds the dimensions from the shapes of the inputs ``set_input`` receives, plans the
storages for those shapes (:func:`plan_storages`, the best fit the compiler uses for static
graphs) and caches the arrays and calls of each shape, so returning to a size is free. A
row-blocked step (``rows``, :mod:`kiln.relay.row_blocks`) runs its static kernels over
blocks of the rows of its tensors.

Both of TVM's flows work:

* the factory: ``lib = relay.build(...)``; ``GraphModule(lib["default"](dev))``;
  ``lib.export_library("m.tar")`` / :func:`load_module` (library, plan and parameters in one);
* the classic triple (TVM 0.6-0.7, the book §1.3): ``graph, lib, params = relay.build(...)``;
  ``graph_runtime.create(graph, lib, dev)``; ``set_input(**params)`` or
  ``load_params(relay.save_param_dict(params))``; ``lib.export_library`` /
  ``kiln.runtime.load_module`` for the library alone.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import operator
import os
import shutil
import tarfile
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import TVMError
from . import packed_call
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


def plan_storages(lifetimes: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """Storages for tensors given as ``(first step, last step, bytes)`` in order of their
    first step: a tensor reuses a storage whose tensors are all dead before its first step
    (the smallest that fits, else the largest free one, grown), or gets a new one. Returns
    the storage of each tensor and the storage sizes in bytes."""
    sizes: list[int] = []
    free: list[int] = []
    live: list[tuple[int, int]] = []  # (last step, storage)
    assign: list[int] = []
    for first, last, need in lifetimes:
        free += [sid for lu, sid in live if lu < first]
        live = [(lu, sid) for lu, sid in live if lu >= first]
        fits = [sid for sid in free if sizes[sid] >= need]
        if fits:
            sid = min(fits, key=lambda x: sizes[x])
        elif free:
            sid = max(free, key=lambda x: sizes[x])
            sizes[sid] = need
        else:
            sid = len(sizes)
            sizes.append(need)
        if sid in free:
            free.remove(sid)
        assign.append(sid)
        live.append((last, sid))
    return assign, sizes


#: the operations a symbolic dimension's expression in a plan may use (kiln's printed form)
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CALLS = {"floordiv": operator.floordiv, "floormod": operator.mod, "min": min, "max": max}


def eval_dim(dim: int | str, env: dict[str, int]) -> int:
    """The value of a plan's dimension: an int, or the expression of symbolic dimensions
    (``"(batch*512)"``, ``"floordiv((seq + 3), 2)"``) evaluated with their values ``env``."""
    if isinstance(dim, int):
        return dim

    def ev(e: ast.AST) -> int:
        if isinstance(e, ast.Constant) and isinstance(e.value, int):
            return e.value
        if isinstance(e, ast.Name) and e.id in env:
            return env[e.id]
        if isinstance(e, ast.BinOp) and type(e.op) in _BINOPS:
            return _BINOPS[type(e.op)](ev(e.left), ev(e.right))
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return -ev(e.operand)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in _CALLS:
            return _CALLS[e.func.id](*(ev(a) for a in e.args))
        raise TVMError(f"graph plan: cannot evaluate the dimension {dim!r} with {env}")

    return ev(ast.parse(dim, mode="eval").body)


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
        :func:`kiln.relay.load_module`. The library is ``lib.so`` for a CPU build,
        ``lib.tar`` (:mod:`kiln.codegen.cuda_archive`) for a CUDA one."""
        path = os.fspath(path)
        with tempfile.TemporaryDirectory() as d:
            lib = os.path.join(d, _LIB_MEMBER[self.plan.get("device") == "cuda"])
            if self.lib is not None:
                self.lib.export_library(lib)
            buf = io.BytesIO()
            np.savez(buf, **self.consts)
            with tarfile.open(path, "w") as tf:
                if self.lib is not None:
                    tf.add(lib, os.path.basename(lib))
                for name, data in (("graph.json", self.get_graph_json().encode()),
                                   ("params.npz", buf.getvalue())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))


#: the library's member in an exported factory: CPU, CUDA
_LIB_MEMBER = ("lib.so", "lib.tar")


def load_module(path) -> GraphExecutorFactoryModule:
    """Load what :meth:`GraphExecutorFactoryModule.export_library` saved."""
    d = tempfile.mkdtemp(prefix="kiln-relay-")
    with tarfile.open(os.fspath(path)) as tf:
        tf.extractall(d, filter="data")
    with open(os.path.join(d, "graph.json")) as f:
        plan = json.load(f)
    with np.load(os.path.join(d, "params.npz")) as z:
        consts = {k: z[k] for k in z.files}
    libs = [os.path.join(d, name) for name in _LIB_MEMBER]
    lib = next((_load_lib(p) for p in libs if os.path.exists(p)), None)
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
        self._params: dict[str, NDArray] = {}
        for t in plan["tensors"]:
            if "const" in t and t["const"] in module.consts:
                self._params[t["const"]] = array(np.array(module.consts[t["const"]],
                                                          order="C"), self.dev)
            elif "const" in t:  # a graph JSON without its parameters: set_input/load_params
                self._params[t["const"]] = empty(t["shape"], t["dtype"], self.dev)
        self._shape_vars: dict[str, list] = plan.get("shape_vars", {})
        self._instances: dict[tuple, _Instance] = {}
        env = {v: 1 for v in self._shape_vars}  # dynamic graphs start at every size 1
        self._use(env)

    def _use(self, env: dict[str, int]) -> None:
        """Run the graph at the symbolic dimensions ``env`` from now on: its arrays and calls
        for those shapes, made and cached on first use."""
        key = tuple(sorted(env.items()))
        if key not in self._instances:
            self._instances[key] = _instantiate(self.factory, self._params, env, self.dev)
        self._env = env
        self._cur = self._instances[key]

    @property
    def num_cached_plans(self) -> int:
        """How many input shapes this graph module holds arrays and calls for."""
        return len(self._instances)

    def _bind_shape(self, name: str, shape: tuple[int, ...]) -> None:
        """Switch to the shapes that input ``name`` of ``shape`` implies (dynamic graphs)."""
        env = dict(self._env)
        for var, (inp, ax) in self._shape_vars.items():
            if inp == name and ax < len(shape):
                env[var] = int(shape[ax])
        if env != self._env:
            self._use(env)

    def set_input(self, key=None, value=None, **params) -> None:
        if key is not None:
            if isinstance(key, int):
                key = self.factory.plan["inputs"][key]
            if key not in self._cur.inputs:
                raise KeyError(f"graph has no input {key!r} (inputs: "
                               f"{', '.join(self._cur.inputs)})")
            data = value.numpy() if isinstance(value, NDArray) else np.asarray(value)
            if self._shape_vars and data.shape != self._cur.inputs[key].shape:
                self._bind_shape(key, data.shape)
            self._cur.bind_input(key, self._cur.own_inputs[key])  # after set_input_zero_copy
            self._cur.inputs[key].copyfrom(data)
        for k, v in params.items():
            if k in self._cur.inputs:
                self.set_input(k, v)
            elif k in self._params:
                self._params[k].copyfrom(v.numpy() if isinstance(v, NDArray) else v)

    def set_input_zero_copy(self, key, value: NDArray) -> None:
        """TVM's ``set_input_zero_copy``: the graph reads input ``key`` from ``value``'s
        memory (a compact NDArray of the input's shape and dtype on the graph's device, e.g.
        ``kiln.nd.from_dlpack(tensor)``), without a copy, until the next ``set_input`` of
        ``key``; the module holds ``value`` until then. Graphs with symbolic dimensions
        take their inputs by ``set_input``."""
        if isinstance(key, int):
            key = self.factory.plan["inputs"][key]
        if self._shape_vars:
            raise TVMError("set_input_zero_copy: a graph with symbolic dimensions binds its "
                           "shapes from set_input (which copies)")
        own = self._cur.own_inputs[key]
        if ((tuple(value.shape), value.dtype, value.device) != (own.shape, own.dtype, own.device)
                or value._strides_arr is not None):
            raise TVMError(f"set_input_zero_copy: input {key!r} takes a compact {own.dtype} "
                           f"array of shape {list(own.shape)} on {own.device}, got "
                           f"{value.dtype} {list(value.shape)} on {value.device}"
                           + (" (strided)" if value._strides_arr is not None else ""))
        self._cur.bind_input(key, value)

    def load_params(self, data: bytes | bytearray) -> None:
        """Set the parameters from :func:`save_param_dict`'s bytes."""
        self.set_input(**load_param_dict(data))

    def run(self, **inputs) -> None:
        if inputs:
            self.set_input(**inputs)
        try:
            for launch in self._cur.launches:
                launch()
        except TVMError as e:  # chained to a failed call_packed's exception, if any
            raise e from packed_call.take_error()

    def get_output(self, index: int, out=None) -> NDArray:
        a = self._cur.outputs[index]
        if out is not None:
            out.copyfrom(a)
            return out
        return array(a.numpy(), self.dev)

    def get_input(self, key) -> NDArray:
        if isinstance(key, int):
            key = self.factory.plan["inputs"][key]
        return self._cur.inputs[key]

    def get_num_outputs(self) -> int:
        return len(self._cur.outputs)

    def get_num_inputs(self) -> int:
        return len(self._cur.inputs)

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
                for f, args in self._cur.calls]


@dataclass
class _Instance:
    """A graph's arrays and kernel calls at one binding of its symbolic dimensions."""

    inputs: dict[str, NDArray] = field(default_factory=dict)
    calls: list[tuple[Callable, list[NDArray]]] = field(default_factory=list)
    launches: list[Callable[[], None]] = field(default_factory=list)
    outputs: list[NDArray] = field(default_factory=list)
    storages: list[NDArray] = field(default_factory=list)
    #: the input arrays allocated with the instance (``inputs`` holds an array bound by
    #: ``set_input_zero_copy`` instead)
    own_inputs: dict[str, NDArray] = field(default_factory=dict)

    def bind_input(self, name: str, array: NDArray) -> None:
        """Input ``name`` is read from ``array`` from now on: the calls reading it rebound."""
        old = self.inputs[name]
        if array is old:
            return
        for k, (func, args) in enumerate(self.calls):
            if any(a is old for a in args):
                args = [array if a is old else a for a in args]
                self.calls[k] = (func, args)
                self.launches[k] = _prepared(func, args)
        self.outputs = [array if a is old else a for a in self.outputs]
        self.inputs[name] = array


def _instantiate(factory: GraphExecutorFactoryModule, params: dict[str, NDArray],
                 env: dict[str, int], dev: Device) -> _Instance:
    """The arrays and calls of ``factory``'s plan with its symbolic dimensions at ``env``:
    the parameters shared, the planned storages (planned now for a dynamic graph)
    allocated, every intermediate tensor a view into its storage."""
    plan = factory.plan
    tensors = plan["tensors"]
    shapes = [[eval_dim(d, env) for d in t["shape"]] for t in tensors]
    if plan["storages"] is None:  # dynamic: plan the storages for these shapes
        planned = [k for k, t in enumerate(tensors) if "live" in t]
        sids, sizes = plan_storages([(*tensors[k]["live"], max(1, int(np.prod(
            shapes[k], dtype=np.int64)) * np.dtype(tensors[k]["dtype"]).itemsize))
            for k in planned])
        storage_of = dict(zip(planned, sids, strict=True))
    else:
        sizes = plan["storages"]
        storage_of = {k: t["storage"] for k, t in enumerate(tensors) if "storage" in t}
    inst = _Instance(storages=[empty((max(s, 1) + 64,), "uint8", dev) for s in sizes])
    arrays: list[NDArray] = []
    for k, t in enumerate(tensors):
        if "const" in t:
            a = params[t["const"]]
        elif k in storage_of:
            a = _view(inst.storages[storage_of[k]], shapes[k], t["dtype"])
        else:
            a = empty(shapes[k], t["dtype"], dev)
            if "input" in t:
                inst.inputs[t["input"]] = inst.own_inputs[t["input"]] = a
        arrays.append(a)
    lib = factory.lib
    inst.calls = [call for st in plan["steps"]
                  for call in _step_calls(lib, st, arrays, tensors, env)]
    inst.launches = [_prepared(f, args) for f, args in inst.calls]
    inst.outputs = [arrays[i] for i in plan["outputs"]]
    return inst


def _step_calls(lib, step: dict, arrays: list[NDArray], tensors: list[dict],
                env: dict[str, int]) -> list[tuple[Callable, list[NDArray]]]:
    """The kernel calls of one plan step (``arrays``, ``tensors``: the plan's tensors and
    their entries): its function on its arguments, or, for a row-blocked step (``rows``:
    the symbolic leading dimension and the kernels by row count, largest first, each with
    its arguments), as many blocks of each count as fit in the rows left, each kernel on
    views of its rows of the arguments whose leading dimension is that variable."""
    if "rows" not in step:
        return [(lib.get_function(step["func"]), [arrays[i] for i in step["args"]])]
    var = step["rows"]["var"]
    calls, start, n = [], 0, env[var]
    for count, name, *own in step["rows"]["kernels"]:
        ids = own[0] if own else step["args"]  # a plan of kernels sharing the step's args
        sliced = [bool(tensors[i]["shape"]) and tensors[i]["shape"][0] == var for i in ids]
        func = lib.get_function(name)
        while n - start >= count:
            calls.append((func, [_rows(arrays[i], start, count) if cut else arrays[i]
                                 for i, cut in zip(ids, sliced, strict=True)]))
            start += count
    return calls


def _rows(a: NDArray, start: int, count: int) -> NDArray:
    """Rows ``[start, start + count)`` of ``a`` as a view."""
    row = int(np.prod(a.shape[1:], dtype=np.int64)) * np.dtype(a.dtype).itemsize
    return NDArray._view(a._ptr + start * row, (count, *a.shape[1:]), a.dtype, a.device,
                         lambda: a)


def _prepared(func, args: list[NDArray]) -> Callable[[], None]:
    """``func(*args)`` as a call without arguments, bound once (the arrays of a graph module
    never move): a compiled CPU function's packed arguments, a CUDA host function's checked
    launch (``bind``)."""
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
