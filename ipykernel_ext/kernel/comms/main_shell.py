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
from ipykernel.subshell import SubshellThread

from ...protocol import split_frames
from .cell_events import callback_figures, held_cell_events
from .comm_routing import CommInbox, CommRouting, OnSubshell, Routed, Waiting, forget_reply_route
from .mid_cell import MidCellComm, handling_mid_cell, run_now
from .mid_cell import current as current_mid_cell_comm
from .one_callback import CallbackGate, InterruptCount, InterruptibleInputs
from .subshell_sends import SubshellSends


class CommsOnMainShell(InterruptibleInputs):
    """IPythonKernel whose comm messages wait for the main shell (PROTOCOL.md section 7).

    ``comm_routing`` and ``comm_inbox`` are set by the kernel's ``__init__``.
    """

    comm_routing: CommRouting
    comm_inbox: CommInbox
    #: held by a dispatch off the main shell's thread (jupyter-ui-poll's): .one_callback
    callback_gate: CallbackGate
    #: the interrupts the main thread took while handling a request: .one_callback
    interrupt_count: InterruptCount
    #: sends to a subshell's queue that never block the shell-channel thread
    subshell_sends: SubshellSends

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
                self.subshell_sends.send(routed.subshell_id, socket, msg)
                return True
        marker = self.comm_inbox.put(msg, routed)
        if marker is not None:  # (else it joins the batch whose marker is queued already)
            manager.get_shell_channel_to_subshell_socket(None).send_multipart(marker)
        return True

    def _queue_marker(self, marker: list[bytes]) -> None:
        """Queue a marker for the main shell from any thread: the shell-channel thread is the
        only one that sends on that socket."""
        manager = self.shell_channel_thread.manager
        self.shell_channel_thread.io_loop.add_callback(
            lambda: manager.get_shell_channel_to_subshell_socket(None).send_multipart(marker)
        )

    #: the main shell's messages being handled or waiting for its lock (tasks of shell_main)
    _main_shell_tasks = 0

    async def shell_main(self, subshell_id: str | None, msg: list[Any]) -> None:
        """Handle a shell message as stock does; at a marker, the comm messages of its batch."""
        if subshell_id is not None:
            await super().shell_main(subshell_id, msg)
            return
        number = CommInbox.marker_number(msg)
        self._main_shell_tasks += 1
        try:
            if number is None:
                await super().shell_main(subshell_id, msg)
            else:
                self.comm_inbox.met(number)
                await self._handle_met_comms()
        finally:
            self._main_shell_tasks -= 1

    async def _handle_met_comms(self) -> None:
        """At a marker: handle every waiting comm message whose marker was met, oldest first.

        Each is taken from the inbox only once the main shell's lock is held (or its holder
        awaits), so one never waits, out of the inbox, behind a request that came after it:
        an async cell that awaits, or calls ``handle_waiting_comms()``, still finds it.
        """
        while True:
            lock = self._main_asyncio_lock
            if isinstance(lock, asyncio.Lock) and await self._hold_unless_awaiting(lock):
                try:
                    while (waiting := self.comm_inbox.take_next(met_only=True)) is not None:
                        msg, subshell_id = self._as_main_shell_message(waiting.msg, waiting.routed)
                        # At rest (SIGINT is ignored outside a handler): nothing can stop it
                        # between the take and the dispatch.
                        await self.dispatch_shell(msg, subshell_id=subshell_id)
                except BaseException:
                    # A handler raised past dispatch_shell (SystemExit): the rest of the run
                    # still waits, and a marker of its own comes for it.
                    if (marker := self.comm_inbox.mark_leftovers()) is not None:
                        self._queue_marker(marker)
                    raise
                finally:
                    lock.release()
                return
            # An async cell is awaiting (an `async with ui_events()` loop too: the kernel
            # keeps its lock whatever the loop swaps in, .shell_handlers): handled now, as
            # stock handles a comm message on the main shell then (a cell that awaits a
            # widget change gets it). One at a time, the lock looked at again before each:
            # the cell may have ended meanwhile.
            waiting = self.comm_inbox.take_next(met_only=True)
            if waiting is None:
                return
            await self._handle_comm_mid_cell(waiting)

    async def _hold_unless_awaiting(self, lock: asyncio.Lock) -> bool:
        """Take the main shell's lock (True), or return False once its holder awaits.

        Taken at once when nothing else of the main shell waits for it. Else it is asked for
        in a task of its own, and looked at each time this task runs: a request queued before
        this marker may take the lock first (it came first), and if it then awaits (an async
        cell) this task runs while it holds the lock, and gives up its place to handle the
        messages mid-cell, as stock does for a comm message that finds the lock held.
        """
        if lock.locked():
            return False
        if self._main_shell_tasks <= 1:
            await lock.acquire()  # nobody else waits for it: at once
            return True
        acquiring = asyncio.ensure_future(lock.acquire())
        try:
            while not acquiring.done():
                if lock.locked():
                    acquiring.cancel()
                    return False
                # Between a release and its waiter's wake-up: a loop turn or two.
                await asyncio.sleep(0)
        except BaseException:
            acquiring.cancel()
            if acquiring.done() and not acquiring.cancelled():
                lock.release()
            raise
        return True

    def _put_back(self, waiting: Waiting, mid: MidCellComm, seen_before: bool) -> None:
        """Return a message taken for mid-cell handling that was stopped (an interrupt, a
        cancelled task) before it began (before its ``busy``): to the inbox's front, where
        the next that asks finds it first. Its signature is forgotten if this attempt checked
        it, so that it is accepted when dispatched again."""
        if mid.began or mid.returned:
            return
        mid.returned = True
        if (signature := waiting.signature) is not None and not seen_before and self.session:
            self.session.digest_history.discard(signature)
        marker = self.comm_inbox.put_back(waiting)
        if marker is not None:
            self._queue_marker(marker)

    def _seen_before(self, waiting: Waiting) -> bool:
        signature, session = waiting.signature, self.session
        return signature is not None and session is not None and signature in session.digest_history

    def handle_waiting_comms_now(self) -> int:
        """Handle the comm messages waiting for the main shell, now, on this thread.

        :func:`~.comm_routing.handle_waiting_comms` from a blocking cell: one message at a
        time, oldest first, so a callback that calls it again goes on with the next one
        (arrival order holds), and whatever a callback raises past ``dispatch_shell``
        (``SystemExit``) leaves the rest waiting. An interrupt that reaches a callback stops
        the cell too (``KeyboardInterrupt`` here); the rest wait, one stopped before it began
        at the front. Only for the main cell and its callbacks (:meth:`_may_handle_comms`).
        """
        if not self._may_handle_comms():
            return 0
        if self._on_main_shell_thread():
            with self.callback_gate.main_held():  # (a callback off it: after that one)
                return self._handle_now()
        if current_mid_cell_comm() is None:
            return 0  # a thread the cell started (to_thread): callbacks stay on the cell's side
        return self._handle_off_thread()

    def _handle_now(self, stop: Callable[[], bool] = lambda: False, stops: bool = True) -> int:
        """Dispatch the waiting comm messages one by one here until none is left or ``stop()``;
        an interrupt in a callback stops the cell if ``stops``, else just this loop."""
        handled = 0
        while not stop() and (waiting := self.comm_inbox.take_next()) is not None:
            mid, seen_before = MidCellComm(), False
            try:
                seen_before = self._seen_before(waiting)
                self._run_comm_mid_cell(waiting, mid, run_now)
            except BaseException:
                self._put_back(waiting, mid, seen_before)
                raise
            handled += 1
            if mid.interrupted and stops:
                raise KeyboardInterrupt("interrupted in a comm callback")
            if mid.interrupted:  # (a UI loop's thread: the main thread has its own)
                break
        return handled

    def _handle_off_thread(self) -> int:
        """On a thread that runs for the main cell (jupyter-ui-poll's): each dispatched to its
        end here, none left pending on that thread's loop (the loop's end would strand it),
        in :attr:`callback_gate`; none taken once the main thread took an interrupt or the
        cell ended: the rest wait for the main shell."""
        interrupted, nested = self.interrupt_count.since_handoff(), current_mid_cell_comm()
        with self.callback_gate.held(nested=nested is not None):
            return self._handle_now(
                lambda: interrupted() or not self._may_handle_comms(), bool(nested)
            )

    async def do_one_iteration(self) -> int:
        """Handle the comm messages waiting for the main shell now, mid-cell; return how many.

        ipykernel 6's name. Awaited on the main thread (an async cell): each is handled there,
        one at a time. jupyter-ui-poll's ``ui_events()`` awaits it on a thread of its own while
        the blocked cell waits for it (a handoff, never two at once): handled there if that
        cell is the main shell's. From a subshell's thread, a subshell console's poll, or the
        kernel's other threads: nothing, 0 (:meth:`_may_handle_comms`).
        """
        if not self._may_handle_comms():
            return 0
        if not self._on_main_shell_thread():
            return self._handle_off_thread()
        handled = 0
        while (waiting := self.comm_inbox.take_next()) is not None:
            mid = await self._handle_comm_mid_cell(waiting)
            handled += 1
            if mid.interrupted:
                raise KeyboardInterrupt("interrupted in a comm callback")
        return handled

    def _may_handle_comms(self) -> bool:
        """Whether the caller is the main cell (or the kernel at rest on the main thread).

        On the main shell's thread: yes. On the kernel's own threads (a subshell's, control,
        shell channel): no. On any other thread, yes in a callback the main cell let through
        (it waits for another event), else only in the context of the request the main shell
        runs: jupyter-ui-poll's thread runs in a copy of the calling cell's context
        (``asyncio.run_coroutine_threadsafe``); a subshell console's poll has the console's
        cell as parent, and a thread the user started has none.
        """
        if self._on_main_shell_thread():
            return True
        if self._on_a_kernel_thread():
            return False
        if current_mid_cell_comm() is not None:
            return True
        running = self._main_shell_running()
        return running is not None and _msg_id(self.get_parent("shell")) == _msg_id(running)

    def _on_a_kernel_thread(self) -> bool:
        """Whether this thread is one of the kernel's own: a subshell's, control, shell channel."""
        own = (getattr(self, "control_thread", None), getattr(self, "shell_channel_thread", None))
        return isinstance(thread := threading.current_thread(), SubshellThread) or thread in own

    async def _handle_comm_mid_cell(self, waiting: Waiting) -> MidCellComm:
        """Handle a comm message while an async cell awaits (or ui_events' thread waits)."""
        mid, seen_before = MidCellComm(), False
        try:
            seen_before = self._seen_before(waiting)
            async with self.callback_gate.main_held_async():
                dispatch = self._dispatch_mid_cell(waiting, mid)
                await asyncio.create_task(dispatch, context=copy_context())
        except BaseException:
            # (cancelled before the task ran, or an interrupt before its busy)
            self._put_back(waiting, mid, seen_before)
            raise
        return mid

    def _run_comm_mid_cell(
        self,
        waiting: Waiting,
        mid: MidCellComm,
        run: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        """Handle a comm message on this thread now, in a copy of the cell's context."""
        copy_context().run(run, self._dispatch_mid_cell(waiting, mid))

    async def _dispatch_mid_cell(self, waiting: Waiting, mid: MidCellComm) -> None:
        """Dispatch a comm message mid-cell (:mod:`.mid_cell`), then give the cell its
        parent back: its own ``busy`` (:meth:`should_handle`) and ``idle``, the cell's
        ``pre_execute``/``post_execute`` held."""
        parent = self.get_parent("shell")
        ident = self._get_shell_context_var(self._shell_parent_ident)
        flushed = False
        try:
            msg, subshell_id = self._as_main_shell_message(waiting.msg, waiting.routed)
            with held_cell_events(), handling_mid_cell(mid):
                try:
                    # Its own figures under it, the cell's left for the cell (.cell_events).
                    with callback_figures() as shown:
                        await self.dispatch_shell(msg, subshell_id=subshell_id, concurrent=True)
                    # dispatch_shell flushed stdout and stderr after the handler; a flush is a
                    # round trip to the IOPub thread, so only shown figures ask for another.
                    flushed = not shown
                finally:
                    if mid.parent is not None:
                        # Its outputs before its idle, as dispatch_shell flushes at rest.
                        if not flushed:
                            for stream in (sys.stdout, sys.stderr):
                                if stream is not None:
                                    stream.flush()
                        self._publish_mid_cell_status("idle", mid.parent)
        finally:
            self.set_parent(ident, parent, channel="shell")

    def should_handle(self, stream: Any, msg: dict[str, Any], idents: list[Any]) -> Any:
        """As stock; a comm message handled mid-cell publishes its ``busy`` here, verified,
        before its ``comm_echo`` (``dispatch_shell`` publishes none for it)."""
        mid = current_mid_cell_comm()
        if mid is not None and mid.parent is None:
            mid.parent = msg
            self._publish_mid_cell_status("busy", msg)
        if msg["header"].get("msg_type") in ("comm_msg", "comm_close"):
            forget_reply_route(self.comm_manager, msg)
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

    def _main_shell_running(self) -> dict[str, Any] | None:
        """The request the main shell runs (the main cell), or None at rest."""
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


def _msg_id(msg: Any) -> str | None:
    header = msg.get("header") if isinstance(msg, dict) else None
    msg_id = header.get("msg_id") if isinstance(header, dict) else None
    return msg_id if isinstance(msg_id, str) else None
