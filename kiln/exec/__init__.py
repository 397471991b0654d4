"""Programs run with ``python -m`` (TVM's ``tvm.exec``): ``kiln.exec.rpc_server``,
``kiln.exec.rpc_tracker`` and ``kiln.exec.query_rpc_tracker``."""
