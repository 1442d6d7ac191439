"""Standalone Voila (``voila NOTEBOOK``) in a subprocess, configured as a user's install has it.

What is real: ``python -m voila NOTEBOOK --no-browser`` as a user runs it (Voila's own
traitlets application and tornado app, no jupyter_server extension loaded), and its config
written by ``python -m ipykernel_ext install --prefix PREFIX`` (:func:`install_prefix`), found
through ``JUPYTER_CONFIG_PATH=PREFIX/etc/jupyter`` as Voila finds a ``{sys.prefix}/etc/jupyter``.
Every other directory Jupyter reads or writes (config, data, runtime, IPython) is a fresh
temporary one, as in :mod:`.server` (the folder of :class:`.logged_process.LoggedProcess`,
which also holds Voila's log and starts and stops it); kernelspecs are still found in
``sys.prefix``. The working directory is the notebook's folder (Voila reads a ``voila.json``
there too)::

    prefix = install_prefix(tmp_path / "prefix")
    with StandaloneVoila(notebook, config_path=prefix / "etc" / "jupyter") as voila:
        page.goto(voila.url)
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from .browser import VOILA_IOPUB_WAIT
from .logged_process import LoggedProcess
from .polling import wait_until

#: What Voila logs once it listens ("Voilà is running at:", then the address).
RUNNING = " is running at:"
#: The address, on the line after :data:`RUNNING`: its port is the one Voila took.
LISTENING = re.compile(re.escape(RUNNING) + r"\s*http://[^\s:/]+:(\d+)/")


def install_prefix(prefix: Path) -> Path:
    """Run ``python -m ipykernel_ext install --prefix prefix`` (the kernelspec and standalone
    Voila's ``voila.json`` under it, as a user's install writes them); return ``prefix``."""
    subprocess.run(
        [sys.executable, "-m", "ipykernel_ext", "install", "--prefix", str(prefix)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return prefix


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (Voila takes ``--port``, not 0; it may be taken by the
    time Voila binds it, and Voila then tries the next ones: see ``wait_until_up``)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StandaloneVoila(LoggedProcess):
    """``voila NOTEBOOK`` on 127.0.0.1, its config path ``config_path`` (None: none added),
    with ``extra_args`` on its command line. Stopped by SIGTERM (Voila shuts its kernels
    down), killed after 60 s."""

    def __init__(
        self,
        notebook: Path,
        config_path: Path | None = None,
        extra_args: Iterable[str] = (),
        startup_timeout: float = 120,
    ) -> None:
        super().__init__(tmp_prefix="ipykernel-ext-voila-", log_name="voila.log", stop_timeout=60)
        self.notebook = notebook
        self.config_path = config_path
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.port = free_port()

    @property
    def url(self) -> str:
        """The dashboard's address."""
        return f"http://127.0.0.1:{self.port}/"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "voila",
            self.notebook.name,
            "--no-browser",
            f"--port={self.port}",
            "--Voila.ip=127.0.0.1",
            VOILA_IOPUB_WAIT,
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("config", "data", "runtime", "ipython"):
            (self._tmp / name).mkdir(exist_ok=True)
        env.update(
            JUPYTER_CONFIG_DIR=str(self._tmp / "config"),
            JUPYTER_DATA_DIR=str(self._tmp / "data"),
            JUPYTER_RUNTIME_DIR=str(self._tmp / "runtime"),
            JUPYTER_PLATFORM_DIRS="1",
            IPYTHONDIR=str(self._tmp / "ipython"),
            PYTHONUNBUFFERED="1",
        )
        env.pop("JUPYTER_CONFIG_PATH", None)
        if self.config_path is not None:
            env["JUPYTER_CONFIG_PATH"] = str(self.config_path)
        return env

    def working_dir(self) -> Path:
        return self.notebook.parent

    def wait_until_up(self) -> None:
        wait_until(self._listening, self.startup_timeout, "Voila listening", interval=0.2)
        # The port Voila took: when another process bound ``--port`` first (another test
        # worker's kernel, say), Voila tries the next ones and says which one it listens on.
        listening = LISTENING.search(self.log_text())
        assert listening is not None, self.log_text()[-2000:]
        self.port = int(listening.group(1))

    def _listening(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"voila exited with {self.proc.returncode}:\n{self.log_text()}")
        return RUNNING in self.log_text()
