"""TVM's ``tvm.transform``: passes, ``Sequential`` and the ``PassContext`` that configures
``kiln.lower`` and ``relay.build`` (the classes live in :mod:`kiln.ir.transform`)."""

from kiln.ir.transform import (
    ModulePass,
    Pass,
    PassContext,
    PassInfo,
    Sequential,
    module_pass,
)

__all__ = ["PassContext", "PassInfo", "Pass", "ModulePass", "Sequential", "module_pass"]
