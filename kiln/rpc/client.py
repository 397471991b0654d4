"""The RPC client: a session with a server, and proxies for what lives there.

``remote = rpc.connect(host, port)`` gives an :class:`RPCSession`. Its devices
(``remote.cpu()``) are :class:`RemoteDevice` objects; ``tvm.nd.array(x, ctx=remote.cpu())``
sends ``x``'s bytes to the server and returns a :class:`RemoteNDArray`, whose ``numpy()``
pulls them back. ``remote.load_module(name)`` gives a :class:`RemoteModule` whose calls run
on the server with remote arrays. Every failure is a :class:`kiln.TVMError`:
:class:`RPCError` for the connection, :class:`RemoteError` for an exception the server
raised (its message is the last line of the remote traceback).
"""

from __future__ import annotations

import os
import socket
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import TVMError
from ..runtime.device import CPU, CUDA, EXT_DEV, Device
from ..runtime.device import device as _local_device
from ..runtime.module import BenchmarkResult
from ..runtime.ndarray import NDArray, as_copy_source, check_copy_match, dtype_to_dl
from .auth import AuthenticationError, dial
from .protocol import ProtocolError, recv_message, send_message

__all__ = ["RPCError", "RemoteError", "RPCSession", "LocalSession", "RemoteDevice",
           "RemoteNDArray", "RemoteModule", "RemoteGraphModule", "connect"]


class RPCError(TVMError):
    """The RPC connection failed: refused, dropped, timed out, or not a kiln server."""


class RemoteError(TVMError):
    """The server raised while serving a request; ``remote_traceback`` is its traceback."""

    def __init__(self, message: str, remote_traceback: str = "", remote_type: str = "") -> None:
        super().__init__(message)
        self.remote_traceback = remote_traceback
        self.remote_type = remote_type


# ---- transports: how a request reaches a SessionHandler ---------------------------------
class _SocketTransport:
    def __init__(self, host: str, port: int, timeout: float | None,
                 auth_key: bytes | str | None = None, ssl_context: Any = None) -> None:
        self.addr = f"{host}:{port}"
        try:
            self._sock, role = dial(host, port, timeout=timeout, auth_key=auth_key,
                                    ssl_context=ssl_context)
        except AuthenticationError as e:
            raise RPCError(f"{self.addr}: {e}") from None
        except TimeoutError:
            raise RPCError(f"RPC server {self.addr} did not answer the greeting in time "
                           "(is it a kiln RPC server?)") from None
        except (OSError, ProtocolError) as e:
            raise RPCError(f"cannot connect to the RPC server at {self.addr}: "
                           f"{getattr(e, 'strerror', None) or e} (is `python -m "
                           f"kiln.exec.rpc_server --host {host} --port {port}` running "
                           "there?)") from None
        if role != "server":
            self.close()
            raise RPCError(f"{self.addr} is an RPC {role}, not a server: ask it for a "
                           f"server with rpc.connect_tracker({host!r}, {port})"
                           ".request(key)")

    def request(self, header: dict[str, Any], blobs: list[Any]):
        send_message(self._sock, header, blobs)
        return recv_message(self._sock)

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


class _LocalTransport:
    """Hands requests to an in-process SessionHandler (blobs are copied, as on a wire)."""

    addr = "local"

    def __init__(self) -> None:
        from .server import SessionHandler

        self._handler = SessionHandler("local")

    def request(self, header: dict[str, Any], blobs: list[Any]):
        reply, out = self._handler.handle(header, [bytearray(memoryview(b).cast("B"))
                                                   for b in blobs])
        return reply, [bytearray(memoryview(b).cast("B")) for b in out]

    def close(self) -> None:
        self._handler.close()


