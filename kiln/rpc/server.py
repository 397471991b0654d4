"""The RPC server: runs uploaded modules on this machine for remote clients.

``Server(host, port)`` listens in a background thread (a :class:`~kiln.rpc.listener.Listener`:
localhost unless told otherwise, a key for any other address, optional TLS). Every
connection that passes the key check and says ``hello`` is a *session*: a child process of
its own (:mod:`kiln.rpc.session_process`) with its own workspace directory (where uploads
go) and its own table of objects (loaded modules, arrays, graph executors) that the client
refers to by integer handles. When the session ends (the client said goodbye or went away,
its ``session_timeout`` or the idle timeout passed, or a kernel crashed the child) the child
is killed with everything it started and its workspace is deleted; the server keeps serving.

With ``tracker_addr`` the server registers under ``key`` with an RPC tracker
(:mod:`kiln.rpc.tracker`) and serves one session at a time, to the client the tracker sent
(it presents the match key the server offered).

The operations a client may ask for are exactly the ``_op_*`` methods of
:class:`SessionHandler`; arguments are JSON values and raw array bytes (see protocol.py).
"""

from __future__ import annotations

import importlib
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
from ..runtime.device import EXT_DEV, Device
from ..runtime.module import load_module
from .auth import HANDSHAKE_TIMEOUT
from .listener import Listener
from .protocol import MAX_HEADER, Limits, ProtocolError, recv_message, send_message
from .session_process import SessionProcess, relay
from .tracker_client import Registration

__all__ = ["Server", "SessionHandler"]

logger = logging.getLogger("RPCServer")

Reply = tuple[dict[str, Any], list[Any]]
#: the device attributes a client may read (RemoteDevice's CUDA limits)

_DEVICE_ATTRS = frozenset({"max_threads_per_block", "max_shared_memory_per_block",
                           "warp_size", "compute_version", "max_thread_dimensions"})


def hello_info() -> dict[str, Any]:
    """What a server says about itself when a session starts."""
    from ..target import host_triple

    return {"server": "kiln", "host_triple": host_triple(), "machine": platform.node()}


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

    def __init__(self, peer: str = "local", workspace: str | None = None) -> None:
        self.peer = peer
        self.workspace = workspace or tempfile.mkdtemp(prefix="kiln-rpc-")
        self._objects: dict[int, Any] = {}
        self._ids = itertools.count(1)
        self._loaded = itertools.count()
        self._extra_dirs: list[str] = []  # deleted with the workspace

    # ---- plumbing ---------------------------------------------------------------------
    def handle(self, header: dict[str, Any], blobs: list[Any]) -> Reply:
        op = header.get("op")
        fn = getattr(self, f"_op_{op}", None) if isinstance(op, str) else None
        try:
            self._free(header.get("free", []))
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

    def _free(self, handles: Any) -> None:
        """Drop the objects a request's ``free`` field names (the client's dropped handles);
        a field that is not a list of integers is an error of that request, not of the
        session."""
        if not isinstance(handles, list) or not all(type(h) is int for h in handles):
            raise TVMError(f"bad 'free' field {handles!r}: expected a list of handles")
        for h in handles:
            self._objects.pop(h, None)

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
        path = os.path.join(self.workspace, name)
        root = os.path.realpath(self.workspace)
        if os.path.commonpath([root, os.path.realpath(path)]) != root:
            raise TVMError(f"bad remote file name {name!r}: it leads out of the session "
                           "workspace through a link")
        return path

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
        dev = Device(int(dev_type), int(dev_id))
        if dev.device_type == EXT_DEV and not dev.exist:
            # the accelerator of a kiln server is VTA's simulator (TVM's RPC server loads
            # VTA's runtime the same way); imported by name: kiln.vta sits above kiln.rpc
            importlib.import_module("kiln.vta")
        return dev

    def _module(self, h: Any) -> Any:
        """A module this session loaded (a shared library, a CUDA or a VTA module)."""
        mod = self._get(h, object)
        if not callable(getattr(mod, "get_function", None)) or isinstance(mod, type):
            raise TVMError(f"invalid remote handle {h!r}: not a module")
        return mod

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
        return hello_info(), []

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
            library = getattr(factory.lib, "library_path", None)  # a CUDA library has none
            if library is not None:  # load_module extracts the archive to a folder of its own
                self._extra_dirs.append(os.path.dirname(library))
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
        return {"source": self._module(h["mod"]).get_source(h.get("fmt", ""))}, []

    def _op_call(self, h, blobs) -> Reply:
        mod = self._module(h["mod"])
        args = self._args(h["args"])
        if h.get("func") is None:
            mod(*args)
        else:
            mod.get_function(h["func"])(*args)
        return {}, []

    def _op_has_function(self, h, blobs) -> Reply:
        mod = self._module(h["mod"])
        mod.get_function(h["func"], query_imports=True)  # raises AttributeError when absent
        return {}, []

    def _op_time_evaluator(self, h, blobs) -> Reply:
        mod = self._module(h["mod"])
        ev = mod.time_evaluator(h["func"], self._device(h["dev"]), number=int(h["number"]),
                                repeat=int(h["repeat"]),
                                min_repeat_ms=float(h["min_repeat_ms"]))
        return {"results": list(ev(*self._args(h["args"])).results)}, []

    # ---- arrays and devices ------------------------------------------------------------
    def _op_nd_empty(self, h, blobs) -> Reply:
        a = _nd.empty(h["shape"], h["dtype"], self._device(h["dev"]))
        # zeroed: a client never reads memory it did not write
        a.copyfrom(self._from_blob(blobs[0], h["shape"], h["dtype"]) if blobs
                   else np.zeros(h["shape"], h["dtype"]))
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
        if h.get("name") not in _DEVICE_ATTRS:
            raise TVMError(f"unknown device attribute {h.get('name')!r}")
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


