"""A schedule as a list of transform steps (TVM's ``auto_scheduler.State``).

A :class:`State` is the sequence of schedule primitives the search chose, each a small
record naming its stage (by operation name) and its loops (by iterator name), so it can be
written to a log as JSON and replayed on a fresh schedule of the same computation
(:meth:`ComputeDAG.apply_steps_from_state`). Iterator names follow TVM's: a stage's root
loops are its axes' variable names, ``split`` of ``i`` gives ``i.0`` (outermost) ...
``i.n``, ``fuse`` of ``a`` and ``b`` gives ``a@b@``, ``cache_write`` of stage ``C`` adds
the stage ``C.local`` (which computes) and keeps ``C`` (which copies out), ``rfactor`` of
stage ``C`` over its reduction loop ``k.1`` adds the stage ``C.rf`` (partial results, its
first axis ``k.1``, its other loops named as in ``C``) and leaves ``C`` reducing over
``k.1.v``.

Step records (``to_json``): ``["SP", stage, iter, extent, [inner lengths]]`` (and a sixth
field, the ``split`` tail strategy, where a length does not divide its loop: a vectorized
tile of whole vectors over 14 columns; records without it still load),
``["RE", stage, [iters]]``, ``["FU", stage, [iters]]``, ``["AN", stage, iter, kind]``,
``["PR", stage, iter, "auto_unroll_max_step$N"]``, ``["CA", stage, target stage, iter]``,
``["CI", stage]``, ``["CW", stage, scope]``, ``["CR", tensor, scope, [reader stages]]``,
``["RF", stage, iter, factor_axis]``, ``["SS", stage, scope]`` (``set_scope``). An ``AN``
kind is ``parallel``, ``vectorize``, ``unroll`` or a GPU thread axis the loop is bound to
(``blockIdx.x``, ``vthread``, ``threadIdx.x``). ``cache_read`` of tensor ``A`` adds the
stage ``A.<scope>`` whose root loops are ``ax0``, ``ax1``, ... (TVM's names).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.te import thread_axis

__all__ = ["State", "Step", "SplitStep", "ReorderStep", "FuseStep", "AnnotationStep",
           "PragmaStep", "ComputeAtStep", "ComputeInlineStep", "CacheWriteStep",
           "CacheReadStep", "RfactorStep", "SetScopeStep", "step_from_json", "THREAD_AXES",
           "has_tail", "split_extents"]

#: the GPU thread axes an ``AnnotationStep`` binds a loop to
THREAD_AXES = ("blockIdx.x", "vthread", "threadIdx.x")


@dataclass
class ReplayContext:
    """The schedule a state is replayed on: stages and their named loops."""

    sch: object
    stages: dict  # stage name -> te Stage
    iters: dict  # stage name -> {iterator name -> IterVar}
    tensors: dict  # stage name -> output Tensor

    def add_stage(self, name: str, tensor, loop_names: dict | None = None) -> None:
        """Register ``tensor``'s stage under ``name`` with its root loops named as its
        axes' variables (reduction axes after the spatial ones), or as ``loop_names``
        (variable name -> loop name) says where it names them."""
        stage = self.sch[tensor]
        op = stage.op
        axes = list(op.axis) + list(getattr(op, "reduce_axis", []))
        names = loop_names or {}
        self.stages[name] = stage
        self.tensors[name] = tensor
        self.iters[name] = {names.get(iv.var.name, root_iter_name(axes, k)): iv
                            for k, iv in enumerate(axes)}


def root_iter_name(axes, k: int) -> str:
    """The name of root loop ``k`` of ``axes``: its variable's name, made unique by its
    position where two axes share one."""
    name = axes[k].var.name
    if sum(a.var.name == name for a in axes) > 1:
        return f"{name}_{k}"
    return name


class Step:
    """One schedule primitive of a state (base class)."""

    def apply(self, ctx: ReplayContext) -> None:
        raise NotImplementedError

    def to_json(self) -> list:
        raise NotImplementedError


def split_extents(extent: int, lengths) -> list[int]:
    """The extents the loops split by ``lengths`` (outer to inner, innermost split first)
    have before each split: ``extent``, then the whole and partial tiles of each length."""
    out = [extent]
    for f in reversed(lengths[1:]):
        out.append(-(-out[-1] // int(f)))
    return out[::-1]


def has_tail(extent: int, lengths) -> bool:
    """Whether splitting a loop of ``extent`` by ``lengths`` leaves a partial tile."""
    return any(e % int(f) for e, f in zip(split_extents(extent, lengths), lengths, strict=True))


@dataclass(frozen=True)
class SplitStep(Step):
    """``split`` loop ``iter`` (of ``extent``) into ``len(lengths) + 1`` loops whose inner
    extents are ``lengths`` (outer to inner; the outermost takes the rest, partial tiles
    included); a length that does not divide its loop splits with ``tail=tail`` (see
    ``kiln.te.split_tail``)."""

    stage: str
    iter: str
    extent: int
    lengths: tuple
    tail: str | None = None

    def apply(self, ctx):
        stage, loops = ctx.stages[self.stage], ctx.iters[self.stage]
        rest = loops.pop(self.iter)
        parts = []
        extents = split_extents(self.extent, self.lengths)
        for f, e in zip(reversed(self.lengths), reversed(extents), strict=True):
            rest, inner = stage.split(rest, factor=int(f), tail=self.tail if e % int(f) else None)
            parts.insert(0, inner)
        parts.insert(0, rest)
        for k, iv in enumerate(parts):
            loops[f"{self.iter}.{k}"] = iv

    def to_json(self):
        record = ["SP", self.stage, self.iter, self.extent, [int(x) for x in self.lengths]]
        return record + [self.tail] if self.tail else record


@dataclass(frozen=True)
class ReorderStep(Step):
    """``reorder`` the named loops of ``stage``."""

    stage: str
    order: tuple

    def apply(self, ctx):
        loops = ctx.iters[self.stage]
        ctx.stages[self.stage].reorder(*[loops[n] for n in self.order])

    def to_json(self):
        return ["RE", self.stage, list(self.order)]


@dataclass(frozen=True)
class FuseStep(Step):
    """``fuse`` the named adjacent loops of ``stage`` into ``a@b@...``."""

    stage: str
    names: tuple

    @property
    def fused_name(self) -> str:
        return "".join(f"{n}@" for n in self.names)

    def apply(self, ctx):
        loops = ctx.iters[self.stage]
        ivs = [loops.pop(n) for n in self.names]
        loops[self.fused_name] = ctx.stages[self.stage].fuse(*ivs)

    def to_json(self):
        return ["FU", self.stage, list(self.names)]


@dataclass(frozen=True)
class AnnotationStep(Step):
    """``parallel``, ``vectorize`` or ``unroll`` a loop, or ``bind`` it to a GPU thread
    axis (a kind of :data:`THREAD_AXES`)."""

    stage: str
    iter: str
    kind: str

    def apply(self, ctx):
        stage, loop = ctx.stages[self.stage], ctx.iters[self.stage][self.iter]
        if self.kind in THREAD_AXES:
            stage.bind(loop, thread_axis(self.kind))
        elif self.kind in ("parallel", "vectorize", "unroll"):
            getattr(stage, self.kind)(loop)
        else:
            raise ValueError(f"auto_scheduler: unknown annotation {self.kind!r}")

    def to_json(self):
        return ["AN", self.stage, self.iter, self.kind]


@dataclass(frozen=True)
class PragmaStep(Step):
    """``pragma(iter, "auto_unroll_max_step", value)``: unroll the loops below ``iter``
    whose total trip count is at most ``value``."""

    stage: str
    iter: str
    value: int

    def apply(self, ctx):
        ctx.stages[self.stage].pragma(ctx.iters[self.stage][self.iter],
                                      "auto_unroll_max_step", int(self.value))

    def to_json(self):
        return ["PR", self.stage, self.iter, f"auto_unroll_max_step${int(self.value)}"]


@dataclass(frozen=True)
class ComputeAtStep(Step):
    """``compute_at`` ``stage`` under loop ``iter`` of ``target``."""

    stage: str
    target: str
    iter: str

    def apply(self, ctx):
        ctx.stages[self.stage].compute_at(ctx.stages[self.target],
                                          ctx.iters[self.target][self.iter])

    def to_json(self):
        return ["CA", self.stage, self.target, self.iter]


@dataclass(frozen=True)
class ComputeInlineStep(Step):
    """``compute_inline`` an elementwise stage into its consumers."""

    stage: str

    def apply(self, ctx):
        ctx.stages[self.stage].compute_inline()

    def to_json(self):
        return ["CI", self.stage]


@dataclass(frozen=True)
class CacheWriteStep(Step):
    """``cache_write`` stage ``C``: the new stage ``C.<scope>`` computes, ``C`` copies."""

    stage: str
    scope: str = "local"

    @property
    def new_stage(self) -> str:
        return f"{self.stage}.{self.scope}"

    def apply(self, ctx):
        cache = ctx.sch.cache_write(ctx.tensors[self.stage], self.scope)
        ctx.add_stage(self.new_stage, cache)
        ctx.add_stage(self.stage, ctx.tensors[self.stage])

    def to_json(self):
        return ["CW", self.stage, self.scope]


@dataclass(frozen=True)
class CacheReadStep(Step):
    """``cache_read`` tensor ``A`` (an input of the ``readers`` stages, which then read
    the copy) into the new stage ``A.<scope>``, its root loops ``ax0``, ``ax1``, ..."""

    stage: str
    scope: str
    readers: tuple

    @property
    def new_stage(self) -> str:
        return f"{self.stage}.{self.scope}"

    def apply(self, ctx):
        readers = [ctx.tensors[r] for r in self.readers]
        tensor = next(t for t in readers[0].op.input_tensors if t.op.name == self.stage)
        cache = ctx.sch.cache_read(tensor, self.scope, readers)
        ctx.add_stage(self.new_stage, cache,
                      {iv.var.name: f"ax{d}" for d, iv in enumerate(cache.op.axis)})

    def to_json(self):
        return ["CR", self.stage, self.scope, list(self.readers)]


@dataclass(frozen=True)
class RfactorStep(Step):
    """``rfactor`` stage ``C`` over its reduction loop ``iter``: the new stage ``C.rf``
    computes one partial result per value of ``iter`` (its axis ``factor_axis``), and
    ``C`` reduces them over its loop ``<iter>.v``.

    ``C(i) += A[i, k.0 * 16 + k.1]`` (``k`` split by 16), rfactor over ``k.1``, becomes
    ``C.rf(k.1, i) += A[i, k.0 * 16 + k.1]`` then ``C(i) += C.rf(k.1.v, i)``."""

    stage: str
    iter: str
    factor_axis: int = 0

    @property
    def new_stage(self) -> str:
        return f"{self.stage}.rf"

    def apply(self, ctx):
        loops = ctx.iters[self.stage]
        by_var = {iv.var.name: name for name, iv in loops.items()}
        factored = loops[self.iter].var.name
        tensor = ctx.tensors[self.stage]
        rf = ctx.sch.rfactor(tensor, loops[self.iter], self.factor_axis)
        ctx.add_stage(self.new_stage, rf, by_var)
        ctx.add_stage(self.stage, tensor, {f"{factored}.v": f"{self.iter}.v"})

    def to_json(self):
        return ["RF", self.stage, self.iter, int(self.factor_axis)]


@dataclass(frozen=True)
class SetScopeStep(Step):
    """``set_scope`` of ``stage``'s buffer: ``shared`` (one copy per block, e.g. the partial
    results of a cross-thread reduction) or ``local`` (registers of each thread)."""

    stage: str
    scope: str

    def apply(self, ctx):
        ctx.stages[self.stage].set_scope(self.scope)

    def to_json(self):
        return ["SS", self.stage, self.scope]


def step_from_json(record: list) -> Step:
    """The step of one JSON record (module docstring)."""
    kind, *f = record
    if kind == "SP":
        return SplitStep(f[0], f[1], int(f[2]), tuple(int(x) for x in f[3]),
                         f[4] if len(f) > 4 else None)
    if kind == "RE":
        return ReorderStep(f[0], tuple(f[1]))
    if kind == "FU":
        return FuseStep(f[0], tuple(f[1]))
    if kind == "AN":
        return AnnotationStep(f[0], f[1], f[2])
    if kind == "PR":
        return PragmaStep(f[0], f[1], int(str(f[2]).rsplit("$", 1)[1]))
    if kind == "CA":
        return ComputeAtStep(f[0], f[1], f[2])
    if kind == "CI":
        return ComputeInlineStep(f[0])
    if kind == "CW":
        return CacheWriteStep(f[0], f[1])
    if kind == "CR":
        return CacheReadStep(f[0], f[1], tuple(f[2]))
    if kind == "RF":
        return RfactorStep(f[0], f[1], int(f[2]))
    if kind == "SS":
        return SetScopeStep(f[0], f[1])
    raise ValueError(f"auto_scheduler: unknown transform step {record!r}")


@dataclass
class State:
    """A schedule of a compute DAG as its transform steps."""

    steps: list = field(default_factory=list)

    def to_json(self) -> list:
        return [s.to_json() for s in self.steps]

    @classmethod
    def from_json(cls, records: list) -> State:
        return cls([step_from_json(r) for r in records])

    def key(self) -> str:
        """A text that two states have in common exactly when their steps are equal."""
        return repr(self.to_json())

    def __str__(self) -> str:
        return "\n".join(" ".join(map(str, s.to_json())) for s in self.steps) or "(no steps)"