# ---- the session -------------------------------------------------------------------------
class RPCSession:
    """A session with an RPC server (made by :func:`connect` or :class:`LocalSession`).

    Requests are serialised by a lock, so one session may be shared by threads. Remote
    objects dropped by the client are freed on the server with the next request.
    """

    def __init__(self, transport: Any, session_timeout: float = 0, key: str = "") -> None:
        self._transport = transport
        self.addr: str = transport.addr
        self._lock = threading.Lock()
        self._closed = False
        self._pending_free: deque[int] = deque()
        try:
            try:
                info = self._request({"op": "hello", "session_timeout": session_timeout,
                                      "key": key})
            except RemoteError as e:
                raise RPCError(f"RPC server {self.addr} refused the session: "
                               f"{e.remote_traceback or e}") from None
            if info.get("server") != "kiln":
                raise RPCError(f"{self.addr} is not a kiln RPC server")
        except BaseException:
            self.close()
            raise
        self.host_triple: str = info.get("host_triple", "")

    # ---- requests ------------------------------------------------------------------------
    def _request(self, header: dict[str, Any], blobs: list[Any] | None = None,
                 ) -> dict[str, Any]:
        return self._request_blobs(header, blobs)[0]

    def _request_blobs(self, header: dict[str, Any], blobs: list[Any] | None = None):
        op = header["op"]
        with self._lock:
            if self._closed:
                raise RPCError(f"the RPC session with {self.addr} is closed")
            if self._pending_free:
                free = []
                while self._pending_free:  # finalizers may append meanwhile: that is fine
                    free.append(self._pending_free.popleft())
                header = dict(header, free=free)
            try:
                reply, out = self._transport.request(header, blobs or [])
            except TimeoutError:
                self._close_locked()
                raise RPCError(f"RPC server {self.addr} did not answer '{op}' in time "
                               "(the session is closed)") from None
            except OSError as e:
                self._close_locked()
                raise RPCError(f"connection to the RPC server {self.addr} was lost during "
                               f"'{op}': {e}") from None
        if reply.get("status") != "ok":
            tb = reply.get("traceback", "")
            lines = [ln for ln in tb.strip().splitlines() if ln.strip()]
            last = lines[-1] if lines else f"{reply.get('etype')}: {reply.get('message')}"
            raise RemoteError(f"RPC server {self.addr} raised during '{op}': {last}", tb,
                              reply.get("etype", ""))
        return reply, out

    def _free(self, handle: int) -> None:
        """Finalizer hook: never touches the socket (it may run inside another request)."""
        if not self._closed:
            self._pending_free.append(handle)

    def _close_locked(self) -> None:
        if not self._closed:
            self._closed = True
            self._transport.close()

    def close(self) -> None:
        """End the session; the server deletes its workspace and objects."""
        with self._lock:
            self._close_locked()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> RPCSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<RPCSession {self.addr}{' closed' if self._closed else ''}>"

    # ---- devices -------------------------------------------------------------------------
    def device(self, dev_type: str | int, dev_id: int = 0) -> RemoteDevice:
        """A device of the remote machine (``"cpu"``, ``"cuda"`` or a numeric type)."""
        local = _local_device(dev_type, dev_id)
        return RemoteDevice(self, local.device_type, local.device_id)

    context = device

    def cpu(self, dev_id: int = 0) -> RemoteDevice:
        return RemoteDevice(self, CPU, dev_id)

    def cuda(self, dev_id: int = 0) -> RemoteDevice:
        return RemoteDevice(self, CUDA, dev_id)

    gpu = cuda

    def ext_dev(self, dev_id: int = 0) -> RemoteDevice:
        """The server's accelerator (VTA's simulator on a kiln server)."""
        return RemoteDevice(self, EXT_DEV, dev_id)

    # ---- files ---------------------------------------------------------------------------
    def upload(self, data: str | os.PathLike[str] | bytes | bytearray,
               target: str | None = None) -> None:
        """Send a local file (or bytes, then ``target`` is required) to the session's
        workspace on the server, under ``target`` (default: the file's base name)."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            if target is None:
                raise TVMError("upload(bytes) needs target=, the remote file name")
            blob = bytes(data)
        else:
            path = os.fspath(data)
            if not os.path.isfile(path):
                raise TVMError(f"upload: local file {path!r} does not exist")
            with open(path, "rb") as f:
                blob = f.read()
            target = target if target is not None else os.path.basename(path)
        self._request({"op": "upload", "name": target}, [blob])

    def download(self, name: str) -> bytearray:
        """The bytes of a file in the session's workspace."""
        _, out = self._request_blobs({"op": "download", "name": name})
        return out[0]

    def remove(self, name: str) -> None:
        self._request({"op": "remove", "name": name})

    def listdir(self) -> list[str]:
        """Files in the session's workspace (relative names)."""
        return list(self._request({"op": "listdir"})["files"])

    # ---- modules -------------------------------------------------------------------------
    def load_module(self, name: str) -> RemoteModule:
        """Load an uploaded ``export_library`` file (``.so`` or ``.tar``; a relay graph
        archive too) into the server's memory."""
        info = self._request({"op": "load_module", "name": name})
        return RemoteModule(self, info)

    # ---- arrays --------------------------------------------------------------------------
    def _check_device(self, dev: RemoteDevice) -> None:
        if dev._rpc_session is not self:
            raise TVMError(f"{dev!r} belongs to another RPC session than {self!r}")

    def array(self, src: np.ndarray, dev: RemoteDevice) -> RemoteNDArray:
        """A new remote array holding ``src``'s contents (what ``tvm.nd.array`` calls)."""
        self._check_device(dev)
        src = np.ascontiguousarray(src)
        dtype_to_dl(src.dtype)
        info = self._request({"op": "nd_empty", "shape": list(src.shape),
                              "dtype": src.dtype.name, "dev": _spec(dev)}, [src])
        return RemoteNDArray(self, info, dev)

    def empty(self, shape: Any, dtype: Any, dev: RemoteDevice) -> RemoteNDArray:
        """A new uninitialised remote array (what ``tvm.nd.empty`` calls)."""
        self._check_device(dev)
        shape = [int(shape)] if isinstance(shape, (int, np.integer)) else [int(s) for s in shape]
        dt = np.dtype(dtype)
        dtype_to_dl(dt)
        info = self._request({"op": "nd_empty", "shape": shape, "dtype": dt.name,
                              "dev": _spec(dev)})
        return RemoteNDArray(self, info, dev)

    def _arg(self, a: Any) -> dict[str, Any]:
        if isinstance(a, RemoteNDArray):
            if a._sess is not self:
                raise TVMError(f"argument {a!r} lives in another RPC session")
            return {"nd": a._handle}
        if isinstance(a, NDArray):
            raise TypeError(f"a local NDArray on {a.device} cannot be passed to a remote "
                            "function; create it with tvm.nd.array(x, ctx=remote.cpu())")
        if isinstance(a, (bool, np.bool_, int, np.integer)):
            return {"i": int(a)}
        if isinstance(a, (float, np.floating)):
            return {"f": float(a)}
        raise TypeError(f"cannot pass {type(a).__name__} to a remote function; expected a "
                        "remote NDArray, int or float")


