"""The comm path on the main shell: :class:`CommsOnMainShell`, the mixin ``ExtKernel`` inherits.

One room for it (:mod:`ipykernel_ext.kernel.comms`): the shell-channel thread's decision for a
comm message (:class:`~.comm_routing.CommRouting`, made once per message), its wait in the
:class:`~.comm_routing.CommInbox` behind a marker in the main shell's queue, the main shell meeting
the marker (:meth:`CommsOnMainShell.shell_main`), and the message handled mid-cell while the
cell waits (:mod:`.mid_cell`): awaited by an async cell, from a blocking cell's
:func:`~.comm_routing.handle_waiting_comms` on the main thread, from jupyter-ui-poll's thread.

The kernel gives two things it owns: which thread is the main shell's
(:meth:`CommsOnMainShell._on_main_shell_thread`) and what follows a mid-cell comm's ``idle``
(:meth:`CommsOnMainShell._comm_idle_mid_cell`: ``busy`` for the cell, from the busy room).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Coroutine
from contextvars import copy_context
from typing import Any

import zmq
from ipykernel.ipkernel import IPythonKernel
from ipykernel.subshell import SubshellThread

from ...protocol import split_frames
from .cell_events import held_cell_events
from .comm_routing import CommInbox, CommRouting, InboxEntry, OnSubshell, Routed
from .mid_cell import MidCellComm, handling_mid_cell, run_now
from .mid_cell import current as current_mid_cell_comm


class CommsOnMainShell(IPythonKernel):
    """IPythonKernel whose comm messages wait for the main shell (PROTOCOL.md section 7).

    ``comm_routing`` and ``comm_inbox`` are set by the kernel's ``__init__``.
    """

    comm_routing: CommRouting
    comm_inbox: CommInbox

    def route_comm(
        self, msg: list[Any], frames: list[Any], routed: Routed | OnSubshell | None
    ) -> bool:
        """On the shell-channel thread: send a comm message where ``routed`` (the one decision
        for it, :meth:`CommRouting.route`) says; True if sent. For the main shell:
        the message waits in the inbox and its marker takes its place in the main shell's
        queue, so the main shell meets it in arrival order. To a subshell (a concurrent
        target's, a subshell console's comm): straight there, as it came; a console gone since:
        the main shell. Else (False): stock's routing.
        """
        if routed is None:
            return False
        manager = self.shell_channel_thread.manager
        if isinstance(routed, OnSubshell):
            try:
                socket = manager.get_shell_channel_to_subshell_socket(routed.subshell_id)
            except Exception:
                if not routed.or_main_shell:
                    return False  # no such subshell: stock's routing answers as stock does
                routed = Routed(None)
            else:
                socket.send_multipart(msg, copy=False)
                return True
        marker = self.comm_inbox.put(msg, routed)
        manager.get_shell_channel_to_subshell_socket(None).send_multipart(marker)
        return True

    async def shell_main(self, subshell_id: str | None, msg: list[Any]) -> None:
        """Handle a shell message as stock does; at a marker, the comm message it stands for."""
        number = CommInbox.marker_number(msg) if subshell_id is None else None
        if number is None:
            await super().shell_main(subshell_id, msg)
            return
        waiting = self.comm_inbox.take(number)
        if waiting is None:
            return  # handled mid-cell already
        lock = self._main_asyncio_lock
        if not isinstance(lock, asyncio.Lock) or lock.locked():
            # An async cell is awaiting (or jupyter-ui-poll's async loop, which swaps the lock
            # out): handled now, as stock handles a comm message on the main shell then (a
            # cell that awaits a widget change gets it).
            await self._handle_comm_mid_cell(waiting)
            return
        async with lock:
            msg, subshell_id = self._as_main_shell_message(*waiting)
            await self.dispatch_shell(msg, subshell_id=subshell_id)

    def handle_waiting_comms_now(self) -> int:
        """Handle the comm messages waiting for the main shell, on the main thread, now.

        :func:`~.comm_routing.handle_waiting_comms` from a blocking cell: one message at a
        time, oldest first, so a callback that calls it again goes on with the next one
        (arrival order holds), and whatever a callback raises past ``dispatch_shell``
        (``SystemExit``) leaves the rest waiting. An interrupt that reaches a callback stops
        the cell too (``KeyboardInterrupt`` here); the rest wait for their markers.
        From any other thread: nothing, 0 (a subshell's cell never runs the main shell's
        callbacks beside the main cell).
        """
        if not self._on_main_shell_thread():
            return 0
        handled = 0
        while (waiting := self.comm_inbox.take_next()) is not None:
            mid = self._run_comm_mid_cell(waiting, run_now)
            handled += 1
            if mid.interrupted:
                raise KeyboardInterrupt("interrupted in a comm callback")
        return handled

    async def do_one_iteration(self) -> int:
        """Handle the comm messages waiting for the main shell now, mid-cell; return how many.

        ipykernel 6's name. Awaited on the main thread (an async cell): each is handled there,
        one at a time. jupyter-ui-poll's ``ui_events()`` awaits it on a thread of its own while
        the blocked cell waits for it (a handoff, never two at once): handled there. From a
        subshell's thread (or the kernel's other threads): nothing, 0.
        """
        if not self._on_main_shell_thread() and self._on_a_kernel_thread():
            return 0
        handled = 0
        while (waiting := self.comm_inbox.take_next()) is not None:
            await self._handle_comm_mid_cell(waiting)
            handled += 1
        return handled

    def _on_a_kernel_thread(self) -> bool:
        """Whether this thread is one of the kernel's own: a subshell's, control, shell channel."""
        thread = threading.current_thread()
        own = (getattr(self, "control_thread", None), getattr(self, "shell_channel_thread", None))
        return isinstance(thread, SubshellThread) or thread in own

    async def _handle_comm_mid_cell(self, waiting: InboxEntry) -> MidCellComm:
        """Handle a comm message while an async cell awaits (or ui_events' thread waits)."""

        async def in_a_task(dispatch: Coroutine[Any, Any, MidCellComm]) -> MidCellComm:
            return await asyncio.create_task(dispatch, context=copy_context())

        return await in_a_task(self._dispatch_mid_cell(*self._as_main_shell_message(*waiting)))

    def _run_comm_mid_cell(
        self, waiting: InboxEntry, run: Callable[[Coroutine[Any, Any, MidCellComm]], MidCellComm]
    ) -> MidCellComm:
        """Handle a comm message on this thread now, in a copy of the cell's context."""
        dispatch = self._dispatch_mid_cell(*self._as_main_shell_message(*waiting))
        return copy_context().run(run, dispatch)

    async def _dispatch_mid_cell(self, msg: list[Any], subshell_id: str | None) -> MidCellComm:
        """Dispatch a comm message mid-cell (:mod:`.mid_cell`), then give the cell its
        parent back: its own ``busy`` (:meth:`should_handle`) and ``idle``, the cell's
        ``pre_execute``/``post_execute`` held."""
        parent = self.get_parent("shell")
        ident = self._get_shell_context_var(self._shell_parent_ident)
        try:
            with held_cell_events(), handling_mid_cell() as mid:
                try:
                    await self.dispatch_shell(msg, subshell_id=subshell_id, concurrent=True)
                finally:
                    if mid.parent is not None:
                        # Its outputs before its idle, as dispatch_shell flushes at rest.
                        for stream in (sys.stdout, sys.stderr):
                            if stream is not None:
                                stream.flush()
                        self._publish_mid_cell_status("idle", mid.parent)
        finally:
            self.set_parent(ident, parent, channel="shell")
        return mid

    def should_handle(self, stream: Any, msg: dict[str, Any], idents: list[Any]) -> Any:
        """As stock; a comm message handled mid-cell publishes its ``busy`` here, verified,
        before its ``comm_echo`` (``dispatch_shell`` publishes none for it)."""
        mid = current_mid_cell_comm()
        if mid is not None and mid.parent is None:
            mid.parent = msg
            self._publish_mid_cell_status("busy", msg)
        return super().should_handle(stream, msg, idents)

    def _publish_mid_cell_status(self, status: str, parent: dict[str, Any]) -> None:
        """The status of a comm message handled mid-cell, then ``busy`` again for the cell.

        Published as stock publishes a status, not as the main shell's own: the cell still
        runs (:meth:`_comm_idle_mid_cell` says so after the idle).
        """
        super()._publish_status(status, "shell", parent)
        if status == "idle":
            self._comm_idle_mid_cell(parent)

    def _on_main_shell_thread(self) -> bool:
        """Whether this is the main shell's thread (the kernel knows which)."""
        raise NotImplementedError

    def _comm_idle_mid_cell(self, parent: dict[str, Any]) -> None:
        """After the ``idle`` of a comm message handled mid-cell: ``busy`` for the cell."""
        raise NotImplementedError

    def _as_main_shell_message(
        self, msg: list[Any], routed: Routed
    ) -> tuple[list[Any], str | None]:
        """``msg`` and the subshell id to dispatch it with on the main shell.

        The id (a ``comm_open``'s own, :class:`Routed`) only picks the socket a reply would go
        to, and comm messages have no reply. A subshell deleted since, or a request whose reply
        the main shell sends (``Routed.resign``): the message is signed again without it, so
        that it is still handled.
        """
        subshell_id = routed.subshell_id
        alive = (
            subshell_id is None or subshell_id in self.shell_channel_thread.manager.list_subshell()
        )
        if alive and not routed.resign:
            return msg, subshell_id
        assert self.session is not None
        split = split_frames(msg)
        if split is None:  # (not framed: never routed here)
            return msg, None
        try:
            request = self.session.deserialize(split.parts, content=True, copy=False)
        except Exception:
            return msg, None  # refused by dispatch_shell's own check, logged as stock does
        request["header"].pop("subshell_id", None)
        # As the main shell's stream delivers them (copy=False): frames, not bytes.
        return [
            zmq.Frame(part) for part in self.session.serialize(request, ident=split.identities)
        ], None
