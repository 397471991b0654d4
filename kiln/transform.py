"""TVM's ``tvm.transform``: the pass context ``relay.build`` reads (see :mod:`kiln.relay`)."""

from kiln.relay.build_module import PassContext

__all__ = ["PassContext"]
