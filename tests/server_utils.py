"""A real jupyter_server (or JupyterLab) in a subprocess, and websocket clients of its kernels.

Used by the end-to-end tests and by ``benchmarks/through_server.py``; generic enough for any
test that needs the server path::

    with JupyterServer() as server:                     # free port, token, curve required
        kernel_id = server.start_kernel("python3-ext")  # POST /api/kernels
        with server.connect(kernel_id) as ws:           # v1.kernel.websocket.jupyter.org
            msg_id = ws.execute("1 + 1")
            reply, iopub = ws.collect_execution(msg_id)

What is real here: the server is ``python -m jupyter_server`` (or ``-m jupyterlab``) as a
user would run it, kernels are started through the REST API, and every kernel message goes
through the server's websocket with the binary ``v1`` framing. The server signs what the
client sends (v1 messages are forwarded with ``Session.send_raw``), so a client needs no key.

Every directory Jupyter reads or writes (config, data, runtime, IPython, root_dir) is a fresh
temporary one, so a developer's own configuration never leaks into a test. Kernelspecs are
still found in ``sys.prefix`` (where ``python3`` and ``python3-ext`` are installed).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import websocket  # websocket-client
from jupyter_client.session import Session
from jupyter_server.services.kernels.connection.base import (
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)

#: The websocket subprotocol JupyterLab uses; the server then frames messages in binary.
WS_V1 = "v1.kernel.websocket.jupyter.org"

#: Channels the server exposes on a kernel's websocket.
CHANNELS = ("shell", "control", "iopub", "stdin")


# --- the v1 binary framing -------------------------------------------------------------
#
# One websocket binary frame per message: a table of u64 offsets, then the channel name,
# header, parent_header, metadata, content and buffers. jupyter_server's own
# ``serialize_msg_to_ws_v1`` / ``deserialize_msg_from_ws_v1`` (the same framing as
# JupyterLab's ``serializeV1KernelMessage``) do the work; these wrappers only add a clear
# error for a frame too short to hold an offset table.


def encode_v1(channel: str, parts: list[bytes]) -> bytes:
    """Frame ``parts`` (header, parent_header, metadata, content, *buffers) for ``channel``."""
    return serialize_msg_to_ws_v1([bytes(p) for p in parts], channel)


def decode_v1(frame: bytes) -> tuple[str, list[bytes]]:
    """The channel and the parts of one v1 frame (inverse of :func:`encode_v1`)."""
    if len(frame) < 8 or len(frame) < 8 * (1 + int.from_bytes(frame[:8], "little")):
        raise ValueError(f"v1 frame too short for its offset table: {len(frame)} bytes")
    channel, parts = deserialize_msg_from_ws_v1(frame)
    return channel, [bytes(p) for p in parts]


def message_from_parts(channel: str, parts: list[bytes]) -> dict[str, Any]:
    """A message dict (as jupyter_client gives it) from decoded v1 parts."""
    if len(parts) < 4:
        raise ValueError(f"v1 message with {len(parts)} parts; need at least 4")
    header, parent, metadata, content = (json.loads(p) if p else {} for p in parts[:4])
    return {
        "channel": channel,
        "header": header,
        "msg_id": header.get("msg_id"),
        "msg_type": header.get("msg_type"),
        "parent_header": parent,
        "metadata": metadata,
        "content": content,
        "buffers": list(parts[4:]),
    }


# --- the server ------------------------------------------------------------------------


class ServerError(RuntimeError):
    """The server did not start, or answered a REST call with an error."""


class JupyterServer:
    """A ``jupyter_server`` (``app="server"``) or JupyterLab (``app="lab"``) subprocess.

    ``encryption=True`` starts every kernel with ``--KernelManager.transport_encryption=
    required`` (CurveZMQ on all five sockets; the server refuses kernels whose spec does not
    declare ``curve``). ``extra_args`` go on the command line after ours, so they win.
    ``stop_timeout`` is how long :meth:`stop` waits after SIGTERM before it kills the server.
    The server's log is kept in ``self.log_path``; :meth:`log_text` reads it.
    ``pause_extension=True`` loads tests/pause_extension.py, for :meth:`block_event_loop`.
    """

    def __init__(
        self,
        *,
        app: str = "server",
        encryption: bool = True,
        root_dir: str | os.PathLike[str] | None = None,
        extra_args: Iterable[str] = (),
        env: dict[str, str] | None = None,
        drop_env: tuple[str, ...] = (),
        startup_timeout: float = 90,
        stop_timeout: float = 30,
        pause_extension: bool = False,
    ) -> None:
        if app not in ("server", "lab"):
            raise ValueError(f"app must be 'server' or 'lab', not {app!r}")
        self.app = app
        self.encryption = encryption
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})
        #: variables of this process the server must not inherit
        self.drop_env = drop_env
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.pause_extension = pause_extension
        self.token = uuid.uuid4().hex
        self._tmp = Path(tempfile.mkdtemp(prefix="ipykernel-ext-server-"))
        self.root_dir = Path(root_dir) if root_dir is not None else self._tmp / "root"
        self.root_dir.mkdir(parents=True, exist_ok=True)
        self.runtime_dir = self._tmp / "runtime"
        #: JupyterLab reads user settings from here (``<plugin package>/<plugin>.jupyterlab-
        #: settings`` files); write them before a page loads.
        self.lab_settings_dir = self._tmp / "lab-settings"
        self.log_path = self._tmp / "server.log"
        self.url = ""  # http://127.0.0.1:PORT/ once started
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    # lifecycle ----------------------------------------------------------------------

    def command(self) -> list[str]:
        module = "jupyter_server" if self.app == "server" else "jupyterlab"
        args = [
            sys.executable,
            "-m",
            module,
            "--no-browser",
            "--allow-root",  # CI and the dev machines run as root
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.port=0",  # the OS picks a free port; read back from the info file
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            "--ServerApp.open_browser=False",
        ]
        if self.encryption:
            args.append("--KernelManager.transport_encryption=required")
        if self.pause_extension:
            args.append('--ServerApp.jpserver_extensions={"pause_extension": True}')
        return args + self.extra_args

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("config", "data", "ipython", "lab-settings", "lab-workspaces"):
            (self._tmp / name).mkdir(exist_ok=True)
        env.update(
            JUPYTER_CONFIG_DIR=str(self._tmp / "config"),
            JUPYTER_DATA_DIR=str(self._tmp / "data"),
            JUPYTER_RUNTIME_DIR=str(self.runtime_dir),
            JUPYTER_PLATFORM_DIRS="1",
            JUPYTERLAB_SETTINGS_DIR=str(self.lab_settings_dir),
            JUPYTERLAB_WORKSPACES_DIR=str(self._tmp / "lab-workspaces"),
            IPYTHONDIR=str(self._tmp / "ipython"),
            PYTHONUNBUFFERED="1",
        )
        # A developer's config path must not add server extensions or kernel settings.
        env.pop("JUPYTER_CONFIG_PATH", None)
        if self.pause_extension:
            # tests/pause_extension.py is imported by the server as a top-level module.
            here = str(Path(__file__).resolve().parent)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        env.update(self.extra_env)
        for name in self.drop_env:
            env.pop(name, None)
        return env

    def start(self) -> JupyterServer:
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.root_dir,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_until_up()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_up(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout
        info_file = self.runtime_dir / f"jpserver-{self.proc.pid}.json"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"jupyter {self.app} exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if not self.url and info_file.exists():
                try:
                    info = json.loads(info_file.read_text())
                    self.url = f"http://127.0.0.1:{info['port']}/"
                except (ValueError, KeyError):
                    pass  # written but not yet complete
            if self.url:
                try:
                    self.api("GET", "api/status", timeout=5)
                    return
                except (OSError, ServerError):
                    pass
            time.sleep(0.2)
        raise ServerError(
            f"jupyter {self.app} not up in {self.startup_timeout} s:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Shut kernels down through the server, then stop it; remove the temp dirs."""
        if self.proc is not None and self.proc.poll() is None:
            if self.url:
                try:
                    for kernel in self.api("GET", "api/kernels", timeout=10):
                        self.shutdown_kernel(kernel["id"])
                except (OSError, ServerError):
                    pass
            self.proc.terminate()  # SIGTERM: the server shuts its kernels down too
            try:
                self.proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if os.environ.get("IPYKERNEL_EXT_KEEP_SERVER_DIRS") != "1":
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> JupyterServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # pauses -------------------------------------------------------------------------

    def block_event_loop(self, seconds: float) -> ServerPause:
        """Block the server's event loop for ``seconds`` (``pause_extension=True`` needed).

        Returns at once; the pause runs in a thread. ``started`` is set once the server has
        answered, i.e. its loop is blocked from then on.
        """
        if not self.pause_extension:
            raise ServerError("start the server with pause_extension=True")
        from .pause_extension import BLOCK_PATH

        def block(pause: ServerPause) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=seconds + 60)
            try:
                conn.request(
                    "GET",
                    f"/{BLOCK_PATH}?seconds={seconds}",
                    headers={"Authorization": f"token {self.token}"},
                )
                response = conn.getresponse()
                body = response.read()  # sent before the sleep (Content-Length)
                if response.status != 200:
                    raise ServerError(f"block: HTTP {response.status}: {body[:200]!r}")
                pause.started.set()
                # The loop handles requests one at a time: this one is answered only once
                # the sleep is over.
                self.api("GET", "api/status", timeout=seconds + 60)
            finally:
                conn.close()

        return ServerPause.run(f"block the event loop {seconds} s", block)

    def stop_process(self, seconds: float) -> ServerPause:
        """SIGSTOP the server process (not its kernels) for ``seconds``, then SIGCONT.

        Returns at once; the pause runs in a thread, ``started`` is set after SIGSTOP.
        """
        assert self.proc is not None
        pid = self.proc.pid

        def stop_then_continue(pause: ServerPause) -> None:
            os.kill(pid, signal.SIGSTOP)
            try:
                pause.started.set()
                time.sleep(seconds)
            finally:
                os.kill(pid, signal.SIGCONT)

        return ServerPause.run(f"SIGSTOP {seconds} s", stop_then_continue)

    # REST ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the server listens on (once started)."""
        if not self.url:
            raise ServerError("the server is not started")
        return int(self.url.rstrip("/").rsplit(":", 1)[1])

    def http_url(self, path: str) -> str:
        return self.url + path.lstrip("/")

    def ws_url(self, path: str) -> str:
        return "ws" + self.http_url(path)[len("http") :]

    def api(self, method: str, path: str, body: Any = None, timeout: float = 60) -> Any:
        """One REST call with the token; returns the decoded JSON (None for no body)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.http_url(path), data=data, method=method)
        request.add_header("Authorization", f"token {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:2000]
            raise ServerError(f"{method} {path}: HTTP {exc.code}: {detail}") from exc
        return json.loads(raw) if raw else None

    def start_kernel(self, name: str, timeout: float = 120) -> str:
        """``POST /api/kernels``; returns the kernel id (the server waits for it to start)."""
        model = self.api("POST", "api/kernels", {"name": name}, timeout=timeout)
        return model["id"]

    def kernel_model(self, kernel_id: str) -> dict[str, Any]:
        """``GET /api/kernels/<id>`` (``execution_state`` is the server's idea of busy)."""
        return self.api("GET", f"api/kernels/{kernel_id}")

    def shutdown_kernel(self, kernel_id: str) -> None:
        try:
            self.api("DELETE", f"api/kernels/{kernel_id}", timeout=60)
        except ServerError as exc:
            if "HTTP 404" not in str(exc):
                raise

    def connection_info(self, kernel_id: str) -> dict[str, Any]:
        """The kernel's connection file as the server wrote it (keys included)."""
        path = self.runtime_dir / f"kernel-{kernel_id}.json"
        return json.loads(path.read_text())

    def connect(
        self,
        kernel_id: str,
        session_id: str | None = None,
        timeout: float = 60,
        ready_on: str = "shell",
    ) -> KernelWebsocket:
        """A ready websocket client on ``kernel_id`` (see :class:`KernelWebsocket`)."""
        return KernelWebsocket(
            self, kernel_id, session_id=session_id, timeout=timeout, ready_on=ready_on
        )


class ServerPause:
    """A pause of the server running in a background thread (see ``JupyterServer``).

    ``started``: the server is paused from now on. :meth:`join` returns once it runs again
    and raises whatever went wrong in the thread.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.started = threading.Event()
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def run(cls, what: str, body: Callable[[ServerPause], None]) -> ServerPause:
        pause = cls(what)

        def target() -> None:
            try:
                body(pause)
            except BaseException as exc:  # re-raised by join()
                pause.error = exc

        pause._thread = threading.Thread(target=target, name=f"pause: {what}", daemon=True)
        pause._thread.start()
        return pause

    @property
    def over(self) -> bool:
        """The server runs again (or the pause failed; :meth:`join` says)."""
        return self._thread is not None and not self._thread.is_alive()

    def join(self, timeout: float = 180) -> None:
        assert self._thread is not None
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"{self.what}: not over after {timeout} s")
        if self.error is not None:
            raise self.error
        if not self.started.is_set():
            raise ServerError(f"{self.what}: never started")


# --- a websocket client ------------------------------------------------------------------


class KernelWebsocket:
    """One client of a kernel through the server's ``/api/kernels/<id>/channels`` websocket.

    Its session id is the ``session_id`` query argument, which the server also uses as the
    client's shell/control DEALER identity: give every client its own (the default is a
    fresh uuid). The constructor returns once a ``kernel_info_reply`` came back through the
    websocket (on ``ready_on``: ``"control"`` for a session whose own cell still runs, as
    stock answers its shell request after the cell), i.e. the server has finished connecting
    and subscribing to IOPub.

    Messages that :meth:`recv` reads while a caller waits for something else are not lost:
    :meth:`recv_until` keeps the ones it skipped in ``self.backlog`` for later calls.
    """

    def __init__(
        self,
        server: JupyterServer,
        kernel_id: str,
        session_id: str | None = None,
        timeout: float = 60,
        ready_on: str = "shell",
    ) -> None:
        self.server = server
        self.kernel_id = kernel_id
        self.session = Session(session=session_id or uuid.uuid4().hex, username="e2e-test")
        self.backlog: list[dict[str, Any]] = []
        url = server.ws_url(f"api/kernels/{kernel_id}/channels?session_id={self.session.session}")
        self.ws = websocket.create_connection(
            url,
            subprotocols=[WS_V1],
            header=[f"Authorization: token {server.token}"],
            timeout=timeout,
            enable_multithread=True,
        )
        selected = self.ws.getsubprotocol()
        if selected != WS_V1:
            self.ws.close()
            raise ServerError(f"server chose websocket subprotocol {selected!r}, not {WS_V1}")
        # One thread reads blocking and queues whole messages: a socket timeout in the middle
        # of a frame would leave websocket-client's framing out of step, so callers wait on
        # the queue instead. It also keeps reading while a test does something else.
        self.ws.settimeout(None)
        self._inbox: queue.Queue[dict[str, Any] | BaseException] = queue.Queue()
        self._broken: BaseException | None = None
        self._reader = threading.Thread(
            target=self._read, name=f"ws-reader-{self.session_id[:8]}", daemon=True
        )
        self._reader.start()
        # On control for a session whose own cell runs: its shell request waits for the cell.
        self.kernel_info = self.request(ready_on, "kernel_info_request", timeout=timeout)

    @property
    def session_id(self) -> str:
        return self.session.session

    def close(self) -> None:
        """Close the websocket (the server then closes its kernel channels for it)."""
        with contextlib.suppress(Exception):
            self.ws.send_close()
        self._reader.join(timeout=5)  # it ends on the server's close frame
        with contextlib.suppress(Exception):
            self.ws.shutdown()
        self._reader.join(timeout=5)

    def __enter__(self) -> KernelWebsocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # sending ------------------------------------------------------------------------

    def send(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        buffers: list[bytes] | None = None,
    ) -> dict[str, Any]:
        """Send one message; returns it (its ``header.msg_id`` identifies the replies)."""
        if channel not in CHANNELS:
            raise ValueError(f"unknown channel {channel!r}")
        msg = self.session.msg(msg_type, content={} if content is None else content)
        msg["metadata"] = metadata or {}
        msg["buffers"] = list(buffers or [])
        parts = [
            self.session.pack(msg["header"]),
            self.session.pack(msg["parent_header"]),
            self.session.pack(msg["metadata"]),
            self.session.pack(msg["content"]),
            *msg["buffers"],
        ]
        self.ws.send(encode_v1(channel, parts), opcode=websocket.ABNF.OPCODE_BINARY)
        return msg

    def execute(self, code: str, **content: Any) -> str:
        """Send an ``execute_request``; returns its msg_id."""
        fields = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        fields.update(content)
        return self.send("shell", "execute_request", fields)["header"]["msg_id"]

    # receiving ----------------------------------------------------------------------

    def _read(self) -> None:
        while True:
            try:
                opcode, data = self.ws.recv_data()
            except Exception as exc:  # closed by us, or the connection broke
                self._inbox.put(ConnectionError(f"websocket closed: {exc!r}"))
                return
            received = time.perf_counter()
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                self._inbox.put(ConnectionError("websocket closed by the server"))
                return
            if opcode == websocket.ABNF.OPCODE_TEXT:
                # The server writes JSON text only for the legacy protocol; never with v1.
                self._inbox.put(ServerError(f"text frame on a v1 websocket: {data[:200]!r}"))
                continue
            try:
                msg = message_from_parts(*decode_v1(data))
            except ValueError as exc:
                self._inbox.put(exc)
                continue
            msg["received"] = received  # time.perf_counter() when the frame was read
            self._inbox.put(msg)

    def recv(self, timeout: float) -> dict[str, Any]:
        """The next message from the websocket; ``TimeoutError`` if none in ``timeout`` s.

        Each message has, besides the usual keys, ``channel`` and ``received`` (the
        ``time.perf_counter()`` at which its frame was read).
        """
        if self._broken is not None:
            raise self._broken
        try:
            item = self._inbox.get(timeout=max(timeout, 0))
        except queue.Empty:
            raise TimeoutError(f"no websocket message in {timeout:.1f} s") from None
        if isinstance(item, ConnectionError):
            self._broken = item
        if isinstance(item, BaseException):
            raise item
        return item

    def recv_until(self, match: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """The first message (backlog first) for which ``match`` is true."""
        for i, msg in enumerate(self.backlog):
            if match(msg):
                return self.backlog.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(deadline - time.monotonic())
            if match(msg):
                return msg
            self.backlog.append(msg)

    def request(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any] | None = None,
        timeout: float = 60,
    ) -> dict[str, Any]:
        """Send a request on ``channel`` and return its reply (same channel, same parent)."""
        msg_id = self.send(channel, msg_type, content)["header"]["msg_id"]
        try:
            return self.recv_until(
                lambda m: m["channel"] == channel and m["parent_header"].get("msg_id") == msg_id,
                timeout,
            )
        except TimeoutError as exc:
            raise TimeoutError(f"no reply to {msg_type} on {channel} in {timeout} s") from exc

    def collect_execution(
        self,
        msg_id: str,
        timeout: float = 120,
        on_message: Callable[[dict[str, Any]], None] | None = None,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The execute_reply of ``msg_id`` and every IOPub message it caused, up to its idle.

        ``on_message`` is called with each of them as it is read (to act mid-burst, e.g.
        pause the server once N comm_open have come). IOPub messages with other parents
        stay in the backlog. ``TimeoutError`` if the idle
        or the reply does not come in ``timeout`` s (the ones received so far are in the
        exception's ``messages`` attribute).
        """
        deadline = time.monotonic() + timeout
        iopub: list[dict[str, Any]] = []
        reply: dict[str, Any] | None = None
        idle = False

        def ours(m: dict[str, Any]) -> bool:
            return m["parent_header"].get("msg_id") == msg_id and m["channel"] in (
                "iopub",
                "shell",
            )

        pending = [m for m in self.backlog if ours(m)]
        self.backlog = [m for m in self.backlog if not ours(m)]
        while reply is None or not idle:
            if pending:
                msg = pending.pop(0)
            else:
                try:
                    msg = self.recv_until(ours, deadline - time.monotonic())
                except TimeoutError as exc:
                    err = TimeoutError(
                        f"execution {msg_id}: reply={'yes' if reply else 'no'}, idle={idle}, "
                        f"{len(iopub)} IOPub messages after {timeout} s"
                    )
                    err.messages = iopub  # type: ignore[attr-defined]
                    raise err from exc
            if msg["channel"] == "shell":
                reply = msg
            else:
                iopub.append(msg)
                if on_message is not None:
                    on_message(msg)
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    idle = True
        return reply, iopub

    def run(self, code: str, timeout: float = 120) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """:meth:`execute` then :meth:`collect_execution`; fails on an error reply."""
        reply, iopub = self.collect_execution(self.execute(code), timeout)
        if reply["content"]["status"] != "ok":
            raise AssertionError(
                f"{code[:80]!r} failed: {reply['content'].get('ename')}: "
                f"{reply['content'].get('evalue')}"
            )
        return reply, iopub


def stream_text(messages: list[dict[str, Any]], name: str = "stdout") -> str:
    """The text of the ``stream`` messages named ``name`` among ``messages``."""
    return "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["content"]["name"] == name
    )
