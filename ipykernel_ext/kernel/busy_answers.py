"""Answers for a frontend that (re)connects while the main shell is running a cell, or idle.

A page reloaded while a cell runs asks the kernel, on the shell channel, for what it needs to
draw the notebook: ``kernel_info_request``, ``comm_info_request`` and ipywidgets' control comm
(``comm_open`` to ``jupyter.widget.control``, ``comm_msg`` ``{"method": "request_states"}``,
``comm_close``). Stock ipykernel answers all of them on the main thread, after the cell: the
widgets stay on "Loading widget..." until it ends. ipykernel 7 receives every shell message
first on its shell-channel thread (which then routes it to the main shell or a subshell);
:class:`BusyAnswers` answers those few there, while the main shell is busy. This module owns:

* the decisions taken from :class:`~.main_shell_status.MainShellStatus` (what the kernel last
  published about its main shell: busy with which request, or not);
* :meth:`BusyAnswers.claims`: which messages are answered here. It looks at the header (and,
  for comm messages, the content) *before* verification; that only picks the path. A claimed
  message is verified (signature, replay) before anything is answered, and a message that fails
  verification is refused with a log line, as stock drops it;
* the answers: the stock ``kernel_info_reply`` and ``comm_info_reply`` (with the stock
  ``busy``/``idle`` pair around them, whose parent types jupyter_server does not track), and
  ipywidgets' ``update_states`` reply on IOPub, built by :mod:`ipykernel_ext.kernel.widget_state`,
  without any status (as stock does for comm messages handled beside a running cell);
* consistency at rest: a value the cell changes between the snapshot and the frontend
  registering the models can be dropped by the frontend (it ignores ``update`` for a model it
  does not know yet). When the frontend closes the control comm, the kernel compares, once the
  main thread is free, what it sent with what the widgets hold, and sends an ``update`` for
  each difference (and a ``comm_close`` for each model closed meanwhile).

When the main shell is idle nothing is claimed (except messages for a control comm opened
here), so replies keep stock's order. Nor is a client's own order changed (a client is its
``header.session``): its ``kernel_info_request``/``comm_info_request`` is not claimed while
anything it sent to the main shell before is queued or running there, and its control comm
message not while a cell (or comm message) of its own is: that client expects the states
after it, as stock answers. A reloaded page is a new session: answered at once.

On an idle kernel the control comm is ipywidgets' own, opened by the main shell as on stock;
:meth:`BusyAnswers.wrap_comm_open` then gives it a :class:`ControlCommAnswer`, which answers
``request_states`` with the same snapshot (:meth:`BusyAnswers.update_states`) on the main
shell, in stock's order, and leaves everything else to ipywidgets' handler.

The intercepted messages are never echoed (``comm_echo``): the control comm is a private
exchange between one frontend and the kernel.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..protocol import COMM_MSG_TYPES, CONTENT, CONTROL_COMM_TARGET, HEADER, METADATA, peek
from .main_shell_status import MainShellStatus
from .widget_state import build_widget_state_reply

#: The control comm's protocol major version this module speaks (that of ipywidgets'
#: ``__control_protocol_version__``, which ``Widget.handle_control_comm_opened`` requires).
CONTROL_PROTOCOL_MAJOR = "1"

#: Requests answered here while the main shell is busy (and the message is for the main shell),
#: unless their client has a message of its own queued or running there: never overtaken.
INFO_REQUESTS = frozenset({"kernel_info_request", "comm_info_request"})
#: Shell messages that run user code, hence may create or change widgets: a client's control
#: comm request never overtakes one of these that the same client sent before it.
USER_CODE_MSG_TYPES = frozenset({"execute_request", *COMM_MSG_TYPES})


class KernelParts(Protocol):
    """What :class:`BusyAnswers` uses of the kernel (an ``ipykernel`` ``Kernel``)."""

    session: Any
    iopub_socket: Any
    shell_stream: Any
    comm_manager: Any
    io_loop: Any
    log: Any
    answer_while_busy: bool

    def kernel_info_request(self, stream: Any, ident: Any, parent: Any) -> Awaitable[None]: ...

    def _publish_status(self, status: str, channel: str, parent: Any = None) -> None: ...


class BusyAnswers:
    """Answers, on the shell-channel thread, what a reconnecting frontend asks while a cell runs."""

    def __init__(self, kernel: KernelParts, status: MainShellStatus) -> None:
        self.kernel = kernel
        self.status = status
        #: control comms opened here: comm_id -> the states last sent on it (None: none yet)
        self._control_comms: dict[str, dict[str, Any] | None] = {}
        #: session -> msg_id of the last user-code message (USER_CODE_MSG_TYPES) it sent to
        #: the main shell, while the main shell has not finished it. Written by the
        #: shell-channel thread (routing) and the main thread (its idle), under the lock.
        self._unfinished: dict[str, str] = {}
        #: the same for the last message of any type it sent to the main shell.
        self._queued: dict[str, str] = {}
        self._unfinished_lock = threading.Lock()

    # --- which messages -------------------------------------------------------------------

    def claims(self, frames: list[Any]) -> bool:
        """Whether the (not yet verified) shell message in ``frames`` is answered here.

        A message not claimed goes on to stock's routing; if it runs user code on the main
        shell, its sender is noted until the main shell has finished it (:meth:`finished`).
        """
        header = peek(self.kernel.session, frames, HEADER)
        if not isinstance(header, dict):
            return False
        claimed = self._claims(frames, header)
        if not claimed:
            self._note_routed(header)
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
        if msg_type not in COMM_MSG_TYPES or not (self.status.busy or self._control_comms):
            return False  # the common case (idle, no control comm of ours): no content read
        content = peek(self.kernel.session, frames, CONTENT)
        if not isinstance(content, dict):
            return False
        comm_id = content.get("comm_id")
        if not isinstance(comm_id, str):
            return False
        if comm_id in self._control_comms:
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
            comm = self.kernel.comm_manager.comms.get(comm_id)
            data = content.get("data")
            return (
                getattr(comm, "target_name", None) == CONTROL_COMM_TARGET
                and isinstance(data, dict)
                and data.get("method") == "request_states"
            )
        return False

    def _is_control_comm_open(self, frames: list[Any], content: dict[str, Any]) -> bool:
        """A comm_open that ipywidgets would accept on the main thread, and nothing else."""
        if content.get("target_name") != CONTROL_COMM_TARGET:
            return False
        if sys.modules.get("ipywidgets.widgets.widget") is None:
            return False  # no widgets in this kernel: stock says "no such target"
        if CONTROL_COMM_TARGET not in self.kernel.comm_manager.targets:
            return False
        metadata = peek(self.kernel.session, frames, METADATA)
        version = metadata.get("version", "") if isinstance(metadata, dict) else ""
        # Another major version: ipywidgets refuses it and closes the comm; leave that to it.
        return isinstance(version, str) and version.split(".")[0] == CONTROL_PROTOCOL_MAJOR

    def _note_routed(self, header: dict[str, Any]) -> None:
        if header.get("subshell_id"):
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

    # --- answers --------------------------------------------------------------------------

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
        kernel._publish_status("busy", "shell", parent=msg)
        try:
            await kernel.kernel_info_request(kernel.shell_stream, idents, msg)
        finally:
            kernel._publish_status("idle", "shell", parent=msg)

    def _comm_info(self, idents: list[Any], msg: dict[str, Any]) -> None:
        kernel = self.kernel
        kernel._publish_status("busy", "shell", parent=msg)
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
            kernel._publish_status("idle", "shell", parent=msg)

    def _control_comm_open(self, idents: list[Any], msg: dict[str, Any]) -> None:
        # Nothing is sent for a comm_open, as with ipywidgets' own handler.
        self._control_comms[msg["content"]["comm_id"]] = None

    async def _control_comm_msg(self, idents: list[Any], msg: dict[str, Any]) -> None:
        content = msg["content"]
        comm_id = content["comm_id"]
        data = content.get("data")
        method = data.get("method") if isinstance(data, dict) else None
        if method != "request_states":
            # ipywidgets raises on any other method, and sends nothing back.
            self.kernel.log.warning(
                "Widget control comm %s: unknown method %r ignored", comm_id, method
            )
            return
        # Read the widgets on a worker thread: routing of other shell messages goes on.
        loop = asyncio.get_running_loop()
        data, buffers = await loop.run_in_executor(None, self.update_states)
        # What a Comm's send publishes (ipykernel's BaseComm.publish_msg), with the request as
        # parent: this thread has no Comm object for a control comm opened here.
        self.kernel.session.send(
            self.kernel.iopub_socket,
            "comm_msg",
            {"data": data, "comm_id": comm_id},
            metadata={},
            parent=msg,
            ident=f"comm-{comm_id}".encode("ascii"),
            buffers=buffers,
        )
        sent = _with_buffers(data["states"], data["buffer_paths"], buffers)
        if comm_id in self._control_comms:
            self._control_comms[comm_id] = sent  # checked when the frontend closes it
        else:
            # The main thread's own control comm (its close is not seen here), or one closed
            # while the states were read: schedule the check now; it waits for the main thread.
            self._schedule_reconcile(sent)

    def update_states(self) -> tuple[dict[str, Any], list[Any]]:
        """ipywidgets' ``update_states`` comm data for every widget, and its buffers.

        The one snapshot both paths send (mid-cell here, idle through :class:`ControlCommAnswer`):
        the states, buffer paths and buffers of ipywidgets' own reply, in its registry order.
        A widget whose state cannot be read is left out with a warning in the kernel log
        (ipywidgets' handler would raise and send nothing at all).
        """
        reply, buffers = build_widget_state_reply({}, self.kernel.log)
        for model_id, error in reply["errors"].items():
            self.kernel.log.warning("Widget %s left out of update_states: %s", model_id, error)
        data = {
            "method": "update_states",
            "states": reply["states"],
            "buffer_paths": reply["buffer_paths"],
        }
        return data, buffers

    def _control_comm_close(self, idents: list[Any], msg: dict[str, Any]) -> None:
        sent = self._control_comms.pop(msg["content"]["comm_id"], None)
        if sent is not None:
            # The frontend has taken the states and is registering the models now.
            self._schedule_reconcile(sent)

    # --- an idle kernel: the main shell's own control comm -----------------------------------

    def wrap_comm_open(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        """Stock's ``comm_open`` shell handler, then :meth:`adopt_control_comm`.

        So the comm is opened, version-checked (or refused and closed) by ipywidgets exactly as
        on stock, on the thread and in the order stock handles it.
        """

        @functools.wraps(handler)
        def comm_open_then_adopt(stream: Any, ident: list[bytes], msg: dict[str, Any]) -> Any:
            result = handler(stream, ident, msg)
            if self.kernel.answer_while_busy:
                try:
                    self.adopt_control_comm(msg)
                except Exception:
                    self.kernel.log.error("Widget control comm left to ipywidgets:", exc_info=True)
            return result

        return comm_open_then_adopt

    def adopt_control_comm(self, msg: dict[str, Any]) -> bool:
        """After stock opened ``msg``'s comm: answer its ``request_states`` with our snapshot.

        Only a ``jupyter.widget.control`` comm that ipywidgets accepted and gave its own
        handler (``Widget._handle_control_comm_msg``): the handler is swapped for a
        :class:`ControlCommAnswer`, which keeps ipywidgets' for everything else. Returns
        whether it was adopted.
        """
        content = msg.get("content")
        if not isinstance(content, dict) or content.get("target_name") != CONTROL_COMM_TARGET:
            return False
        module = sys.modules.get("ipywidgets.widgets.widget")
        comm_id = content.get("comm_id")
        comm = self.kernel.comm_manager.comms.get(comm_id) if isinstance(comm_id, str) else None
        if module is None or comm is None:
            return False  # no ipywidgets, or refused (another major version): stock's answer
        theirs = module.Widget._handle_control_comm_msg
        if getattr(comm, "_msg_callback", None) != theirs:
            return False  # someone else's control target: theirs to answer
        comm.on_msg(ControlCommAnswer(self, comm_id, theirs))
        return True

    # --- consistency at rest --------------------------------------------------------------

    def _schedule_reconcile(self, sent: dict[str, Any]) -> None:
        # The main IOLoop runs callbacks only between shell requests: after the cell.
        self.kernel.io_loop.add_callback(self.reconcile, sent)

    def reconcile(self, sent: dict[str, Any]) -> int:
        """On the main thread: bring the frontend up to date with what changed since ``sent``.

        Returns how many messages were sent.
        """
        module = sys.modules.get("ipywidgets.widgets.widget")
        if module is None:
            return 0
        reply, buffers = build_widget_state_reply({"model_ids": list(sent)}, self.kernel.log)
        now = _with_buffers(reply["states"], reply["buffer_paths"], buffers)
        instances = module._instances
        count = 0
        for model_id, was in sent.items():
            widget = instances.get(model_id)
            if model_id not in now or widget is None or widget.comm is None:
                if model_id not in now and model_id not in reply["errors"]:
                    self._send_comm_close(model_id)
                    count += 1
                continue
            state, old_state = now[model_id]["state"], was["state"]
            changed = [key for key in state if key not in old_state or state[key] != old_state[key]]
            if changed:
                widget.send_state(changed)
                count += 1
        if count:
            self.kernel.log.info("Widget states: %d update(s) sent after a busy reload", count)
        return count

    def _send_comm_close(self, comm_id: str) -> None:
        """Tell frontends that a model they may have built from the snapshot is gone."""
        self.kernel.session.send(
            self.kernel.iopub_socket,
            "comm_close",
            {"data": {}, "comm_id": comm_id},
            metadata={},
            ident=f"comm-{comm_id}".encode("ascii"),
        )


class ControlCommAnswer:
    """The message callback of a control comm the main shell opened (an idle kernel's).

    Called where ipywidgets' ``_handle_control_comm_msg`` would be, by the comm's
    ``handle_msg`` (so the ``pre_execute``/``post_execute`` events, the comm manager's error
    logging and the ``busy``/``idle`` of the shell message stay stock's). ``request_states``
    gets :meth:`BusyAnswers.update_states` through the comm's own ``send`` (ipywidgets' reply,
    built the fast way); any other message, and every message while
    ``ExtKernel.answer_while_busy`` is off, goes to ipywidgets' handler, which answers or
    raises as on stock.
    """

    def __init__(self, answers: BusyAnswers, comm_id: str, theirs: Callable[[Any], Any]) -> None:
        self.answers = answers
        self.comm_id = comm_id
        self.theirs = theirs

    def __call__(self, msg: dict[str, Any]) -> Any:
        data = msg["content"].get("data")
        kernel = self.answers.kernel
        if (
            not kernel.answer_while_busy
            or not isinstance(data, dict)
            or data.get("method") != "request_states"
        ):
            return self.theirs(msg)
        # Held by the comm manager, not by this callback (no comm <-> callback cycle).
        comm = kernel.comm_manager.comms.get(self.comm_id)
        if comm is None:
            return None
        try:
            reply, buffers = self.answers.update_states()
        except Exception:
            kernel.log.warning("update_states: snapshot failed; ipywidgets answers", exc_info=True)
            return self.theirs(msg)
        # ipywidgets replies on the last control comm opened (Widget._control_comm); this one
        # replies to the comm that asked (PROTOCOL.md section 5).
        comm.send(reply, buffers=buffers)
        return None


def _with_buffers(
    states: dict[str, Any], buffer_paths: list[list[Any]], buffers: list[Any]
) -> dict[str, Any]:
    """``states`` with each binary buffer's bytes put back under its top-level state key.

    Enough to compare two snapshots key by key (a nested buffer marks its whole key).
    """
    merged = {model_id: {"state": dict(entry["state"])} for model_id, entry in states.items()}
    for path, buffer in zip(buffer_paths, buffers, strict=True):
        model_id, _, key, *rest = path
        state = merged[model_id]["state"]
        previous = state.get(key) if rest else None
        marker = bytes(buffer)
        state[key] = (previous, tuple(rest), marker) if rest else marker
    return merged
