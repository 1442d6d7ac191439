"""A subprocess with a log: its output in a file of a temporary folder of its own.

The base of :class:`harness.server.JupyterServer`, :class:`harness.voila.StandaloneVoila` and
:class:`harness.gateway.EnterpriseGateway`. It owns the folder (made when the object is, and
removed by :meth:`LoggedProcess.stop` unless ``IPYKERNEL_EXT_KEEP_SERVER_DIRS=1``), the log in
it (stdout and stderr, read by :meth:`~LoggedProcess.log_text`), the process's start (stdin
closed; stopped again if it never comes up) and its stop (SIGTERM, then SIGKILL after
``stop_timeout`` s), and the context manager. What runs, with what environment, where, and how
it is known to be up, is each subclass's: :meth:`~LoggedProcess.command`,
:meth:`~LoggedProcess.environment`, :meth:`~LoggedProcess.working_dir` and
:meth:`~LoggedProcess.wait_until_up`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Self


class LoggedProcess:
    """A process started by :meth:`start` (or ``with``), its log in ``self.log_path``.

    ``tmp_prefix`` names its temporary folder (``self._tmp``), ``log_name`` its log there.
    """

    def __init__(self, *, tmp_prefix: str, log_name: str, stop_timeout: float) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix=tmp_prefix))
        self.log_path = self._tmp / log_name
        #: how long :meth:`stop` waits after SIGTERM before it kills the process
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen[bytes] | None = None

    # what the subclass says -----------------------------------------------------------

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        raise NotImplementedError

    def working_dir(self) -> Path:
        """Where the process runs: its temporary folder unless the subclass says otherwise."""
        return self._tmp

    def wait_until_up(self) -> None:
        """Return once the process serves; raise if it exited or is not up in time."""
        raise NotImplementedError

    # lifecycle ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> Self:
        """Start :meth:`command`, its output into the log; return once it is up (stopped
        again, and the error raised, if it is not). After :meth:`kill`, starts it again."""
        # Appended: a process started again after :meth:`kill` keeps the first one's log.
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.working_dir(),
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self.wait_until_up()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM, SIGKILL after ``stop_timeout`` s; then remove the temporary folder.

        A process killed so is named in the run's warnings with its log's last lines: a
        test module's teardown that waits out the whole ``stop_timeout`` (30 s, seen only
        under xdist in the full run) shows which process did not end and why."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            deadline = time.monotonic() + self.stop_timeout
            while True:
                try:
                    self.proc.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if self.known_stop_hang():
                        self.proc.kill()  # not worth a warning: known, and named there
                        self.proc.wait(timeout=10)
                        break
                    if time.monotonic() < deadline:
                        continue
                    tail = self.log_tail(15)
                    self.proc.kill()
                    self.proc.wait(timeout=10)
                    warnings.warn(
                        f"{type(self).__name__} (pid {self.proc.pid}) did not end "
                        f"{self.stop_timeout:g} s after SIGTERM and was killed; its log "
                        f"ended:\n{tail}",
                        stacklevel=2,
                    )
                    break
        if os.environ.get("IPYKERNEL_EXT_KEEP_SERVER_DIRS") != "1":
            shutil.rmtree(self._tmp, ignore_errors=True)

    def known_stop_hang(self) -> bool:
        """Whether the process, told to stop, is stuck where it is known to hang (then it is
        killed at once, without a warning); none by default."""
        return False

    def kill(self) -> None:
        """SIGKILL, as a crash or an out-of-memory kill would end it: nothing of its own
        runs; the folder stays, so :meth:`start` can start it again on the same state."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # the log --------------------------------------------------------------------------

    def log_text(self) -> str:
        """Everything the process wrote so far ("" once its folder is gone)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
