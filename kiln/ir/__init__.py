"""kiln's IR: typed expression and statement nodes, visitors, structural equality, printer.

Importing it imports :mod:`kiln.ir.op`, the expression builders that Python operators on
expressions (``a + b``) call.
"""

from . import dtype, op, transform
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
)
from .functor import Mutator, Visitor, post_order_visit, substitute
from .op import const, convert
from .printer import to_text
from .serialize import load_json, save_json
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
from .structural import assert_structural_equal, structural_equal, structural_hash

__all__ = [
    "dtype", "op", "Broadcast", "Call", "Cast", "CommReducer", "FloatImm", "IntImm", "IterVar",
    "Load", "Node", "PrimExpr", "ProducerLoad", "Ramp", "Range", "Reduce", "Select", "SizeVar",
    "StringImm", "Var", "const", "convert", "Mutator", "Visitor", "post_order_visit",
    "substitute", "to_text", "Allocate", "AssertStmt", "AttrStmt", "Buffer", "Evaluate", "For",
    "ForKind", "IfThenElse", "IRModule", "LetStmt", "PrimFunc", "ProducerRealize",
    "ProducerStore", "SeqStmt", "Stmt", "Store", "decl_buffer", "seq", "structural_equal",
    "structural_hash", "assert_structural_equal", "transform", "save_json", "load_json",
]
