"""The loop IR (``tvm.tir``): expression/statement nodes, intrinsics and passes."""

from kiln.ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Broadcast,
    Call,
    Cast,
    CommReducer,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    IterVar,
    Load,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    PrimExpr,
    ProducerLoad,
    Ramp,
    Reduce,
    Select,
    SizeVar,
    StringImm,
    Sub,
    Var,
)
from kiln.ir.stmt import (
    Allocate,
    AssertStmt,
    AttrStmt,
    Buffer,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    PrimFunc,
    ProducerRealize,
    ProducerStore,
    SeqStmt,
    Stmt,
    Store,
    decl_buffer,
)

from . import transform
from .op import *  # noqa: F403
from .op import __all__ as _op_all

__all__ = list(_op_all) + [
    "EQ", "GE", "GT", "LE", "LT", "NE", "Add", "And", "Broadcast", "Call", "Cast",
    "CommReducer", "Div", "FloatImm", "FloorDiv", "FloorMod", "IntImm", "IterVar", "Load",
    "Max", "Min", "Mod", "Mul", "Not", "Or", "PrimExpr", "ProducerLoad", "Ramp", "Reduce",
    "Select", "SizeVar", "StringImm", "Sub", "Var", "Allocate", "AssertStmt", "AttrStmt",
    "Buffer", "Evaluate", "For", "ForKind", "IfThenElse", "LetStmt", "PrimFunc",
    "ProducerRealize", "ProducerStore", "SeqStmt", "Stmt", "Store", "decl_buffer", "transform",
]
