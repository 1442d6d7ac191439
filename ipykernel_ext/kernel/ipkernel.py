"""ExtKernel: the IPython kernel with comm_echo, widget-state and IOPub-stats queries.

Wiring only. What each feature does lives in its room (:mod:`ipykernel_ext.kernel`):

* :mod:`.iopub`: the IOPub socket whose counters ``iopub_stats_request`` reports, the kernel's
  IOPub options and the adoption of another app's socket (:mod:`.iopub.kernel_options`), and
  the missed-messages notice (:mod:`.iopub.notice`);
* :mod:`.comms`: ``comm_echo`` for the comm messages clients send (:mod:`.comms.echo`), and
  comm messages run on the main shell (:class:`~.comms.main_shell.CommsOnMainShell`, the
  mixin this kernel inherits: the routing, the inbox, the messages handled mid-cell);
* :mod:`.widgets`: the snapshot of every ipywidgets model for one reply
  (:mod:`.widgets.snapshot`), and an idle kernel's control comm (:mod:`.widgets.control_comm`);
* :mod:`.busy`: a reconnecting frontend answered while the main shell runs a cell;
* :mod:`.journal`: the cells kept for a server that comes back (``journal_request``).

The queries (:data:`~ipykernel_ext.protocol.QUERY_MSG_TYPES`) are answered on the control
thread *without* the ``status: busy/idle`` pair stock ipykernel publishes for every
control message: jupyter_server would take that ``idle`` as the kernel's state while a cell
is still running (see PROTOCOL.md, "Queries publish no status").
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

import comm
from ipykernel.ipkernel import IPythonKernel
from traitlets import Bool, Int, List, Type, Unicode, observe

from ..protocol import (
    COMM_ECHO_MSG_TYPE,
    COMM_MSG_TYPES,
    CONTROL_COMM_TARGET,
    QUERY_MSG_TYPES,
    error_content,
    expect_no_fields,
    peek_msg_type,
    split_frames,
)
from .busy.answers import BusyAnswers
from .busy.main_shell_status import MainShellStatus
from .comms.comm_routing import CommInbox, CommRouting, Routed
from .comms.echo import DEFAULT_MAX_BUFFER_BYTES, CommEcho, frames_received
from .comms.main_shell import CommsOnMainShell
from .comms.mid_cell import interrupts_noted
from .comms.one_callback import CallbackGate, InterruptCount
from .comms.owners import create_owned_comm
from .comms.subshell_sends import SubshellSends
from .iopub.kernel_options import IOPubOptions
from .iopub.notice import MissedNotice
from .iopub.socket import NoDropXPubSocket
from .journal.kernel_part import JournalingKernel
from .shell_handlers import KeptMainLock, ShellHandlers, dispatching_on
from .widgets.snapshot import WidgetStateRequestError, build_widget_state_reply
from .zmqshell import ExtShell


class ExtKernel(JournalingKernel, KeptMainLock, IOPubOptions, CommsOnMainShell):
    """IPythonKernel plus comm_echo and the control-channel queries of PROTOCOL.md."""

    echo_enabled = Bool(
        True,
        help="""Publish a comm_echo on IOPub for every comm_open, comm_msg and comm_close a
        client sends, so every frontend of this kernel sees what the others sent.
        Also the run-time switch: ``get_ipython().kernel.echo_enabled = False``.
        Launcher flag: ``--no-comm-echo``.""",
    ).tag(config=True)

    comm_echo_exclude_targets = List(
        Unicode(),
        help="""Comm target names that are never echoed (for comms that stream large data
        from the frontend to the kernel).""",
    ).tag(config=True)

    comm_echo_max_buffer_bytes = Int(
        DEFAULT_MAX_BUFFER_BYTES,
        min=0,
        help="""Past this many bytes of buffers (all of a message's together), the comm_echo of
        a comm message carries no buffers, and its metadata says so (comm_echo_omitted).
        Widget comms follow ipywidgets' own rule instead (no state whose trait says
        echo_update=False, such as FileUpload's value).""",
    ).tag(config=True)

    iopub_missed_notice = Bool(
        True,
        help="""When a frontend missed IOPub messages (it was given up: see
        iopub_send_timeout), say so on a cell's stderr: just before the first idle of the
        main shell to leave the kernel after the give-up, usually that of the cell itself.""",
    ).tag(config=True)

    answer_while_busy = Bool(
        True,
        help="""While the main shell runs a cell, answer a reconnecting frontend's
        kernel_info_request, comm_info_request and ipywidgets' jupyter.widget.control comm on
        the shell-channel thread, so a reloaded page gets its widgets and status mid-cell;
        on an idle kernel, answer the control comm's request_states with the same fast
        snapshot, on the main shell in stock's order.
        False: stock behaviour (everything waits for the cell; ipywidgets answers the
        control comm itself).""",
    ).tag(config=True)

    comms_on_subshells = Bool(
        False,
        help="""Let comm messages run on the subshell a frontend sends them to (stock ipykernel
        7), beside a running cell. Off (the default): comm messages are handled on the main
        shell, in arrival order, never while a cell runs there, except while the cell waits
        (an awaiting async cell, handle_waiting_comms(), jupyter-ui-poll); those of
        concurrent_comm_targets, and of a comm a subshell console's cell made, still go to
        their subshell. Also the run-time switch:
        ``get_ipython().kernel.comms_on_subshells = True``.
        Launcher flag: ``--comms-on-subshells``.""",
    ).tag(config=True)

    concurrent_comm_targets = List(
        Unicode(),
        help="""Comm targets whose messages may run on the frontend's subshell beside a cell
        (stock's routing), for comms whose handlers are thread-safe and must answer mid-cell.""",
    ).tag(config=True)

    # A shell whose pre_execute/post_execute a comm message cannot fire mid-cell
    # (:mod:`.zmqshell`); a subclass of stock's, so everything else is stock's.
    shell_class = Type(ExtShell)

    control_msg_types = [*IPythonKernel.control_msg_types, *QUERY_MSG_TYPES]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # IOPub: no silent loss under any app that starts this kernel (.iopub.adoption).
        self.adopt_iopub_socket()
        self.comm_echo_publisher = CommEcho(
            session=self.session,
            iopub_socket=self.iopub_socket,
            topic=self._topic(COMM_ECHO_MSG_TYPE),
            comm_manager=self.comm_manager,
            log=self.log,
            enabled=self.echo_enabled,
            exclude_targets=self._echo_exclusions(self.comm_echo_exclude_targets),
            max_buffer_bytes=self.comm_echo_max_buffer_bytes,
        )
        self.missed_notice = MissedNotice(
            session=self.session,
            topic=self._topic("stream"),
            waiting=self._iopub_waiting,
            schedule=self._on_iopub_thread,
            enabled=self.iopub_missed_notice,
        )
        # On the IOPub thread, after an adoption that may still be queued there.
        self._on_iopub_thread(self._watch_give_ups)
        self.main_shell_status = MainShellStatus()
        # Comm messages on the main shell, whatever subshell they name (.comms.comm_routing).
        # A comm knows the subshell console whose cell made it (.comms.owners): the comm
        # package's hook for the kernel to say what a comm is, as ipykernel sets its own.
        comm.create_comm = create_owned_comm
        self.comm_inbox = CommInbox()
        # One callback at a time, whichever thread lets it through (.comms.one_callback).
        self.callback_gate = CallbackGate()
        self.interrupt_count = InterruptCount()
        self.subshell_sends = SubshellSends(lambda: self.shell_channel_thread.io_loop)
        self.comm_routing = CommRouting(
            self.session,
            self.comm_manager,
            enabled=lambda: not self.comms_on_subshells,
            concurrent_targets=lambda: frozenset(self.concurrent_comm_targets),
            inbox=self.comm_inbox,
        )
        self.busy_answers = BusyAnswers(
            self,
            self.main_shell_status,
            publish_status=self._publish_status,
            enabled=lambda: self.answer_while_busy,
        )
        # An idle kernel answers ipywidgets' control comm with the same snapshot, on the main
        # shell in stock's order (.widgets.control_comm, ControlCommAnswer).
        self.shell_handlers["comm_open"] = self.busy_answers.wrap_comm_open(
            self.shell_handlers["comm_open"]
        )
        for msg_type in COMM_MSG_TYPES:
            self.shell_handlers[msg_type] = interrupts_noted(
                self.comm_echo_publisher.wrap(self.shell_handlers[msg_type])
            )
        # A subshell console's cell runs while the main cell polls in a UI loop that swapped
        # the table's execute_request (.shell_handlers).
        self.shell_handlers = ShellHandlers(self.shell_handlers)
        # A UI loop's swap of the main shell's lock is noted, never used (.shell_handlers).
        self.shell_handlers.ui_loop_swap = self.main_lock_swap is not None

    async def dispatch_shell(
        self, msg: list[Any], /, subshell_id: str | None = None, *, concurrent: bool = False
    ) -> None:
        """Dispatch as stock does; a comm message's echo re-sends the frames received
        (.comms.echo: cheaper than packing the client's content again); a subshell runs its
        cells with the kernel's own handler (.shell_handlers); the main shell starts nothing
        while a callback runs on a UI loop's thread (.comms.one_callback), in its turn: its
        lock held, so what came after waits behind it."""
        if not self.callback_gate.free and self._on_main_shell_thread():
            await self.callback_gate.wait_free_async()
        with frames_received(msg), dispatching_on(subshell_id):
            await super().dispatch_shell(msg, subshell_id=subshell_id, concurrent=concurrent)

    @observe("echo_enabled")
    def _echo_enabled_changed(self, change: dict[str, Any]) -> None:
        if hasattr(self, "comm_echo_publisher"):
            self.comm_echo_publisher.enabled = change["new"]

    @observe("comm_echo_max_buffer_bytes")
    def _echo_max_buffer_bytes_changed(self, change: dict[str, Any]) -> None:
        if hasattr(self, "comm_echo_publisher"):
            self.comm_echo_publisher.max_buffer_bytes = change["new"]

    @observe("iopub_missed_notice")
    def _missed_notice_changed(self, change: dict[str, Any]) -> None:
        if hasattr(self, "missed_notice"):
            self.missed_notice.enabled = change["new"]

    @observe("comm_echo_exclude_targets")
    def _exclude_targets_changed(self, change: dict[str, Any]) -> None:
        if hasattr(self, "comm_echo_publisher"):
            self.comm_echo_publisher.exclude_targets = self._echo_exclusions(change["new"])

    @staticmethod
    def _echo_exclusions(configured: list[str]) -> frozenset[str]:
        # ipywidgets' control comm is a private request/reply between one frontend and the
        # kernel: the other frontends can do nothing with it.
        return frozenset([*configured, CONTROL_COMM_TARGET])

    # --- answers while the main shell is busy (see .busy.answers) ------------------------------

    def _on_main_shell_thread(self) -> bool:
        return self.main_shell_status.is_main_thread()

    def pre_handler_hook(self) -> None:
        """As stock, interrupts counted (a UI loop's thread stops at one: .comms.one_callback)."""
        super().pre_handler_hook()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self.interrupt_count.handler)

    def _comm_idle_mid_cell(self, parent: dict[str, Any]) -> None:
        """After a mid-cell comm's idle (.comms.main_shell): its sender has finished, and
        ``busy`` again for the running cell, always (a ``comm_info_request`` from the inbox
        too, whichever client sent it): the cell still runs on the main shell itself."""
        self.busy_answers.finished(parent)
        publish = super()._publish_status
        self.main_shell_status.busy_again_now(lambda running: publish("busy", "shell", running))

    def _main_shell_running(self) -> dict[str, Any] | None:
        return self.main_shell_status.running

    def start(self) -> None:
        """Start as stock does, noting which thread is the main shell's."""
        self.main_shell_status.thread = threading.current_thread()
        super().start()

    def _publish_status(self, status: str, channel: str, parent: Any = None) -> None:
        """Publish as stock does; keep track of the main shell; never leave it looking idle.

        ipykernel's ``dispatch_shell`` publishes the main shell's ``busy`` here and its
        ``idle`` through ``_publish_status_and_flush``, which calls this too: so the main
        shell's state is recorded from exactly what jupyter_server and frontends see.

        An ``idle`` from the control thread, a subshell or an answer given while busy would
        make jupyter_server and JupyterLab take the whole kernel for idle while a cell runs,
        so it is followed at once by ``busy`` with the running request as parent, except for
        some requests of the cell's own client (``MainShellStatus.busy_again_after``).
        """
        main = self.main_shell_status
        on_main_shell = channel == "shell" and main.is_main_thread()
        if on_main_shell:
            parent = parent or self.get_parent("shell")
            if status == "idle":
                # Announced on the IOPub thread ahead of the idle: a notice owed for a give-up
                # goes out just before it (.iopub.notice).
                self.missed_notice.cell_ending(parent)
        publish = super()._publish_status
        if on_main_shell:
            main.main_shell_published(status, parent, lambda: publish(status, channel, parent))
            if status == "idle":
                self.busy_answers.finished(parent)
            return
        publish(status, channel, parent)
        if self.answer_while_busy and status == "idle":
            main.idle_published_beside(
                parent or self.get_parent(channel),
                channel,
                lambda running: publish("busy", "shell", running),
            )

    async def shell_channel_thread_main(self, msg: list[Any]) -> None:
        """Route as stock does, except what :class:`BusyAnswers` answers right here and the
        comm messages :class:`CommRouting` sends to the main shell."""
        split = split_frames(msg) if self.session is not None else None
        if (
            split is not None
        ):  # (no delimiter: stock's own routing, which fails on it as stock does)
            idents, frames = split.identities, split.parts
            # The one routing decision for a comm message (.comms.comm_routing), made first: the
            # busy answers note what the main shell will run.
            routed = self.comm_routing.route(frames)
            to_main = isinstance(routed, Routed)
            if self.answer_while_busy and self.busy_answers.claims(frames, to_main):
                await self.busy_answers.answer(idents, frames)
                return
            if self.route_comm(msg, frames, routed):
                return
            if self.comm_inbox.batch_open and self.comm_routing.to_main_shell(frames):
                # Comm messages that come after it wait behind it (their own marker).
                self.comm_inbox.passed_to_main_shell()
            sends = self.subshell_sends  # (a header read only while something waits)
            if sends and sends.holds(subshell := self.comm_routing.subshell_of(frames)):
                # Behind the messages that wait for that subshell's queue (.comms.subshell_sends).
                sends.send_behind(subshell, self.shell_channel_thread.manager, msg)
                return
        await super().shell_channel_thread_main(msg)

    # --- the IOPub socket's parts the missed-messages notice needs -------------------------

    def _iopub_socket_now(self) -> NoDropXPubSocket | None:
        socket = getattr(getattr(self, "iopub_thread", None), "socket", None)
        return socket if isinstance(socket, NoDropXPubSocket) else None

    def _iopub_waiting(self) -> int | None:
        socket = self._iopub_socket_now()
        return socket.backlog_messages if socket is not None else None

    def _on_iopub_thread(self, f: Callable[[], None]) -> None:
        thread = getattr(self, "iopub_thread", None)
        if thread is not None:
            thread.schedule(f)

    def _watch_give_ups(self) -> None:
        socket = self._iopub_socket_now()
        if socket is not None:
            socket.watch(self.missed_notice)

    @property
    def kernel_info(self) -> dict[str, Any]:
        info = super().kernel_info
        features: list[str] = info["supported_features"]
        if self.echo_enabled:
            features.append(COMM_ECHO_MSG_TYPE)
        features += ["widget_state", "iopub_stats"]
        if self.journal is not None:
            features.append("journal")
        if getattr(self.parent, "router_identity", "off") == "endpoint":
            features.append("router_identity_endpoint")
        return info

    # --- control-channel queries -------------------------------------------------------

    async def process_control(self, msg: list[Any]) -> None:
        """Answer the read-only queries without busy/idle; hand the rest to ipykernel."""
        if self.session is None:
            return
        split = split_frames(msg)
        if split is None or peek_msg_type(self.session, split.parts) not in QUERY_MSG_TYPES:
            await super().process_control(msg)
            return
        try:
            request = self.session.deserialize(split.parts, content=True, copy=False)
        except Exception:
            self.log.error("Invalid control message", exc_info=True)
            return
        handler: Callable[..., Any] = getattr(self, request["header"]["msg_type"])
        try:
            handler(self.control_stream, split.identities, request)
        except Exception:
            # As stock's process_control: a failing handler must not stop the control thread.
            self.log.error("Exception in control handler:", exc_info=True)

    def iopub_stats_request(self, stream: Any, ident: list[bytes], parent: dict[str, Any]) -> None:
        """Reply with the IOPub socket's settings and counters (see :mod:`.iopub`)."""
        assert self.session is not None  # dispatched by process_control, which had one
        try:
            expect_no_fields(parent["content"], "iopub_stats_request")
            content = self.iopub_thread.socket.stats_reply()
        except Exception as exc:
            content = error_content(exc)
        self.session.send(stream, "iopub_stats_reply", content, parent, ident)

    def widget_state_request(self, stream: Any, ident: list[bytes], parent: dict[str, Any]) -> None:
        """Reply with every (or the asked-for) ipywidgets model's state, on control only."""
        assert self.session is not None  # dispatched by process_control, which had one
        buffers: list[Any]
        try:
            content, buffers = build_widget_state_reply(parent["content"], log=self.log)
        except Exception as exc:
            # A malformed request is the client's fault: its message says it all.
            traced = not isinstance(exc, WidgetStateRequestError)
            self.log.warning("widget_state_request failed: %s", exc, exc_info=traced)
            content = error_content(exc)
            buffers = []
        try:
            self.session.send(stream, "widget_state_reply", content, parent, ident, buffers=buffers)
        except Exception as exc:  # a state the session cannot pack: answer anyway, never silence
            self.log.warning("widget_state_reply could not be sent: %s", exc, exc_info=True)
            self.session.send(stream, "widget_state_reply", error_content(exc), parent, ident)
