"""comm_echo: every frontend of a kernel sees the comm messages the other frontends sent.

This module owns PROTOCOL.md section 2: *which* client comm messages are echoed, the
run-time switch, the per-target exclusions, and the shape of the ``comm_echo`` message.

A ``comm_open``, ``comm_msg`` or ``comm_close`` that a client sends on shell is published
again on IOPub as::

    msg_type:      "comm_echo"
    parent_header: the client's header   (.session = who sent it, .msg_type = which of the three)
    content:       the client's content, unchanged
    metadata:      the client's metadata, unchanged
    buffers:       the client's buffers, unchanged (large ones are not copied)

It is published from the shell handler *before* the comm manager handles the message. The
status ``busy`` that ``dispatch_shell`` publishes, the echo and whatever the comm handler
publishes all go through the same IOPub thread queue from the same thread, so IOPub shows
``busy``, ``comm_echo``, the handler's output, ``idle``.

What is echoed, and what is not:

* Only messages that reached the shell handler: ``dispatch_shell`` has verified the
  signature (an unsigned or wrongly signed message is dropped there and never gets here),
  and comm messages the kernel itself sends never pass through a shell handler.
* Malformed messages are not echoed (content not an object, ``comm_id`` missing or not a
  non-empty string, ``data`` or ``metadata`` not an object, a ``comm_open`` without a string
  ``target_name``, a ``target_module`` that is neither a string nor null). They still go to
  the comm manager unchanged, which logs and drops them as stock ipykernel does.
* A ``comm_open`` is echoed whether or not its target is registered (the other frontends
  then also see the kernel's ``comm_close``), unless its ``target_name`` is excluded.
* A ``comm_msg`` or ``comm_close`` for a ``comm_id`` the kernel does not know is **not**
  echoed: the kernel ignores it, so it changes nothing the other frontends could act on,
  and without the comm its target (hence its exclusion) is unknown. For a known comm the
  target is looked up in ``comm_manager.comms[comm_id].target_name`` each time, so a change
  of the exclusion list applies to comms that are already open.

Switches: :attr:`CommEcho.enabled` (``ExtKernel.echo_enabled`` sets it, in config and at run
time: ``get_ipython().kernel.echo_enabled = False``) and :attr:`CommEcho.exclude_targets`. Both
live on this object: nothing is added to the comm package's CommManager, which is a
process-wide singleton created by ipykernel through ``comm.get_comm_manager()``, not by a
method a kernel subclass could override.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from ...protocol import COMM_ECHO_MSG_TYPE, COMM_MSG_TYPES

ShellHandler = Callable[[Any, list[bytes], dict[str, Any]], Any]


def malformed_reason(msg: dict[str, Any]) -> str | None:
    """Why ``msg`` is not a well-formed client comm message, or None if it is.

    Checks only what an echo's receivers rely on; the comm handler does its own checks.
    """
    msg_type = msg["header"].get("msg_type")
    content = msg.get("content")
    if not isinstance(content, dict):
        return f"content is {type(content).__name__}, not an object"
    comm_id = content.get("comm_id")
    if not isinstance(comm_id, str) or not comm_id:
        return "comm_id is missing or not a non-empty string"
    if "data" in content and not isinstance(content["data"], dict):
        return f"data is {type(content['data']).__name__}, not an object"
    if not isinstance(msg.get("metadata"), dict):
        return "metadata is not an object"
    if msg_type == "comm_open":
        if not isinstance(content.get("target_name"), str):
            return "comm_open without a string target_name"
        target_module = content.get("target_module")
        if target_module is not None and not isinstance(target_module, str):
            return "target_module is neither a string nor null"
    return None


class CommEcho:
    """Publishes ``comm_echo`` on IOPub for the comm messages clients send.

    Wrap each comm shell handler; the wrapper publishes the echo, then calls the handler::

        echo = CommEcho(session=kernel.session, iopub_socket=kernel.iopub_socket,
                        topic=kernel._topic(COMM_ECHO_MSG_TYPE), comm_manager=kernel.comm_manager,
                        log=kernel.log, enabled=True, exclude_targets=["big.upload"])
        for msg_type in COMM_MSG_TYPES:  # every comm message a client sends is echoed
            kernel.shell_handlers[msg_type] = echo.wrap(kernel.shell_handlers[msg_type])

    ``comm_manager`` is only read (its ``comms``, to find a comm's target). ``enabled`` and
    ``exclude_targets`` may be replaced at any time from any thread: plain attributes read
    once per message, so no lock is needed. The wrapped handlers run where comm messages are
    handled: the main shell's thread, and subshells' threads too with
    ``ExtKernel.comms_on_subshells`` or ``concurrent_comm_targets``; so the counts and the
    faults already warned about, which they change, are changed under a lock.
    """

    def __init__(
        self,
        *,
        session: Any,
        iopub_socket: Any,
        topic: bytes,
        comm_manager: Any,
        log: logging.Logger | logging.LoggerAdapter[Any] | None = None,
        enabled: bool = True,
        exclude_targets: Collection[str] = (),
    ) -> None:
        self.session = session
        self.iopub_socket = iopub_socket
        self.topic = topic
        self.comm_manager = comm_manager
        self.log = log if log is not None else logging.getLogger(__name__)
        #: The run-time switch, read on every message.
        self.enabled = bool(enabled)
        self.exclude_targets: frozenset[str] = frozenset(exclude_targets)
        #: comm_echo messages published so far
        self.echoed = 0
        #: client comm messages not echoed because they were malformed
        self.malformed = 0
        self._warned_reasons: set[str] = set()
        self._counts_lock = threading.Lock()

    def wrap(self, handler: ShellHandler) -> ShellHandler:
        """A shell handler that publishes the echo of ``msg``, then calls ``handler``."""

        @functools.wraps(handler)
        def echo_then_handle(stream: Any, ident: list[bytes], msg: dict[str, Any]) -> Any:
            if self.enabled:
                try:
                    self.publish(msg)
                except Exception:
                    # An echo that cannot be sent must never keep the comm from its handler.
                    self.log.error("comm_echo could not be published", exc_info=True)
            return handler(stream, ident, msg)

        return echo_then_handle

    def should_echo(self, msg: dict[str, Any]) -> bool:
        """True if ``msg`` (a verified client comm message) is to be echoed."""
        msg_type = msg["header"].get("msg_type")
        if msg_type not in COMM_MSG_TYPES:
            return False
        reason = malformed_reason(msg)
        if reason is not None:
            self._report_malformed(msg_type, reason)
            return False
        content = msg["content"]
        if msg_type == "comm_open":
            target = content["target_name"]
        else:
            comm = self.comm_manager.comms.get(content["comm_id"])
            if comm is None:
                return False
            target = getattr(comm, "target_name", None)
        return target not in self.exclude_targets

    def publish(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """Publish the ``comm_echo`` of ``msg`` if it is to be echoed; return what was sent."""
        if not self.should_echo(msg):
            return None
        echo = self.session.msg(COMM_ECHO_MSG_TYPE, content=msg["content"], parent=msg)
        # Set, not merged: Session.msg would mix in the kernel session's default metadata.
        echo["metadata"] = msg["metadata"]
        sent: dict[str, Any] = self.session.send(
            self.iopub_socket, echo, ident=self.topic, buffers=list(msg.get("buffers") or ())
        )
        with self._counts_lock:
            self.echoed += 1
        return sent

    def _report_malformed(self, msg_type: str, reason: str) -> None:
        # One warning per kind of fault: a frontend with a bug would repeat it for every
        # message, and the comm manager logs each one anyway.
        key = f"{msg_type}: {reason}"
        with self._counts_lock:
            self.malformed += 1
            warned = key in self._warned_reasons
            self._warned_reasons.add(key)
        if warned:
            self.log.debug("Not echoing malformed %s", key)
            return
        self.log.warning(
            "Not echoing a malformed %s (%s); the frontend that sent it has a bug. "
            "Further ones like it are logged at debug level.",
            msg_type,
            reason,
        )
