"""Programs run with ``python -m`` (TVM's ``tvm.exec``): ``kiln.exec.rpc_server``."""
