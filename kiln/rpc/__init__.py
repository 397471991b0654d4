"""``tvm.rpc``: run compiled modules on another machine (book §1.4).

On the remote machine::

    python -m kiln.exec.rpc_server --host 0.0.0.0 --port 9090 --auth-key-file key.txt
    # (or, with the tvm alias: python -m kiln.as_tvm -m tvm.exec.rpc_server ...)

On the local one::

    remote = rpc.connect("192.168.0.7", 9090)   # the key from KILN_RPC_KEY or auth_key=
    remote.upload("vector-add.tar")
    f = remote.load_module("vector-add.tar")
    dev = remote.cpu()
    a = tvm.nd.array(x, ctx=dev)          # x's bytes go to the server
    f(a, b, c); c.asnumpy()               # runs there, the result comes back

:class:`DevicePool` spreads independent jobs (e.g. measurements for tuning) over several
servers. A :class:`~kiln.rpc.tracker.Tracker` (``python -m kiln.exec.rpc_tracker``) hands
the servers registered under a device key to clients:
``rpc.connect_tracker(host, port).request(key)``. See docs/rpc.md.
"""

from .client import (
    LocalSession,
    RemoteDevice,
    RemoteError,
    RemoteGraphModule,
    RemoteModule,
    RemoteNDArray,
    RPCError,
    RPCSession,
    connect,
)
from .pool import DevicePool, JobResult, MeasureJob, MeasureResult
from .server import Server
from .tracker import Tracker
from .tracker_client import TrackerSession, connect_tracker

__all__ = [
    "connect", "Server", "LocalSession", "RPCSession", "RemoteDevice", "RemoteNDArray",
    "RemoteModule", "RemoteGraphModule", "RPCError", "RemoteError", "DevicePool",
    "JobResult", "MeasureJob", "MeasureResult", "Tracker", "TrackerSession", "connect_tracker",
]