def _spec(dev: Device) -> list[int]:
    return [dev.device_type, dev.device_id]


class LocalSession(RPCSession):
    """An RPC session served in this process (TVM's ``rpc.LocalSession``): the same API
    and the same server code as :func:`connect`, with no socket."""

    def __init__(self) -> None:
        super().__init__(_LocalTransport())


def connect(url: str, port: int, key: str = "", session_timeout: float = 0,
            timeout: float | None = None, *, auth_key: bytes | str | None = None,
            ssl_context: Any = None) -> RPCSession:
    """Open a session with the RPC server at ``url:port``.

    ``session_timeout`` (seconds, 0 = none) makes the server end the session (and kill
    what it runs) after that long; ``timeout`` bounds the connection attempt and every wait
    for a reply (None: 10 s to connect, no limit on replies). ``key`` is the match key a
    tracker gave for a server registered with it (see :func:`kiln.rpc.connect_tracker`);
    ``auth_key`` the shared key of a server that wants one (default: the
    ``KILN_RPC_KEY`` environment variable); ``ssl_context`` a client TLS context for a
    server started with a certificate.
    """
    return RPCSession(_SocketTransport(url, int(port), timeout, auth_key, ssl_context),
                      session_timeout, key)


# ---- remote objects ----------------------------------------------------------------------
class RemoteDevice(Device):
    """A device of an RPC server: ``remote.cpu(0)``. Arrays made on it live there."""

    __slots__ = ("_rpc_session",)

    def __init__(self, session: RPCSession, device_type: int, device_id: int = 0) -> None:
        super().__init__(device_type, device_id)
        object.__setattr__(self, "_rpc_session", session)

    @property
    def exist(self) -> bool:
        return bool(self._rpc_session._request({"op": "dev_exist", "dev": _spec(self)})["exist"])

    def sync(self) -> None:
        self._rpc_session._request({"op": "dev_sync", "dev": _spec(self)})

    def _cuda_attr(self, name: str):
        if self.device_type == CPU:
            return None
        return self._rpc_session._request({"op": "dev_attr", "dev": _spec(self),
                                           "name": name})["value"]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RemoteDevice) and other._rpc_session is self._rpc_session
                and Device.__eq__(self, other))

    def __hash__(self) -> int:
        return hash((id(self._rpc_session), self.device_type, self.device_id))

    def __repr__(self) -> str:
        return f"remote[{self._rpc_session.addr}].{Device.__repr__(self)}"

    def __reduce__(self):
        raise TypeError("a remote device cannot be pickled")


