"""TVM's older name, ``tvm.contrib.graph_runtime``: see :mod:`kiln.contrib.graph_executor`."""

from kiln.contrib.graph_executor import GraphModule, create

__all__ = ["GraphModule", "create"]
