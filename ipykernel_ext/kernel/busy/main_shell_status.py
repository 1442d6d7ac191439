"""What the kernel last published about its main shell, and when to say ``busy`` again.

:class:`MainShellStatus` is written from the main shell's own ``busy``/``idle`` statuses, so
it is exactly what jupyter_server and frontends were told. :mod:`.busy_routing` decides from
it what to answer on the shell-channel thread; ``ExtKernel._publish_status`` asks
:meth:`MainShellStatus.busy_again_after` whether an ``idle`` published beside the running
cell (control, a subshell, an answer given mid-cell) is followed by ``busy`` for that cell.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ...protocol import UNTRACKED_MESSAGE_TYPES


class MainShellStatus:
    """The main shell's state as the kernel last published it on IOPub.

    Written by the main shell's thread each time it publishes ``busy`` or ``idle``; read from
    the shell-channel thread (what to answer there) and from every thread that publishes an
    ``idle`` beside the main shell: control, subshells', the shell-channel thread's answers
    (one reference assignment: never torn).
    """

    def __init__(self) -> None:
        #: the main shell's thread: set once, by the kernel's ``start``, before any message
        self.thread: threading.Thread | None = None
        #: the request the main shell is busy with (its full message), or None
        self.running: dict[str, Any] | None = None
        # Held while the main shell publishes a status and records it, and while another
        # thread decides on and publishes its "busy again": without it, that thread could
        # read the cell as running between the main shell's idle and its record, and
        # publish a busy for the cell after the cell's own idle (and frontends would show the
        # kernel busy until its next status).
        self._lock = threading.Lock()

    def record(self, status: str, parent: dict[str, Any]) -> None:
        self.running = parent if status == "busy" and parent else None

    def main_shell_published(
        self, status: str, parent: dict[str, Any], publish: Callable[[], None]
    ) -> None:
        """The main shell publishes ``status`` (``publish()``) and records it, as one step."""
        with self._lock:
            publish()
            self.record(status, parent)

    def idle_published_beside(
        self, ended: Any, channel: str, publish_busy: Callable[[dict[str, Any]], None]
    ) -> None:
        """After an ``idle`` for ``ended`` published beside the main shell: publish ``busy``
        for the running request if :meth:`busy_again_after` says so, as one step with the
        main shell's own publish-and-record (never after the running cell's idle)."""
        with self._lock:
            running = self.busy_again_after(ended, channel)
            if running is not None:
                publish_busy(running)

    def busy_again_now(self, publish_busy: Callable[[dict[str, Any]], None]) -> None:
        """``busy`` for the running request, if any, whoever ended (a comm message handled
        mid-cell by the main shell itself), as one step with the main shell's own
        publish-and-record."""
        with self._lock:
            running = self.running
            if running is not None:
                publish_busy(running)

    def is_main_thread(self) -> bool:
        return threading.current_thread() is self.thread

    @property
    def busy(self) -> bool:
        return self.running is not None

    def busy_again_after(self, ended: Any, channel: str) -> dict[str, Any] | None:
        """After an ``idle`` for ``ended`` published beside the main shell on ``channel``
        (control, a subshell, an answer given here): the running request to publish ``busy``
        for, or None.

        jupyter_server, and JupyterLab's status bar, take the kernel's state from every status
        whose parent type the server tracks; left alone, such an ``idle`` shows a running kernel
        idle to everyone. So ``busy`` follows, except where stock's statuses are kept for the
        client whose request the main shell runs (ipykernel's own tests count them):

        * its cells on a subshell (an ``execute_request`` on ``channel`` "shell"): that
          client runs cells side by side and sees the kernel idle until the main cell's
          next status, as on stock;
        * its requests of a type the server does not track (the default of its
          ``untracked_message_types``, ``protocol.UNTRACKED_MESSAGE_TYPES``: ``debug_request``
          at a breakpoint, ``kernel_info_request``): nobody takes the state from their ``idle``.

        Its other requests (JupyterLab's ``create_subshell_request`` on control, the comm
        messages it sends on a subshell when a widget is moved mid-cell) and every request of
        another client (a page reloaded mid-cell, whose ``kernel_info_request`` answered here
        gives it its first Busy) are followed by ``busy``.
        """
        running = self.running
        if running is None:
            return None
        session = _session_of(ended)
        if session is None or session != _session_of(running):
            return running
        msg_type = _msg_type_of(ended)
        if msg_type in UNTRACKED_MESSAGE_TYPES:
            return None
        if channel == "shell" and msg_type == "execute_request":
            return None
        return running


def _session_of(msg: Any) -> str | None:
    """The client (``header.session``) that sent ``msg``; None if it names none."""
    header = msg.get("header") if isinstance(msg, dict) else None
    session = header.get("session") if isinstance(header, dict) else None
    return session if isinstance(session, str) and session else None


def _msg_type_of(msg: Any) -> str | None:
    """``header.msg_type`` of ``msg``; None if it has none."""
    header = msg.get("header") if isinstance(msg, dict) else None
    msg_type = header.get("msg_type") if isinstance(header, dict) else None
    return msg_type if isinstance(msg_type, str) else None
