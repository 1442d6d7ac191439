"""Which shell messages are answered on the shell-channel thread, and each client's order.

:class:`BusyRouting` decides, for every shell message the shell-channel thread receives,
whether :class:`~.answers.BusyAnswers` answers it right there or stock's routing takes it
to the main shell (or a subshell). It reads the header (and, for comm messages, the content)
*before* verification; that only picks the path: a claimed message is verified before
anything is answered.

Claimed while the main shell is busy (what :class:`~.main_shell_status.MainShellStatus` last
published): ``kernel_info_request`` and ``comm_info_request`` for the main shell, and
ipywidgets' control comm (a ``comm_open`` ipywidgets would accept, a ``request_states`` on a
control comm the main shell opened before the cell). Messages on a control comm opened here
stay here until it is closed, busy or not. When the main shell is idle nothing else is
claimed, so replies keep stock's order.

Nor is a client's own order changed (a client is its ``header.session``): its info requests
are not claimed while anything it sent to the main shell before is queued or running there,
and its control comm message not while a cell (or comm message) of its own is: that client
expects the states after it, as stock answers. A reloaded page is a new session: answered at
once. The main shell tells :meth:`BusyRouting.finished` as it goes idle for each request.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

from ...protocol import COMM_MSG_TYPES, CONTENT, CONTROL_COMM_TARGET, HEADER, METADATA, peek
from ..widgets.control_comm import REQUEST_STATES
from ..widgets.snapshot import widget_module
from .main_shell_status import MainShellStatus

#: The control comm's protocol major version answered here (that of ipywidgets'
#: ``__control_protocol_version__``, which ``Widget.handle_control_comm_opened`` requires).
CONTROL_PROTOCOL_MAJOR = "1"

#: Requests answered here while the main shell is busy (and the message is for the main shell),
#: unless their client has a message of its own queued or running there: never overtaken.
INFO_REQUESTS = frozenset({"kernel_info_request", "comm_info_request"})
#: Shell messages that run user code, hence may create or change widgets: a client's control
#: comm request never overtakes one of these that the same client sent before it.
USER_CODE_MSG_TYPES = frozenset({"execute_request", *COMM_MSG_TYPES})


class BusyRouting:
    """Which shell messages the shell-channel thread answers itself, in each client's order.

    ``session`` unpacks the frames (as the kernel's session does), ``comm_manager`` is the
    kernel's, ``status`` what the main shell last published, and ``opened_here`` the ids of
    the control comms opened on the shell-channel thread and not closed yet.
    """

    def __init__(
        self,
        session: Any,
        comm_manager: Any,
        status: MainShellStatus,
        opened_here: Collection[str],
    ) -> None:
        self.session = session
        self.comm_manager = comm_manager
        self.status = status
        self.opened_here = opened_here
        #: session -> msg_id of the last user-code message (USER_CODE_MSG_TYPES) it sent to
        #: the main shell, while the main shell has not finished it. Written by the
        #: shell-channel thread (routing) and the main thread (its idle), under the lock.
        self._unfinished: dict[str, str] = {}
        #: the same for the last message of any type it sent to the main shell.
        self._queued: dict[str, str] = {}
        self._unfinished_lock = threading.Lock()

    def claims(self, frames: list[Any], comm_to_main_shell: bool = False) -> bool:
        """Whether the (not yet verified) shell message in ``frames`` is answered here.

        A message not claimed goes on to stock's routing; if it runs user code on the main
        shell, its sender is noted until the main shell has finished it (:meth:`finished`).
        ``comm_to_main_shell``: the kernel decided (once, ``CommRouting.route``) that this comm
        message goes to the main shell whatever subshell it names: then it is queued there
        like any other.
        """
        header = peek(self.session, frames, HEADER)
        if not isinstance(header, dict):
            return False
        claimed = self._claims(frames, header)
        if not claimed:
            self._note_routed(header, comm_to_main_shell)
        return claimed

    def _claims(self, frames: list[Any], header: dict[str, Any]) -> bool:
        msg_type = header.get("msg_type")
        if msg_type in INFO_REQUESTS:
            # For the main shell only: a subshell is not blocked by the cell. Never ahead of
            # what the same client sent to the main shell before (stock's reply order).
            return (
                self.status.busy
                and not header.get("subshell_id")
                and header.get("session") not in self._queued
            )
        if msg_type not in COMM_MSG_TYPES or not (self.status.busy or self.opened_here):
            return False  # the common case (idle, no control comm of ours): no content read
        content = peek(self.session, frames, CONTENT)
        if not isinstance(content, dict):
            return False
        comm_id = content.get("comm_id")
        if not isinstance(comm_id, str):
            return False
        if comm_id in self.opened_here:
            return True  # a control comm opened here stays here until it is closed
        if not self.status.busy:
            return False
        if header.get("session") in self._unfinished:
            # The sender's own cell (or comm message) is queued or running on the main shell:
            # it expects the states after it, as stock answers; e.g. a cell that creates
            # widgets and then the request. A reloaded page is a new session: not held back.
            return False
        if msg_type == "comm_open":
            return self._is_control_comm_open(frames, content)
        if msg_type == "comm_msg":
            # A control comm the main thread opened before the cell: answer its request too.
            comm = self.comm_manager.comms.get(comm_id)
            data = content.get("data")
            return (
                getattr(comm, "target_name", None) == CONTROL_COMM_TARGET
                and isinstance(data, dict)
                and data.get("method") == REQUEST_STATES
            )
        return False

    def _is_control_comm_open(self, frames: list[Any], content: dict[str, Any]) -> bool:
        """A comm_open that ipywidgets would accept on the main thread, and nothing else."""
        if content.get("target_name") != CONTROL_COMM_TARGET:
            return False
        if widget_module() is None:
            return False  # no widgets in this kernel: stock says "no such target"
        if CONTROL_COMM_TARGET not in self.comm_manager.targets:
            return False
        metadata = peek(self.session, frames, METADATA)
        version = metadata.get("version", "") if isinstance(metadata, dict) else ""
        # Another major version: ipywidgets refuses it and closes the comm; leave that to it.
        return isinstance(version, str) and version.split(".")[0] == CONTROL_PROTOCOL_MAJOR

    def _note_routed(self, header: dict[str, Any], comm_to_main_shell: bool) -> None:
        if header.get("subshell_id") and not comm_to_main_shell:
            return
        session, msg_id = header.get("session"), header.get("msg_id")
        # An empty session names no client: it holds nobody back.
        if session and isinstance(session, str) and isinstance(msg_id, str):
            with self._unfinished_lock:
                self._queued[session] = msg_id
                if header.get("msg_type") in USER_CODE_MSG_TYPES:
                    self._unfinished[session] = msg_id

    def finished(self, parent: dict[str, Any] | None) -> None:
        """On the main thread, as it publishes ``idle`` for ``parent``: the sender of ``parent``
        has nothing unfinished left on the main shell if it was the last one it sent.

        A message the main shell never finishes with an ``idle`` (one that fails verification,
        a comm message handled beside an async cell) leaves its sender noted until its next
        one is finished; meanwhile that sender's info requests and control comm take stock's
        path, in order.
        """
        header = parent.get("header") if isinstance(parent, dict) else None
        if not isinstance(header, dict):
            return
        session, msg_id = header.get("session"), header.get("msg_id")
        with self._unfinished_lock:
            for noted in (self._unfinished, self._queued):
                if session in noted and noted[session] == msg_id:
                    del noted[session]
