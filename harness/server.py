"""A real jupyter_server (or JupyterLab) in a subprocess, for the tests and benchmarks.

Kernels are started through its REST API; :class:`harness.kernel_websocket.KernelWebsocket`
is a websocket client of one (that module imports this one, not the other way round)::

    with JupyterServer() as server:                     # free port, token, curve required
        kernel_id = server.start_kernel("python3-ext")  # POST /api/kernels
        with KernelWebsocket(server, kernel_id) as ws:  # v1.kernel.websocket.jupyter.org
            msg_id = ws.execute("1 + 1")
            reply, iopub = ws.collect_execution(msg_id)

What is real here: the server is ``python -m jupyter_server`` (or ``-m jupyterlab``) as a
user would run it, and kernels are started through the REST API. It can also be paused for
real (:meth:`JupyterServer.block_event_loop`, :meth:`JupyterServer.stop_process`).

Every directory Jupyter reads or writes (config, data, runtime, IPython, root_dir) is a fresh
temporary one (the folder of :class:`harness.logged_process.LoggedProcess`, which also holds
the server's log and starts and stops it), so a developer's own configuration never leaks
into a test. Kernelspecs are still found in ``sys.prefix`` (where ``python3`` and
``python3-ext`` are installed). The server extensions of ``harness/server_extensions/`` are
importable in the server by their module names (that folder is on its ``PYTHONPATH``); none
is loaded unless asked for.

The package's own server extension (``ipykernel_ext``, enabled by the
``jupyter_server_config.d`` file the install puts into ``sys.prefix``) makes
``SharedChannelsConnection`` the class of every server of the environment. The suite's
baseline is stock's class, so this launcher turns it off unless asked
(``ipykernel_ext=True`` on, ``None`` as installed); a test or benchmark that wants our class
names it with ``--ServerApp.kernel_websocket_connection_class``. Every
``--ServerApp.jpserver_extensions=`` of ``extra_args`` is merged with the launcher's into one
flag (on the command line the last one would replace the others).
"""

from __future__ import annotations

import ast
import http.client
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from .logged_process import LoggedProcess
from .polling import wait_until

#: Seconds past which :meth:`JupyterServer.stop`'s kernel shutdowns are named in the run's
#: warnings (a diagnostic for slow module teardowns, not a verdict).
SLOW_SHUTDOWN = 10.0
#: jupyter-collaboration's last line before a stop that may hang
#: (:meth:`JupyterServer.known_stop_hang`).
COLLAB_STOP_LINE = "YDocExtension] Deleting all rooms."
#: How long that line must stay the log's last before the server is killed (seconds).
COLLAB_STOP_GRACE = 3.0

if TYPE_CHECKING:
    pass

#: The folder of the test server extensions (``pause_extension``, ``outputs_extension``).
SERVER_EXTENSIONS = Path(__file__).resolve().parent / "server_extensions"


#: The flag that enables or disables server extensions (one on a command line: the last wins).
EXTENSIONS_FLAG = "--ServerApp.jpserver_extensions="


def parse_extensions(value: str) -> dict[str, bool]:
    """A ``jpserver_extensions`` value as the command line takes it (a Python dict literal)."""
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"{EXTENSIONS_FLAG}{value}: not a dict literal ({exc})") from None
    if not isinstance(parsed, dict) or not all(
        isinstance(k, str) and isinstance(v, bool) for k, v in parsed.items()
    ):
        raise ValueError(f"{EXTENSIONS_FLAG}{value}: not a dict of names to True/False")
    return parsed


class ServerError(RuntimeError):
    """The server did not start, or answered a REST call with an error."""


