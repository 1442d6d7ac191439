"""What the kernel last published about its main shell, and when to say ``busy`` again.

:class:`MainShellStatus` is written from the main shell's own ``busy``/``idle`` statuses, so
it is exactly what jupyter_server and frontends were told. :mod:`.busy_routing` decides from
it what to answer on the shell-channel thread; ``ExtKernel._publish_status`` asks
:meth:`MainShellStatus.busy_again_after` whether an ``idle`` published beside the running
cell (control, a subshell, an answer given mid-cell) is followed by ``busy`` for that cell:
only when it ends a request of another client than the cell's, whose statuses stay stock's.
"""

from __future__ import annotations

import threading
from typing import Any


class MainShellStatus:
    """The main shell's state as the kernel last published it on IOPub.

    Written by the main shell's thread each time it publishes ``busy`` or ``idle``; read from
    the shell-channel, control and IOPub threads (one reference assignment: never torn).
    """

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        #: the request the main shell is busy with (its full message), or None
        self.running: dict[str, Any] | None = None

    def record(self, status: str, parent: dict[str, Any]) -> None:
        self.running = parent if status == "busy" and parent else None

    def is_main_thread(self) -> bool:
        return threading.current_thread() is self.thread

    @property
    def busy(self) -> bool:
        return self.running is not None

    def busy_again_after(self, ended: Any) -> dict[str, Any] | None:
        """After an ``idle`` for ``ended`` published beside the main shell (control, a
        subshell, an answer given here): the running request to publish ``busy`` for, or None.

        None when the main shell is idle, and when ``ended`` comes from the client whose
        request the main shell runs: that client sees stock's statuses (ipykernel's own tests
        count them); it sent the cell and waits for its idle. Any other client, a page
        reloaded mid-cell included, gets ``busy`` again, so jupyter_server and JupyterLab,
        which take the kernel's state from a status whose parent type they track, do not
        show a running kernel idle after that client's request.
        """
        running = self.running
        if running is None:
            return None
        session = _session_of(ended)
        if session is not None and session == _session_of(running):
            return None
        return running


def _session_of(msg: Any) -> str | None:
    """The client (``header.session``) that sent ``msg``; None if it names none."""
    header = msg.get("header") if isinstance(msg, dict) else None
    session = header.get("session") if isinstance(header, dict) else None
    return session if isinstance(session, str) and session else None
