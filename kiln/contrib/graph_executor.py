"""TVM's ``tvm.contrib.graph_executor``: see :mod:`kiln.relay.executor`."""

from kiln.relay.executor import GraphModule, create

__all__ = ["GraphModule", "create"]
