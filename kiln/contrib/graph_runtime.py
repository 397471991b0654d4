"""TVM's older name, ``tvm.contrib.graph_runtime``: see :mod:`kiln.relay.executor`."""

from kiln.relay.executor import GraphModule, create

__all__ = ["GraphModule", "create"]
