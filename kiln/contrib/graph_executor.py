"""TVM's ``tvm.contrib.graph_executor``: see :mod:`kiln.runtime.graph_executor`.

``create(graph, lib, dev)`` with a module loaded over RPC (``remote.load_module``) gives a
graph executor running on that server (:class:`kiln.rpc.RemoteGraphModule`).
"""

from kiln.runtime.graph_executor import GraphModule
from kiln.runtime.graph_executor import create as _create_local

__all__ = ["GraphModule", "create"]


def create(graph_json_or_factory, lib=None, device=None):
    """``graph_executor.create(factory_or_graph_json, lib, dev)``; remote when ``lib`` or
    ``dev`` belongs to an RPC session."""
    remote_create = getattr(lib, "_rpc_graph_create", None)
    if remote_create is None:
        remote_create = getattr(graph_json_or_factory, "_rpc_graph_create", None)
    if remote_create is not None:
        return remote_create(graph_json_or_factory, device)
    if getattr(device, "_rpc_session", None) is not None:
        raise NotImplementedError(
            "graph_executor.create on a remote device needs the module loaded on that server: "
            "export the relay.build result (factory.export_library('model.tar')), "
            "remote.upload it and pass remote.load_module('model.tar') as lib")
    return _create_local(graph_json_or_factory, lib, device)