class RemoteNDArray:
    """An array in an RPC server's memory, with NDArray's API: ``numpy()``/``asnumpy()``
    fetch the data, ``copyfrom`` sends it."""

    __slots__ = ("_sess", "_handle", "_shape", "_dtype", "_device", "__weakref__")

    def __init__(self, session: RPCSession, info: dict[str, Any], dev: RemoteDevice) -> None:
        self._sess = session
        self._handle = int(info["handle"])
        self._shape = tuple(int(s) for s in info["shape"])
        self._dtype = np.dtype(info["dtype"])
        self._device = dev
        weakref.finalize(self, session._free, self._handle)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> str:
        return self._dtype.name

    @property
    def device(self) -> RemoteDevice:
        return self._device

    ctx = device

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def numpy(self) -> np.ndarray:
        """The contents, copied from the server."""
        _, out = self._sess._request_blobs({"op": "nd_read", "nd": self._handle})
        return np.frombuffer(out[0], dtype=self._dtype).reshape(self._shape)

    asnumpy = numpy

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def copyfrom(self, source: Any) -> RemoteNDArray:
        """Fill from a numpy array, a local NDArray or a remote array of the same session."""
        if isinstance(source, RemoteNDArray) and source._sess is self._sess:
            check_copy_match(source, self)
            self._sess._request({"op": "nd_copy", "src": source._handle, "dst": self._handle})
            return self
        src = np.ascontiguousarray(as_copy_source(source, self._shape, self._dtype))
        self._sess._request({"op": "nd_write", "nd": self._handle}, [src])
        return self

    def copyto(self, target: Any) -> Any:
        """Copy into ``target`` (an array, returned) or a new array on a device (local or
        remote)."""
        if isinstance(target, RemoteDevice):
            out = target._rpc_session.empty(self._shape, self._dtype, target)
            return out.copyfrom(self)
        if isinstance(target, Device):
            from ..runtime.ndarray import array

            return array(self.numpy(), target)
        return target.copyfrom(self if isinstance(target, RemoteNDArray) else self.numpy())

    def __setitem__(self, key: Any, value: Any) -> None:
        if not (isinstance(key, slice) and key == slice(None)):
            raise ValueError("NDArray only supports assignment to the whole array: a[:] = value")
        if isinstance(value, RemoteNDArray):
            self.copyfrom(value)
        else:
            self.copyfrom(np.broadcast_to(np.asarray(value, dtype=self._dtype), self._shape))

    def __repr__(self) -> str:
        return f"<tvm.nd.NDArray shape={self._shape}, {self._device}>"


