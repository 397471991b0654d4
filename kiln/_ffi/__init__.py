"""TVM's ``tvm._ffi``: the names classic code imports from it (the global function registry,
:mod:`kiln.runtime.registry`); kiln has no C++ core, so there is no foreign-function layer."""

from kiln.runtime.registry import get_global_func, list_global_func_names, register_func

__all__ = ["register_func", "get_global_func", "list_global_func_names"]