class JupyterServer(LoggedProcess):
    """A ``jupyter_server`` (``app="server"``) or JupyterLab (``app="lab"``) subprocess.

    ``encryption=True`` starts every kernel with ``--KernelManager.transport_encryption=
    required`` (CurveZMQ on all five sockets; the server refuses kernels whose spec does not
    declare ``curve``). ``extra_args`` go on the command line after ours, so they win.
    ``stop_timeout`` is how long :meth:`stop` waits after SIGTERM before it kills the server.
    The server's log is kept in ``self.log_path``; :meth:`log_text` reads it.
    ``port``: a fixed port (0: a free one at each start).
    ``pause_extension=True`` loads ``harness/server_extensions/pause_extension.py``, for
    :meth:`block_event_loop`. ``ipykernel_ext``: the package's server extension off
    (``False``, the default: stock's connection class unless ``extra_args`` names one), on
    (``True``) or as the environment's config has it (``None``: a user's server).
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
        ipykernel_ext: bool | None = False,
        port: int = 0,
    ) -> None:
        if app not in ("server", "lab"):
            raise ValueError(f"app must be 'server' or 'lab', not {app!r}")
        super().__init__(
            tmp_prefix="ipykernel-ext-server-", log_name="server.log", stop_timeout=stop_timeout
        )
        self.app = app
        self.encryption = encryption
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})
        #: variables of this process the server must not inherit
        self.drop_env = drop_env
        self.startup_timeout = startup_timeout
        self.pause_extension = pause_extension
        self._collab_stuck_since: float | None = None
        self.ipykernel_ext = ipykernel_ext
        #: 0: the OS picks a free port at each start; else this one at every start (a page
        #: reconnects to a restarted server only on the port it loaded from)
        self.fixed_port = port
        self.token = uuid.uuid4().hex
        self.root_dir = Path(root_dir) if root_dir is not None else self._tmp / "root"
        self.root_dir.mkdir(parents=True, exist_ok=True)
        self.runtime_dir = self._tmp / "runtime"
        #: JupyterLab reads user settings from here (``<plugin package>/<plugin>.jupyterlab-
        #: settings`` files); write them before a page loads.
        self.lab_settings_dir = self._tmp / "lab-settings"
        self.url = ""  # http://127.0.0.1:PORT/ once started

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
            # 0: the OS picks a free port, read back from the info file
            f"--ServerApp.port={self.fixed_port}",
            *(["--ServerApp.port_retries=0"] if self.fixed_port else []),
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            "--ServerApp.open_browser=False",
        ]
        if self.encryption:
            args.append("--KernelManager.transport_encryption=required")
        extensions: dict[str, bool] = {}
        if self.ipykernel_ext is not None:
            extensions["ipykernel_ext"] = self.ipykernel_ext
        if self.pause_extension:
            extensions["pause_extension"] = True
        extra = []
        for arg in self.extra_args:
            if arg.startswith(EXTENSIONS_FLAG):
                extensions.update(parse_extensions(arg[len(EXTENSIONS_FLAG) :]))
            else:
                extra.append(arg)
        if extensions:
            args.append(EXTENSIONS_FLAG + repr(extensions))
        return args + extra

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
        env.update(self.extra_env)
        for name in self.drop_env:
            env.pop(name, None)
        # The server imports a test extension by its module name (``pause_extension``), as
        # ``jpserver_extensions`` names it: their folder goes first on its path, whatever
        # ``PYTHONPATH`` a caller gave.
        paths = (str(SERVER_EXTENSIONS), env.get("PYTHONPATH"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        return env

    def working_dir(self) -> Path:
        return self.root_dir

    def wait_until_up(self) -> None:
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

    def start(self) -> Self:
        """Start the server; again after it ended (:meth:`kill`, a signal): the next one on
        the same folders (runtime dir, root dir, token), on a new port."""
        self.url = ""
        return super().start()

    def stop(self) -> None:
        """Shut kernels down through the server, then stop it (SIGTERM: the server shuts its
        kernels down too); remove the temp dirs."""
        if self.running and self.url:
            started = time.monotonic()
            kernels = []
            try:
                kernels = self.api("GET", "api/kernels", timeout=10)
                for kernel in kernels:
                    self.shutdown_kernel(kernel["id"])
            except (OSError, ServerError):
                pass
            took = time.monotonic() - started
            if took > SLOW_SHUTDOWN:  # a diagnostic for slow teardowns, never a verdict
                warnings.warn(
                    f"shutting {len(kernels)} kernel(s) down through {self.url} took "
                    f"{took:.1f} s; the server log ended:\n{self.log_tail(15)}",
                    stacklevel=2,
                )
        super().stop()

    def known_stop_hang(self) -> bool:
        """jupyter-collaboration's stop: after SIGTERM its extension logs ``Deleting all
        rooms.`` and may never end (jupyter_server_ydoc's ``websocketserver.py``, ``clean``:
        its own FIXME says the clean-up "does not prevent hanging stop process"). Each room
        saved its file ``document_save_delay`` after the document's last change, before the
        stop; nothing is verified after it. Once that line has been the log's last for
        :data:`COLLAB_STOP_GRACE` s, the server is killed instead of waiting 30 s."""
        tail = self.log_tail(1)
        if COLLAB_STOP_LINE not in tail:
            self._collab_stuck_since = None
            return False
        now = time.monotonic()
        if self._collab_stuck_since is None:
            self._collab_stuck_since = now
        return now - self._collab_stuck_since >= COLLAB_STOP_GRACE

    # pauses -------------------------------------------------------------------------

    def block_event_loop(
        self,
        seconds: float,
        until: Callable[[], bool] | None = None,
        on_started: Callable[[], None] | None = None,
    ) -> ServerPause:
        """Block the server's event loop for ``seconds`` (``pause_extension=True`` needed),
        and then, if ``until`` is given, until ``until()`` is true (see :func:`hold_until`).

        Returns at once; the pause runs in a thread. ``started`` is set once the server has
        answered, i.e. its loop is blocked from then on; ``on_started()`` is called then (in
        that thread), so a cell can be told to go on only once the server is paused.
        """
        if not self.pause_extension:
            raise ServerError("start the server with pause_extension=True")
        from .server_extensions.pause_extension import BLOCK_PATH, MAX_SECONDS

        # The loop is blocked until this file exists (the extension looks for it), so the
        # pause can end on a condition this process checks, not on a length set in advance.
        release = self._tmp / f"release-{uuid.uuid4().hex}"
        query = urllib.parse.urlencode({"seconds": MAX_SECONDS, "release": str(release)})

        def block(pause: ServerPause) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=MAX_SECONDS + 60)
            try:
                auth = {"Authorization": f"token {self.token}"}
                conn.request("GET", f"/{BLOCK_PATH}?{query}", headers=auth)
                response = conn.getresponse()
                body = response.read()  # sent before the block (Content-Length)
                if response.status != 200:
                    raise ServerError(f"block: HTTP {response.status}: {body[:200]!r}")
                pause.started.set()
                try:
                    if on_started is not None:
                        on_started()
                    hold_until(seconds, until, pause.what)
                finally:
                    release.touch()
                # The loop handles requests one at a time: this one is answered only once
                # the block is over.
                self.api("GET", "api/status", timeout=MAX_SECONDS + 60)
            finally:
                conn.close()

        return ServerPause.run(_pause_name("block the event loop", seconds, until), block)

    def stop_process(
        self,
        seconds: float,
        until: Callable[[], bool] | None = None,
        on_started: Callable[[], None] | None = None,
    ) -> ServerPause:
        """SIGSTOP the server process (not its kernels) for ``seconds``, and then, if ``until``
        is given, until ``until()`` is true (see :func:`hold_until`); then SIGCONT.

        Returns at once; the pause runs in a thread, ``started`` is set after SIGSTOP, and
        ``on_started()`` is called then (in that thread).
        """
        assert self.proc is not None
        pid = self.proc.pid

        def stop_then_continue(pause: ServerPause) -> None:
            os.kill(pid, signal.SIGSTOP)
            try:
                pause.started.set()
                if on_started is not None:
                    on_started()
                hold_until(seconds, until, pause.what)
            finally:
                os.kill(pid, signal.SIGCONT)

        return ServerPause.run(_pause_name("SIGSTOP", seconds, until), stop_then_continue)

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


#: How long a pause may wait for its ``until`` before it is over anyway and fails: a hang guard.
UNTIL_TIMEOUT = 120.0


def hold_until(seconds: float, until: Callable[[], bool] | None, what: str) -> None:
    """Wait ``seconds``, then until ``until()`` is true (asked every 50 ms; None: no wait).

    What a pause whose point is its effect waits for: a test that needs the kernel to have
    held messages back for the paused server asks the kernel's own counters, so the pause
    lasts as long as this machine needs, never a length guessed for it. Raises after
    :data:`UNTIL_TIMEOUT` s (the caller's pause then ends as usual, and ``join`` re-raises).
    """
    time.sleep(seconds)
    if until is not None:
        wait_until(until, UNTIL_TIMEOUT, f"{what}: its condition ({until.__name__})")


def _pause_name(what: str, seconds: float, until: Callable[[], bool] | None) -> str:
    return f"{what} {seconds} s" + ("" if until is None else f" and until {until.__name__}")


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