class RemoteFunction:
    """A function of a remote module: ``remote_mod["name"](a, b, c)``."""

    def __init__(self, module: RemoteModule, name: str | None) -> None:
        self._module = module
        self.name = name if name is not None else module.entry_name

    def __call__(self, *args: Any) -> None:
        sess = self._module._sess
        sess._request({"op": "call", "mod": self._module._handle,
                       "func": self.name, "args": [sess._arg(a) for a in args]})

    def __repr__(self) -> str:
        return f"<RemoteFunction {self.name}>"


class RemoteModule:
    """A module loaded on an RPC server: call it (its entry function), index it by
    function name, or time a function there with :meth:`time_evaluator`. A relay graph
    archive loads as a factory: ``remote_mod["default"](remote.cpu())`` gives a
    :class:`RemoteGraphModule`."""

    def __init__(self, session: RPCSession, info: dict[str, Any]) -> None:
        self._sess = session
        self._handle = int(info["handle"])
        self.kind: str = info["kind"]
        self.entry_name: str | None = info.get("entry")
        self.functions: list[str] = list(info.get("functions", []))
        self.type_key: str = info.get("type_key", "")
        weakref.finalize(self, session._free, self._handle)

    def __call__(self, *args: Any) -> None:
        if self.kind != "module":
            raise TVMError("a graph factory module is not callable; use "
                           "remote_mod['default'](remote.cpu())")
        if self.entry_name is None:
            raise TVMError("this module has no entry function; use mod['name'](...)")
        RemoteFunction(self, None)(*args)

    def get_function(self, name: str, query_imports: bool = False) -> Any:
        if self.kind == "graph_factory":
            if name not in self.functions:
                raise AttributeError(f"graph factory module has no function {name!r} "
                                     f"(functions: {', '.join(self.functions)})")
            return lambda dev=None: RemoteGraphModule(self, name, dev)
        try:
            self._sess._request({"op": "has_function", "mod": self._handle, "func": name})
        except RemoteError as e:
            if e.remote_type == "AttributeError":
                raise AttributeError(str(e)) from None
            raise
        return RemoteFunction(self, name)

    def __getitem__(self, name: str) -> Any:
        if not isinstance(name, str):
            raise TypeError("module function names are strings")
        return self.get_function(name)

    def _rpc_graph_create(self, graph: Any, dev: Device | None) -> RemoteGraphModule:
        """``graph_runtime.create(graph, remote_mod, ctx)`` (book §1.4.4): the graph executor
        of an uploaded relay archive; ``graph`` is that archive's graph JSON, or the
        module itself."""
        if self.kind != "graph_factory":
            raise NotImplementedError(
                "graph_runtime.create over RPC needs the whole relay.build result on the "
                "server: export it with factory.export_library('model.tar'), upload that and "
                f"pass remote.load_module('model.tar'); {self!r} holds only kernels")
        if graph is not self and not isinstance(graph, (str, bytes)) \
                and not hasattr(graph, "get_graph_json"):
            raise TypeError(f"graph_runtime.create: expected the graph JSON or a graph "
                            f"module, got {type(graph).__name__}")
        if hasattr(graph, "get_graph_json"):
            graph = graph.get_graph_json()
        plan = graph.decode() if isinstance(graph, bytes) else graph
        return RemoteGraphModule(self, self.functions[0], dev,
                                 plan if isinstance(plan, str) else None)

    def get_source(self, fmt: str = "") -> str:
        return self._sess._request({"op": "get_source", "mod": self._handle, "fmt": fmt})[
            "source"]

    def time_evaluator(self, func_name: str, dev: Device | None = None, number: int = 10,
                       repeat: int = 1, min_repeat_ms: float = 0, f_preproc: str = "",
                       ctx: Device | None = None) -> Callable[..., BenchmarkResult]:
        """Like :meth:`kiln.runtime.Module.time_evaluator`, measured on the server (the
        timing excludes the network): returns a function of remote arrays giving a
        BenchmarkResult."""
        dev = dev if dev is not None else ctx
        if dev is None:
            dev = self._sess.cpu(0)
        if not isinstance(dev, RemoteDevice) or dev._rpc_session is not self._sess:
            raise TVMError(f"time_evaluator of a remote module needs a device of its session "
                           f"(remote.cpu()), not {dev!r}")
        if int(repeat) < 1 or int(number) < 1:
            raise ValueError("time_evaluator: number and repeat must be >= 1")
        self.get_function(func_name)  # fails early when the function is not there

        def evaluator(*args: Any) -> BenchmarkResult:
            reply = self._sess._request({
                "op": "time_evaluator", "mod": self._handle, "func": func_name,
                "dev": _spec(dev), "number": int(number), "repeat": int(repeat),
                "min_repeat_ms": float(min_repeat_ms),
                "args": [self._sess._arg(a) for a in args]})
            return BenchmarkResult(reply["results"])

        return evaluator

    def __repr__(self) -> str:
        return f"<RemoteModule {self.type_key} on {self._sess.addr}>"


