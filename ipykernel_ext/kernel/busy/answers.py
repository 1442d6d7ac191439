"""Answers for a frontend that (re)connects while the main shell is running a cell.

A page reloaded while a cell runs asks the kernel, on the shell channel, for what it needs to
draw the notebook: ``kernel_info_request``, ``comm_info_request`` and ipywidgets' control comm
(``comm_open`` to ``jupyter.widget.control``, ``comm_msg`` ``{"method": "request_states"}``,
``comm_close``). Stock ipykernel answers all of them on the main thread, after the cell: the
widgets stay on "Loading widget..." until it ends. ipykernel 7 receives every shell message
first on its shell-channel thread (which then routes it to the main shell or a subshell);
:class:`BusyAnswers` answers those few there, while the main shell is busy. It is what
``ExtKernel`` wires, and owns the answers:

* the stock ``kernel_info_reply`` and ``comm_info_reply``, with the stock ``busy``/``idle``
  pair around them (whose parent types jupyter_server does not track);
* ipywidgets' control comm opened here: nothing sent for its ``comm_open``, the
  ``update_states`` reply on IOPub for its ``request_states`` (the snapshot of
  :func:`~ipykernel_ext.kernel.widgets.control_comm.update_states`), without any status (as stock
  does for comm messages handled beside a running cell), and after its ``comm_close`` the check of
  :mod:`ipykernel_ext.kernel.widgets.reconcile`, scheduled on the main IOLoop (so it runs after the
  cell).

Which messages are answered here, in each client's order, is :mod:`.busy_routing`'s decision
(:meth:`BusyAnswers.claims`); a claimed message is verified (signature, replay) before anything
is answered, and one that fails verification is refused with a log line, as stock drops it. An
idle kernel's control comm is ipywidgets' own: :mod:`ipykernel_ext.kernel.widgets.control_comm`
answers it (:meth:`BusyAnswers.wrap_comm_open`).

The intercepted messages are never echoed (``comm_echo``): the control comm is a private
exchange between one frontend and the kernel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ...protocol import comm_topic
from ..widgets.control_comm import REQUEST_STATES, IdleControlComms, update_states
from ..widgets.reconcile import WidgetReconcile, with_buffers
from .busy_routing import BusyRouting
from .main_shell_status import MainShellStatus

#: ``(status, channel, parent)``: publishes a ``status`` on IOPub as the kernel does.
PublishStatus = Callable[[str, str, Any], None]


class KernelParts(Protocol):
    """What :class:`BusyAnswers` uses of the kernel (an ``ipykernel`` ``Kernel``).

    ``session``, ``iopub_socket``, ``comm_manager`` and ``log`` are taken when this is made
    (the kernel is made with them); the rest is read when used (``io_loop`` is set on start).
    """

    session: Any
    iopub_socket: Any
    shell_stream: Any
    comm_manager: Any
    io_loop: Any
    log: Any

    def kernel_info_request(self, stream: Any, ident: Any, parent: Any) -> Awaitable[None]: ...


class BusyAnswers:
    """Answers, on the shell-channel thread, what a reconnecting frontend asks while a cell runs.

    ``status`` is what the main shell last published, ``publish_status`` publishes a status
    as the kernel does (its busy-again rule included), ``enabled`` says whether the switch
    (``ExtKernel.answer_while_busy``) is on now.
    """

    def __init__(
        self,
        kernel: KernelParts,
        status: MainShellStatus,
        publish_status: PublishStatus,
        enabled: Callable[[], bool],
    ) -> None:
        self.kernel = kernel
        self.publish_status = publish_status
        #: control comms opened here: comm_id -> the states last sent on it (None: none yet).
        #: Only the shell-channel thread touches it (the snapshot read on a worker is stored
        #: back on that thread's loop), so it needs no lock.
        self._control_comms: dict[str, dict[str, Any] | None] = {}
        self.routing = BusyRouting(kernel.session, kernel.comm_manager, status, self._control_comms)
        self.idle_control_comms = IdleControlComms(kernel.comm_manager, kernel.log, enabled)
        self.widget_reconcile = WidgetReconcile(kernel.session, kernel.iopub_socket, kernel.log)
        #: What the kernel calls: whether the shell-channel thread answers a message
        #: (BusyRouting.claims), and, as the main shell goes idle, that it finished one.
        self.claims = self.routing.claims
        self.finished = self.routing.finished
        #: Stock's comm_open handler, then an idle kernel's control comm given our answer.
        self.wrap_comm_open = self.idle_control_comms.wrap_comm_open

    async def answer(self, idents: list[Any], frames: list[Any]) -> None:
        """Verify and answer a message :meth:`claims` took. Never raises."""
        log = self.kernel.log
        try:
            msg = self.kernel.session.deserialize(frames, content=True, copy=False)
        except Exception as exc:
            log.warning("Refused a shell message answered while busy: %s", exc)
            return
        msg_type = msg["header"]["msg_type"]
        handlers: dict[str, Callable[[list[Any], dict[str, Any]], Awaitable[None] | None]] = {
            "kernel_info_request": self._kernel_info,
            "comm_info_request": self._comm_info,
            "comm_open": self._control_comm_open,
            "comm_msg": self._control_comm_msg,
            "comm_close": self._control_comm_close,
        }
        try:
            result = handlers[msg_type](idents, msg)
            if result is not None:
                await result
        except Exception:
            log.error("Answering %s while busy failed:", msg_type, exc_info=True)

    async def _kernel_info(self, idents: list[Any], msg: dict[str, Any]) -> None:
        kernel = self.kernel
        self.publish_status("busy", "shell", msg)
        try:
            await kernel.kernel_info_request(kernel.shell_stream, idents, msg)
        finally:
            self.publish_status("idle", "shell", msg)

    def _comm_info(self, idents: list[Any], msg: dict[str, Any]) -> None:
        kernel = self.kernel
        self.publish_status("busy", "shell", msg)
        try:
            content = msg["content"]
            target_name = content.get("target_name") if isinstance(content, dict) else None
            # dict() copies in one step: the main thread may be opening comms meanwhile.
            comms = dict(kernel.comm_manager.comms)
            reply = {
                "comms": {
                    comm_id: {"target_name": comm.target_name}
                    for comm_id, comm in comms.items()
                    if target_name is None or comm.target_name == target_name
                },
                "status": "ok",
            }
            kernel.session.send(kernel.shell_stream, "comm_info_reply", reply, msg, idents)
        finally:
            self.publish_status("idle", "shell", msg)

    def _control_comm_open(self, idents: list[Any], msg: dict[str, Any]) -> None:
        # Nothing is sent for a comm_open, as with ipywidgets' own handler.
        self._control_comms[msg["content"]["comm_id"]] = None

    async def _control_comm_msg(self, idents: list[Any], msg: dict[str, Any]) -> None:
        content = msg["content"]
        comm_id = content["comm_id"]
        data = content.get("data")
        method = data.get("method") if isinstance(data, dict) else None
        if method != REQUEST_STATES:
            # ipywidgets raises on any other method, and sends nothing back.
            self.kernel.log.warning(
                "Widget control comm %s: unknown method %r ignored", comm_id, method
            )
            return
        # Read the widgets on a worker thread: routing of other shell messages goes on.
        loop = asyncio.get_running_loop()
        data, buffers = await loop.run_in_executor(None, update_states, self.kernel.log)
        # What a Comm's send publishes (ipykernel's BaseComm.publish_msg), with the request as
        # parent: this thread has no Comm object for a control comm opened here.
        self.kernel.session.send(
            self.kernel.iopub_socket,
            "comm_msg",
            {"data": data, "comm_id": comm_id},
            metadata={},
            parent=msg,
            ident=comm_topic(comm_id),
            buffers=buffers,
        )
        sent = with_buffers(data["states"], data["buffer_paths"], buffers)
        if comm_id in self._control_comms:
            self._control_comms[comm_id] = sent  # checked when the frontend closes it
        else:
            # The main thread's own control comm (its close is not seen here), or one closed
            # while the states were read: schedule the check now; it waits for the main thread.
            self._schedule_reconcile(sent)

    def _control_comm_close(self, idents: list[Any], msg: dict[str, Any]) -> None:
        sent = self._control_comms.pop(msg["content"]["comm_id"], None)
        if sent is not None:
            # The frontend has taken the states and is registering the models now.
            self._schedule_reconcile(sent)

    def _schedule_reconcile(self, sent: dict[str, Any]) -> None:
        # The main IOLoop runs callbacks only between shell requests: after the cell.
        self.kernel.io_loop.add_callback(self.widget_reconcile.reconcile, sent)
