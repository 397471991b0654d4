"""kiln's IR: typed expression and statement nodes, visitors, structural equality, printer."""

from . import dtype
from .expr import (
    Broadcast,
    Call,
    Cast,
    CommReducer,
    FloatImm,
    IntImm,
    IterVar,
    Load,
    Node,
    PrimExpr,
    ProducerLoad,
    Ramp,
    Range,
    Reduce,
    Select,
    SizeVar,
    StringImm,
    Var,
    const,
    convert,
)
from .functor import Mutator, Visitor, post_order_visit, substitute
from .printer import to_text
from .stmt import (
    Allocate,
    AssertStmt,
    AttrStmt,
    Buffer,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    IRModule,
    LetStmt,
    PrimFunc,
    ProducerRealize,
    ProducerStore,
    SeqStmt,
    Stmt,
    Store,
    decl_buffer,
    seq,
)
from .structural import structural_equal, structural_hash

__all__ = [
    "dtype", "Broadcast", "Call", "Cast", "CommReducer", "FloatImm", "IntImm", "IterVar", "Load",
    "Node", "PrimExpr", "ProducerLoad", "Ramp", "Range", "Reduce", "Select", "SizeVar",
    "StringImm", "Var", "const", "convert", "Mutator", "Visitor", "post_order_visit",
    "substitute", "to_text", "Allocate", "AssertStmt", "AttrStmt", "Buffer", "Evaluate", "For",
    "ForKind", "IfThenElse", "IRModule", "LetStmt", "PrimFunc", "ProducerRealize",
    "ProducerStore", "SeqStmt", "Stmt", "Store", "decl_buffer", "seq", "structural_equal",
    "structural_hash",
]