class RemoteGraphModule:
    """A graph executor running on an RPC server (``remote_mod["default"](remote.cpu())``):
    ``set_input`` / ``run`` / ``get_output`` as :class:`kiln.runtime.graph_executor.GraphModule`.
    Inputs and parameters may be local (numpy, NDArray: they are uploaded) or remote."""

    def __init__(self, factory: RemoteModule, name: str, dev: Device | None,
                 graph_json: str | None = None) -> None:
        sess = factory._sess
        dev = dev if dev is not None else sess.cpu(0)
        if not isinstance(dev, RemoteDevice) or dev._rpc_session is not sess:
            raise TVMError(f"a remote graph module needs a device of its session "
                           f"(remote.cpu()), not {dev!r}")
        req = {"op": "graph_create", "mod": factory._handle, "func": name, "dev": _spec(dev)}
        if graph_json is not None:
            req["graph_json"] = graph_json  # checked against the archive's plan
        info = sess._request(req)
        self._sess, self._handle, self.dev = sess, int(info["handle"]), dev
        self._inputs: list[str] = list(info["inputs"])
        self._num_outputs = int(info["num_outputs"])
        self._factory = factory  # keeps the remote library alive
        weakref.finalize(self, sess._free, self._handle)

    def set_input(self, key: str | int | None = None, value: Any = None, **params: Any) -> None:
        if key is not None:
            if isinstance(key, int):
                key = self._inputs[key]
            if key not in self._inputs:
                raise KeyError(f"graph has no input {key!r} (inputs: {', '.join(self._inputs)})")
            head = {"op": "graph_set_input", "g": self._handle, "key": key}
            if isinstance(value, RemoteNDArray) and value._sess is self._sess:
                self._sess._request(dict(head, nd=value._handle))
            else:
                arr = np.ascontiguousarray(np.asarray(value))
                self._sess._request(dict(head, shape=list(arr.shape), dtype=arr.dtype.name),
                                    [arr])
        for k, v in params.items():
            if k in self._inputs:  # parameters that are not graph inputs are baked in
                self.set_input(k, v)

    def run(self, **inputs: Any) -> None:
        if inputs:
            self.set_input(**inputs)
        self._sess._request({"op": "graph_run", "g": self._handle})

    def _array(self, info: dict[str, Any]) -> RemoteNDArray:
        return RemoteNDArray(self._sess, info, self.dev)

    def get_output(self, index: int, out: Any = None) -> Any:
        a = self._array(self._sess._request({"op": "graph_get_output", "g": self._handle,
                                             "index": int(index)}))
        if out is not None:
            out.copyfrom(a if isinstance(out, RemoteNDArray) else a.numpy())
            return out
        return a

    def get_input(self, key: str | int) -> RemoteNDArray:
        if isinstance(key, int):
            key = self._inputs[key]
        return self._array(self._sess._request({"op": "graph_get_input", "g": self._handle,
                                                "key": key}))

    def get_num_outputs(self) -> int:
        return self._num_outputs

    def get_num_inputs(self) -> int:
        return len(self._inputs)

    def benchmark(self, number: int = 10, repeat: int = 3) -> float:
        """Median seconds per run, measured on the server."""
        return float(self._sess._request({"op": "graph_benchmark", "g": self._handle,
                                          "number": int(number), "repeat": int(repeat)})[
            "seconds"])