class Server(Listener):
    """An RPC server on ``host:port`` (``port=0`` picks a free port; with ``port_end`` the
    first free port in ``[port, port_end)`` is used), serving at once in daemon threads;
    ``server.port`` is the bound port. ``stop()`` (or leaving a ``with`` block) closes the
    listening socket, kills the open sessions and deletes their workspaces.

    Safety: ``host`` defaults to ``127.0.0.1``; any other address needs ``auth_key``
    (default: the ``KILN_RPC_KEY`` environment variable) or ``insecure=True``.
    ``ssl_context`` (:func:`kiln.rpc.auth.server_tls_context`) adds TLS. A message's data is
    at most ``max_upload`` bytes; a client silent for ``idle_timeout`` seconds is dropped.

    With ``tracker_addr=(host, port)`` the server registers with that tracker under ``key``
    (clients reach it at ``custom_addr`` if given, else at the address the tracker sees;
    ``tracker_ssl_context``: a client TLS context for a tracker with a certificate) and
    serves only the client the tracker sent; a client that does not come within
    ``match_timeout`` seconds loses its turn.
    """

    role = "server"

    def __init__(self, host: str = "127.0.0.1", port: int = 9090, port_end: int | None = None,
                 *, silent: bool = False, tracker_addr: tuple[str, int] | None = None,
                 key: str = "", custom_addr: str | None = None,
                 auth_key: bytes | str | None = None, insecure: bool = False,
                 ssl_context: Any = None, idle_timeout: float = 900.0,
                 max_upload: int = 1 << 30, max_connections: int = 64,
                 match_timeout: float = 10.0, tracker_ssl_context: Any = None) -> None:
        if tracker_addr is not None and not key:
            raise TVMError("an RPC server registered with a tracker needs a key (the device "
                           "name clients ask the tracker for), e.g. --key cpu")
        super().__init__(host, port, port_end, logger=logger, silent=silent,
                         auth_key=auth_key, insecure=insecure, ssl_context=ssl_context,
                         max_connections=max_connections)
        self.key = key
        self.idle_timeout = float(idle_timeout)
        self.limits = Limits(header=MAX_HEADER, blobs=int(max_upload))
        self.match_timeout = float(match_timeout)
        self._sessions: dict[SessionProcess, str] = {}  # the running ones -> workspace
        self._spare: SessionProcess | None = SessionProcess()
        self._registration: Registration | None = None
        if tracker_addr is not None:
            self._registration = Registration(tracker_addr, key, self.port, self._on_assigned,
                                              custom_addr=custom_addr, auth_key=self.auth_key,
                                              ssl_context=tracker_ssl_context)
            self._registration.offer()
        self.start()

    # ---- sessions ----------------------------------------------------------------------
    def _take_process(self) -> SessionProcess:
        """The spare child (a new one if it died), and a new spare started for the next."""
        with self._lock:
            proc, self._spare = self._spare, None
        if proc is None or not proc.alive:
            if proc is not None:
                proc.kill()
            proc = SessionProcess()
        if not self.stopping:
            spare = SessionProcess()
            with self._lock:
                self._spare = spare
            if self.stopping:  # stop() ran meanwhile and missed it
                spare.kill()
        return proc

    def _hello(self, conn: socket.socket, peer: str) -> float | None:
        """Read the client's ``hello``; its session timeout (0: none), or None when
        refused."""
        conn.settimeout(HANDSHAKE_TIMEOUT)
        try:
            header, _ = recv_message(conn, Limits(header=64 << 10, blobs=0))
        except (OSError, ProtocolError) as e:
            logger.info("%s did not start a session: %s", peer, e or type(e).__name__)
            return None
        timeout = header.get("session_timeout") or 0
        error = None
        if header.get("op") != "hello":
            error = "a session starts with 'hello'"
        elif not isinstance(timeout, (int, float)) or timeout < 0:
            error = f"bad session_timeout {timeout!r}"
        elif self._registration is not None \
                and not self._registration.accepts(header.get("key")):
            error = (f"this server is handed out by its tracker: ask the tracker for a "
                     f"session of key {self.key!r}")
        if error is not None:
            logger.info("refused %s: %s", peer, error)
            send_message(conn, {"status": "error", "etype": "RPCError", "message": error})
            return None
        return float(timeout)

    def handle(self, conn: socket.socket, peer: str) -> None:
        timeout = self._hello(conn, peer)
        if timeout is None:
            return
        proc = self._take_process()
        workspace = tempfile.mkdtemp(prefix="kiln-rpc-")
        with self._lock:
            self._sessions[proc] = workspace
        logger.info("session %s started (process %d)", peer, proc.pid)
        reason = "internal error"
        try:
            proc.open(workspace, peer)
            send_message(conn, {"status": "ok", **hello_info()})
            deadline = time.monotonic() + timeout if timeout else float("inf")
            reason = relay(conn, proc, deadline, self.idle_timeout, self.limits)
        except (OSError, ProtocolError) as e:
            reason = f"connection lost: {e}"
        finally:
            proc.kill()
            shutil.rmtree(workspace, ignore_errors=True)
            with self._lock:
                self._sessions.pop(proc, None)
            logger.info("session %s ended (%s)", peer, reason)
            if self._registration is not None and not self.stopping:
                self._registration.offer()

    def _on_assigned(self, match_key: str) -> None:
        """The tracker sent a client: if it has not come in time, offer the server again."""
        timer = threading.Timer(self.match_timeout, self._registration.renew, (match_key,))
        timer.daemon = True
        timer.start()

    # ---- lifetime ----------------------------------------------------------------------
    def on_stop(self) -> None:
        if self._registration is not None:
            self._registration.close()
        with self._lock:
            spare, self._spare = self._spare, None
            running = list(self._sessions.items())
        if spare is not None:
            spare.kill()
        for proc, workspace in running:
            proc.kill()
            shutil.rmtree(workspace, ignore_errors=True)

    @property
    def num_sessions(self) -> int:
        """Sessions running now."""
        with self._lock:
            return len(self._sessions)

    def sessions(self) -> list[tuple[int, str]]:
        """``(process id, workspace directory)`` of each running session."""
        with self._lock:
            return [(p.pid, w) for p, w in self._sessions.items()]
