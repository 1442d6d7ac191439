"""Standalone Voila (``voila NOTEBOOK``) in a subprocess, configured as a user's install has it.

What is real: ``python -m voila NOTEBOOK --no-browser`` as a user runs it (Voila's own
traitlets application and tornado app, no jupyter_server extension loaded), and its config
written by ``python -m ipykernel_ext install --prefix PREFIX`` (:func:`install_prefix`), found
through ``JUPYTER_CONFIG_PATH=PREFIX/etc/jupyter`` as Voila finds a ``{sys.prefix}/etc/jupyter``.
Every other directory Jupyter reads or writes (config, data, runtime, IPython) is a fresh
temporary one, as in :mod:`.server`; kernelspecs are still found in ``sys.prefix``. The working
directory is the notebook's folder (Voila reads a ``voila.json`` there too)::

    prefix = install_prefix(tmp_path / "prefix")
    with StandaloneVoila(notebook, config_path=prefix / "etc" / "jupyter") as voila:
        page.goto(voila.url)
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .polling import wait_until

#: What Voila logs once it listens ("Voilà is running at:", then the address).
RUNNING = " is running at:"


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
    """A TCP port free on 127.0.0.1 now (Voila takes ``--port``, not 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StandaloneVoila:
    """``voila NOTEBOOK`` on 127.0.0.1, its config path ``config_path`` (None: none added),
    with ``extra_args`` on its command line."""

    def __init__(
        self,
        notebook: Path,
        config_path: Path | None = None,
        extra_args: Iterable[str] = (),
        startup_timeout: float = 120,
    ) -> None:
        self.notebook = notebook
        self.config_path = config_path
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self._tmp = Path(tempfile.mkdtemp(prefix="ipykernel-ext-voila-"))
        self.log_path = self._tmp / "voila.log"
        self.proc: subprocess.Popen[bytes] | None = None

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

    def start(self) -> StandaloneVoila:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.notebook.parent,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(self._running, self.startup_timeout, "Voila listening", interval=0.2)
        except BaseException:
            self.stop()
            raise
        return self

    def _running(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"voila exited with {self.proc.returncode}:\n{self.log_text()}")
        return RUNNING in self.log_text()

    def stop(self) -> None:
        """SIGTERM (Voila shuts its kernels down), then remove the temp dirs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if os.environ.get("IPYKERNEL_EXT_KEEP_SERVER_DIRS") != "1":
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> StandaloneVoila:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""
