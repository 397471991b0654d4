"""Tensor expressions: the language for *what* to compute, and schedules for *how*."""

from kiln.ir.expr import IterVar, PrimExpr, Range, Reduce, Var
from kiln.tir.op import (
    abs,
    all,
    any,
    ceil,
    cos,
    erf,
    exp,
    exp2,
    floor,
    floordiv,
    floormod,
    if_then_else,
    indexdiv,
    indexmod,
    isnan,
    log,
    log2,
    log10,
    max_value,
    min_value,
    power,
    round,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    tanh,
    trunc,
    truncdiv,
    truncmod,
)
from kiln.tir.op import const as const

from . import hybrid, schedule
from .autodiff import gradient
from .extern import ExternOp, extern
from .fused_loop import FusedLoopOp
from .hybrid import HybridOp
from .operation import (
    comm_reducer,
    compute,
    max,
    min,
    placeholder,
    reduce_axis,
    size_var,
    sum,
    thread_axis,
    var,
)
from .scan import ScanOp, scan
from .schedule import Schedule, Stage, create_schedule
from .tag import TagScope, tag_scope
from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from .tensor_intrin import TensorIntrin, decl_tensor_intrin

__all__ = [
    "min_value", "max_value",
    "placeholder", "compute", "var", "size_var", "reduce_axis", "thread_axis", "comm_reducer",
    "sum", "min", "max", "create_schedule", "Schedule", "Stage", "Tensor", "Operation",
    "ComputeOp", "PlaceholderOp", "IterVar", "PrimExpr", "Range", "Reduce", "Var",
    "if_then_else", "all", "any", "exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt",
    "sigmoid", "tanh", "abs", "floor", "ceil", "round", "trunc", "power", "erf", "sin", "cos",
    "isnan", "floordiv", "floormod", "truncdiv", "truncmod", "indexdiv", "indexmod", "const",
    "schedule", "gradient", "extern", "ExternOp", "hybrid", "HybridOp", "scan", "ScanOp",
    "FusedLoopOp",
    "decl_tensor_intrin", "TensorIntrin", "tag_scope", "TagScope",
]
