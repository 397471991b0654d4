"""kiln: an end-to-end optimizing tensor compiler for deep learning, in the design of TVM.

``import kiln as tvm`` gives the classic TVM API: ``te`` to describe computations and
schedules, ``lower`` to see the loop program, ``build`` to compile it, ``nd`` and ``runtime``
to run it.
"""

from . import ir, nd, runtime, target, te, tir, transform
from .alias import install_as_tvm
from .driver import build, lower
from .errors import CompileError, ScheduleError, TVMError
from .ir.expr import IterVar, PrimExpr, Range, Var
from .ir.stmt import IRModule
from .runtime import Device, context, cpu, cuda, device, ext_dev, gpu
from .runtime.module import load_module
from .runtime.registry import get_global_func, register_func

__version__ = "0.1.0"

#: sub-packages imported on first attribute access (``tvm.relay``, ``tvm.topi`` ...), as
#: ``import tvm`` makes them available in TVM, without paying for them at import time
_LAZY = {"arith", "auto_scheduler", "autotvm", "contrib", "relay", "rpc", "testing", "topi"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "te", "tir", "ir", "autotvm", "auto_scheduler", "nd", "runtime", "target", "transform",
    "build", "lower", "TVMError", "ScheduleError",
    "CompileError", "IterVar", "PrimExpr", "Range", "Var", "IRModule", "Device", "context",
    "cpu", "cuda", "device", "ext_dev", "gpu", "load_module", "register_func", "get_global_func",
    "install_as_tvm", "__version__",
]
