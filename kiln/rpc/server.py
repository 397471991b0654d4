"""The RPC server: runs uploaded modules on this machine for remote clients.

``Server(host, port)`` listens in a background thread and serves each connection in its own
thread. Every connection is a *session* with its own temporary workspace directory (where
uploads go) and its own table of objects (loaded modules, arrays, graph executors) that the
client refers to by integer handles. When the session ends, normally or because the client
died, its objects are dropped and its workspace is deleted; the server keeps serving.

The operations a client may ask for are exactly the ``_op_*`` methods of
:class:`SessionHandler`; arguments are JSON values and raw array bytes (see protocol.py).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import platform
import shutil
import socket
import tarfile
import tempfile
import threading
import time
import traceback
from typing import Any

import numpy as np

from ..errors import TVMError
from ..runtime import graph_executor
from ..runtime import ndarray as _nd
from ..runtime.device import Device
from ..runtime.module import Module, load_module
from .protocol import ProtocolError, recv_message, send_message

__all__ = ["Server", "SessionHandler"]

logger = logging.getLogger("RPCServer")

Reply = tuple[dict[str, Any], list[Any]]


def _is_graph_archive(path: str) -> bool:
    """True for a relay ``export_library`` tar (graph.json + params + lib)."""
    if not tarfile.is_tarfile(path):
        return False
    with tarfile.open(path) as tf:
        return "graph.json" in tf.getnames()


class SessionHandler:
    """The server side of one session: a workspace directory and a table of handles.

    :meth:`handle` takes a request (header, blobs) and returns the reply; an exception in an
    operation becomes an error reply carrying the remote traceback, never a dead session.
    """

    def __init__(self, peer: str = "local") -> None:
        self.peer = peer
        self.workspace = tempfile.mkdtemp(prefix="kiln-rpc-")
        self._objects: dict[int, Any] = {}
        self._ids = itertools.count(1)
        self._loaded = itertools.count()
        self._extra_dirs: list[str] = []  # deleted with the workspace

    # ---- plumbing ---------------------------------------------------------------------
    def handle(self, header: dict[str, Any], blobs: list[Any]) -> Reply:
        for h in header.get("free", ()):
            self._objects.pop(h, None)
        op = header.get("op")
        fn = getattr(self, f"_op_{op}", None) if isinstance(op, str) else None
        try:
            if fn is None:
                raise TVMError(f"unknown RPC operation {op!r}")
            reply, out = fn(header, blobs)
        except Exception as e:  # reported to the client; the session goes on
            tb = traceback.format_exc()
            logger.debug("session %s: %s failed:\n%s", self.peer, op, tb)
            return {"status": "error", "etype": type(e).__name__, "message": str(e),
                    "traceback": tb}, []
        return dict(reply, status="ok"), out

    def close(self) -> None:
        self._objects.clear()
        for d in [self.workspace, *self._extra_dirs]:
            shutil.rmtree(d, ignore_errors=True)

    def _put(self, obj: Any) -> int:
        h = next(self._ids)
        self._objects[h] = obj
        return h

    def _get(self, h: Any, kind: type | tuple[type, ...]) -> Any:
        obj = self._objects.get(h)
        if obj is None or not isinstance(obj, kind):
            raise TVMError(f"invalid remote handle {h!r} (freed, or from another session)")
        return obj

    def _path(self, name: Any) -> str:
        """The workspace path of an uploaded file's ``name``; never outside the workspace."""
        if not isinstance(name, str) or not name or os.path.isabs(name) \
                or ".." in name.replace("\\", "/").split("/"):
            raise TVMError(f"bad remote file name {name!r}: use a relative name inside the "
                           "session workspace, without '..'")
        return os.path.join(self.workspace, name)

    def _files(self) -> list[str]:
        out = []
        for root, _, files in os.walk(self.workspace):
            rel = os.path.relpath(root, self.workspace)
            out += [f if rel == "." else os.path.join(rel, f) for f in files
                    if not f.startswith(".kiln-loaded-")]
        return sorted(out)

    @staticmethod
    def _device(spec: Any) -> Device:
        dev_type, dev_id = spec
        return Device(int(dev_type), int(dev_id))

    def _args(self, specs: list[dict[str, Any]]) -> list[Any]:
        out = []
        for s in specs:
            if "nd" in s:
                out.append(self._get(s["nd"], _nd.NDArray))
            elif "i" in s:
                out.append(int(s["i"]))
            else:
                out.append(float(s["f"]))
        return out

    def _array_info(self, a: _nd.NDArray) -> dict[str, Any]:
        return {"handle": self._put(a), "shape": list(a.shape), "dtype": a.dtype,
                "dev": [a.device.device_type, a.device.device_id]}

    @staticmethod
    def _from_blob(blob: Any, shape: list[int], dtype: str) -> np.ndarray:
        dt = np.dtype(dtype)
        want = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if len(blob) != want:
            raise TVMError(f"array data of {len(blob)} bytes does not fill {dtype}{shape} "
                           f"({want} bytes)")
        return np.frombuffer(blob, dtype=dt).reshape(shape)

    # ---- session -----------------------------------------------------------------------
    def _op_hello(self, h, blobs) -> Reply:
        from ..target import host_triple

        return {"server": "kiln", "host_triple": host_triple(),
                "machine": platform.node()}, []

    # ---- files -------------------------------------------------------------------------
    def _op_upload(self, h, blobs) -> Reply:
        path = self._path(h["name"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(blobs[0])
        return {"size": len(blobs[0])}, []

    def _existing(self, name: Any) -> str:
        path = self._path(name)
        if not os.path.isfile(path):
            raise TVMError(f"file {name!r} was not uploaded to this session "
                           f"(workspace files: {self._files() or 'none'})")
        return path

    def _op_download(self, h, blobs) -> Reply:
        with open(self._existing(h["name"]), "rb") as f:
            return {}, [f.read()]

    def _op_remove(self, h, blobs) -> Reply:
        os.unlink(self._existing(h["name"]))
        return {}, []

    def _op_listdir(self, h, blobs) -> Reply:
        return {"files": self._files()}, []

    # ---- modules -----------------------------------------------------------------------
    def _op_load_module(self, h, blobs) -> Reply:
        path = self._existing(h["name"])
        if _is_graph_archive(path):
            factory = graph_executor.load_module(path)
            if factory.lib is not None:  # load_module extracts the archive to a folder of its own
                self._extra_dirs.append(os.path.dirname(factory.lib.library_path))
            funcs = [factory.plan.get("mod_name", "default")]
            return {"handle": self._put(factory), "kind": "graph_factory", "entry": None,
                    "functions": funcs, "type_key": "GraphExecutorFactory",
                    "inputs": list(factory.plan.get("inputs", []))}, []
        if not path.endswith((".tar", ".tar.gz", ".tgz")):
            # dlopen keeps one copy per path: a re-uploaded library must get a new path
            fresh = os.path.join(os.path.dirname(path),
                                 f".kiln-loaded-{next(self._loaded)}-{os.path.basename(path)}")
            shutil.copyfile(path, fresh)
            path = fresh
        mod = load_module(path)
        return {"handle": self._put(mod), "kind": "module", "entry": mod.entry_name,
                "functions": list(mod.functions), "type_key": mod.type_key}, []

    def _op_get_source(self, h, blobs) -> Reply:
        return {"source": self._get(h["mod"], Module).get_source(h.get("fmt", ""))}, []

    def _op_call(self, h, blobs) -> Reply:
        mod = self._get(h["mod"], Module)
        args = self._args(h["args"])
        if h.get("func") is None:
            mod(*args)
        else:
            mod.get_function(h["func"])(*args)
        return {}, []

    def _op_has_function(self, h, blobs) -> Reply:
        mod = self._get(h["mod"], Module)
        mod.get_function(h["func"], query_imports=True)  # raises AttributeError when absent
        return {}, []

    def _op_time_evaluator(self, h, blobs) -> Reply:
        mod = self._get(h["mod"], Module)
        ev = mod.time_evaluator(h["func"], self._device(h["dev"]), number=int(h["number"]),
                                repeat=int(h["repeat"]),
                                min_repeat_ms=float(h["min_repeat_ms"]))
        return {"results": list(ev(*self._args(h["args"])).results)}, []

    # ---- arrays and devices ------------------------------------------------------------
    def _op_nd_empty(self, h, blobs) -> Reply:
        a = _nd.empty(h["shape"], h["dtype"], self._device(h["dev"]))
        if blobs:
            a.copyfrom(self._from_blob(blobs[0], h["shape"], h["dtype"]))
        return self._array_info(a), []

    def _op_nd_write(self, h, blobs) -> Reply:
        a = self._get(h["nd"], _nd.NDArray)
        a.copyfrom(self._from_blob(blobs[0], list(a.shape), a.dtype))
        return {}, []

    def _op_nd_read(self, h, blobs) -> Reply:
        return {}, [np.ascontiguousarray(self._get(h["nd"], _nd.NDArray).numpy())]

    def _op_nd_copy(self, h, blobs) -> Reply:
        self._get(h["dst"], _nd.NDArray).copyfrom(self._get(h["src"], _nd.NDArray))
        return {}, []

    def _op_free(self, h, blobs) -> Reply:
        return {}, []  # the handles listed in "free" were dropped by handle()

    def _op_dev_exist(self, h, blobs) -> Reply:
        return {"exist": self._device(h["dev"]).exist}, []

    def _op_dev_sync(self, h, blobs) -> Reply:
        self._device(h["dev"]).sync()
        return {}, []

    def _op_dev_attr(self, h, blobs) -> Reply:
        return {"value": getattr(self._device(h["dev"]), h["name"])}, []

    # ---- graph executor ----------------------------------------------------------------
    def _graph(self, h: Any) -> graph_executor.GraphModule:
        return self._get(h, graph_executor.GraphModule)

    def _op_graph_create(self, h, blobs) -> Reply:
        factory = self._get(h["mod"], graph_executor.GraphExecutorFactoryModule)
        if h.get("func", "default") != factory.plan.get("mod_name", "default"):
            raise TVMError(f"graph module has no function {h.get('func')!r}")
        if "graph_json" in h and json.loads(h["graph_json"]) != factory.plan:
            raise TVMError("the graph JSON given to graph_runtime.create is not the one of the "
                           "uploaded archive; upload the archive of the same relay.build")
        gm = graph_executor.GraphModule(factory, self._device(h["dev"]))
        return {"handle": self._put(gm), "num_outputs": gm.get_num_outputs(),
                "inputs": list(factory.plan.get("inputs", []))}, []

    def _op_graph_set_input(self, h, blobs) -> Reply:
        gm = self._graph(h["g"])
        if "nd" in h:
            value = self._get(h["nd"], _nd.NDArray).numpy()
        else:
            value = self._from_blob(blobs[0], h["shape"], h["dtype"])
        gm.set_input(h["key"], value)
        return {}, []

    def _op_graph_run(self, h, blobs) -> Reply:
        self._graph(h["g"]).run()
        return {}, []

    def _op_graph_get_output(self, h, blobs) -> Reply:
        return self._array_info(self._graph(h["g"]).get_output(int(h["index"]))), []

    def _op_graph_get_input(self, h, blobs) -> Reply:
        return self._array_info(self._graph(h["g"]).get_input(h["key"])), []

    def _op_graph_benchmark(self, h, blobs) -> Reply:
        gm = self._graph(h["g"])
        return {"seconds": gm.benchmark(number=int(h["number"]), repeat=int(h["repeat"]))}, []


class Server:
    """An RPC server listening on ``host:port`` (``port=0`` picks a free port; with
    ``port_end`` the first free port in ``[port, port_end)`` is used).

    It starts serving at once, in daemon threads; ``server.port`` is the bound port.
    ``stop()`` (or leaving a ``with`` block) closes the listening socket, ends the open
    sessions and deletes their workspaces.
    """

    def __init__(self, host: str = "0.0.0.0", port: int = 9090, port_end: int | None = None,
                 *, silent: bool = False) -> None:
        self.host = host
        self._sock = self._bind(host, port, port_end)
        self.port: int = self._sock.getsockname()[1]
        self._sock.settimeout(0.2)  # the accept loop wakes to notice stop()
        if not silent:
            logger.info("bind to %s:%d", host, self.port)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._thread = threading.Thread(target=self._accept_loop, name="kiln-rpc-accept",
                                        daemon=True)
        self._thread.start()

    @staticmethod
    def _bind(host: str, port: int, port_end: int | None) -> socket.socket:
        ports = [port] if port == 0 or port_end is None else list(range(port, port_end))
        last: OSError | None = None
        for p in ports:
            try:
                return socket.create_server((host, p), backlog=16)
            except OSError as e:
                last = e
        span = f"{host}:{port}" if len(ports) <= 1 else f"{host}:{port}-{port_end - 1}"
        raise TVMError(f"RPC server cannot bind to {span}: {last}")

    # ---- serving -----------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, addr = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break  # the listening socket was closed
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = threading.Thread(target=self._serve, args=(conn, f"{addr[0]}:{addr[1]}"),
                                 name="kiln-rpc-session", daemon=True)
            with self._lock:
                self._conns[conn] = t
            t.start()

    def _serve(self, conn: socket.socket, peer: str) -> None:
        logger.info("connection from %s", peer)
        session = SessionHandler(peer)
        timer: threading.Timer | None = None
        reason = "closed by the client"
        try:
            while not self._stopping.is_set():
                try:
                    header, blobs = recv_message(conn)
                except ProtocolError as e:
                    reason = f"protocol error: {e}"
                    break
                except OSError:
                    break
                timeout = header.get("session_timeout") if header.get("op") == "hello" else 0
                if timeout and timer is None:
                    timer = threading.Timer(float(timeout), self._expire, (conn, peer, timeout))
                    timer.daemon = True
                    timer.start()
                reply, out = session.handle(header, blobs)
                try:
                    send_message(conn, reply, out)
                except OSError:
                    break
        except Exception:  # a bug must not take the server down
            reason = "internal error"
            logger.exception("session %s failed", peer)
        finally:
            if timer is not None:
                timer.cancel()
            session.close()
            with self._lock:
                self._conns.pop(conn, None)
            conn.close()
            logger.info("session %s ended (%s)", peer, reason)

    @staticmethod
    def _expire(conn: socket.socket, peer: str, timeout: float) -> None:
        logger.info("session %s timed out after %s s", peer, timeout)
        _shutdown(conn)

    # ---- lifetime ----------------------------------------------------------------------
    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, end every session and wait (up to ``timeout`` s) for them."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._sock.close()
        self._thread.join(timeout)
        with self._lock:
            conns = list(self._conns.items())
        for conn, _ in conns:
            _shutdown(conn)
        deadline = time.monotonic() + timeout
        for _, t in conns:
            t.join(max(0.0, deadline - time.monotonic()))

    terminate = stop

    def serve_forever(self) -> None:
        """Block until :meth:`stop` is called (from a signal handler or another thread)."""
        while self._thread.is_alive():
            self._thread.join(0.5)

    @property
    def num_sessions(self) -> int:
        with self._lock:
            return len(self._conns)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Server({self.host}:{self.port})"


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
