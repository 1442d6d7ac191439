"""comm_echo: every frontend of a kernel sees the comm messages the other frontends sent.

This module owns PROTOCOL.md section 2: *which* client comm messages are echoed, the
run-time switch, the per-target exclusions, and the shape of the ``comm_echo`` message.

A ``comm_open``, ``comm_msg`` or ``comm_close`` that a client sends on shell is published
again on IOPub as::

    msg_type:      "comm_echo"
    parent_header: the client's header   (.session = who sent it, .msg_type = which of the three)
    content:       the client's content, unchanged
    metadata:      the client's metadata, unchanged
    buffers:       the client's buffers, unchanged (passed on without a copy)

built from the frames the kernel received (:func:`frames_received`): the client's header,
metadata, content and buffer frames re-sent as they came, under the kernel's new header and
signature (packing the client's content again cost twice as much: 43 against 20 µs an echo),

except that the echo never carries back a payload nobody needs (:func:`trim_payload`):

* a ``jupyter.widget`` comm's ``update``: a state key whose trait on the kernel's widget says
  ``echo_update=False`` (ipywidgets' own rule for its ``echo_update``: FileUpload's ``value``)
  is left out of ``state``, with its buffers and their ``buffer_paths``;
* any other comm: when its buffers total more than :attr:`CommEcho.max_buffer_bytes`
  (``ExtKernel.comm_echo_max_buffer_bytes``), the echo carries no buffers.

Either way the echo's metadata gets :data:`OMITTED_KEY`, saying what was left out.

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
import sys
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ...protocol import (
    BUFFERS,
    COMM_ECHO_MSG_TYPE,
    COMM_MSG_TYPES,
    HEADER,
    METADATA,
    split_frames,
)

ShellHandler = Callable[[Any, list[bytes], dict[str, Any]], Any]

#: The echo's metadata key saying what the echo leaves out (PROTOCOL.md section 2):
#: ``{"buffers": count, "bytes": their total size}``, plus ``"state_keys"`` for a widget.
OMITTED_KEY = "comm_echo_omitted"
#: ipywidgets' comm target, whose updates follow ipywidgets' ``echo_update`` rule.
WIDGET_TARGET = "jupyter.widget"
#: Default of :attr:`CommEcho.max_buffer_bytes`: a widget's image or a plot's data passes,
#: a file or an array chunk does not.
DEFAULT_MAX_BUFFER_BYTES = 64 * 1024


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


#: The frames of the shell message being dispatched (:func:`frames_received`). A context
#: variable, not a thread's: a comm message handled mid-cell is dispatched in a task of its own
#: on the thread of the cell's request.
_received: ContextVar[list[Any] | None] = ContextVar("comm_echo_received", default=None)


@contextmanager
def frames_received(frames: list[Any]) -> Iterator[None]:
    """While a shell message is dispatched: its frames as received (idents included), which the
    echo re-sends as they came rather than packing the client's content again."""
    token = _received.set(frames)
    try:
        yield
    finally:
        _received.reset(token)


#: What :meth:`CommEcho._echoed_target` answers for a message that is not echoed.
_NOT_ECHOED = object()


def nbytes(buffer: Any) -> int:
    """Size of a message buffer (bytes, memoryview or zmq.Frame), without copying it."""
    return memoryview(buffer).nbytes


def _no_echo_keys(comm_id: str, state: dict[str, Any]) -> list[str]:
    """The keys of ``state`` whose trait on widget ``comm_id`` says ``echo_update=False``."""
    # Looked up, never imported: a kernel that has not imported ipywidgets has no widgets.
    module = sys.modules.get("ipywidgets.widgets.widget")
    instances = getattr(module, "_instances", None)
    widget = instances.get(comm_id) if isinstance(instances, dict) else None
    if widget is None:
        return []
    return [
        key
        for key in state
        if widget.has_trait(key) and not widget.trait_metadata(key, "echo_update", True)
    ]


def trim_payload(
    target: str | None,
    content: dict[str, Any],
    buffers: Sequence[Any],
    max_buffer_bytes: int,
) -> tuple[dict[str, Any], Sequence[Any], dict[str, Any] | None]:
    """The echo's content and buffers, and what they leave out (None: nothing).

    Content and buffers are returned as given unless something is left out; content is
    never changed in place (the comm handler gets the client's message after the echo).
    """
    data = content.get("data")
    if target == WIDGET_TARGET:
        if not isinstance(data, dict) or data.get("method") != "update":
            return content, buffers, None
        state = data.get("state")
        if not isinstance(state, dict):
            return content, buffers, None
        keys = _no_echo_keys(content["comm_id"], state)
        if not keys:
            return content, buffers, None
        paths = data.get("buffer_paths")
        paths = paths if isinstance(paths, list) else []
        # A path into a key left out goes with its buffer; a buffer without a path is dropped.
        kept = [
            i
            for i, path in enumerate(paths[: len(buffers)])
            if not (isinstance(path, list) and path and path[0] in keys)
        ]
        trimmed_data = {**data, "state": {k: v for k, v in state.items() if k not in keys}}
        if "buffer_paths" in data:
            trimmed_data["buffer_paths"] = [paths[i] for i in kept]
        kept_set = set(kept)
        dropped = [b for i, b in enumerate(buffers) if i not in kept_set]
        omitted = {"buffers": len(dropped), "bytes": sum(map(nbytes, dropped)), "state_keys": keys}
        return {**content, "data": trimmed_data}, [buffers[i] for i in kept], omitted
    if not buffers:
        return content, buffers, None
    total = sum(map(nbytes, buffers))
    if total <= max_buffer_bytes:
        return content, buffers, None
    return content, [], {"buffers": len(buffers), "bytes": total}


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
        max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
    ) -> None:
        self.session = session
        self.iopub_socket = iopub_socket
        self.topic = topic
        self.comm_manager = comm_manager
        self.log = log if log is not None else logging.getLogger(__name__)
        #: The run-time switch, read on every message.
        self.enabled = bool(enabled)
        self.exclude_targets: frozenset[str] = frozenset(exclude_targets)
        #: Past this many bytes of buffers, a non-widget comm's echo carries none.
        self.max_buffer_bytes = max_buffer_bytes
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
        return self._echoed_target(msg) is not _NOT_ECHOED

    def _echoed_target(self, msg: dict[str, Any]) -> str | object | None:
        """The target of ``msg`` if it is to be echoed, else :data:`_NOT_ECHOED`."""
        msg_type = msg["header"].get("msg_type")
        if msg_type not in COMM_MSG_TYPES:
            return _NOT_ECHOED
        reason = malformed_reason(msg)
        if reason is not None:
            self._report_malformed(msg_type, reason)
            return _NOT_ECHOED
        content = msg["content"]
        if msg_type == "comm_open":
            target = content["target_name"]
        else:
            comm = self.comm_manager.comms.get(content["comm_id"])
            if comm is None:
                return _NOT_ECHOED
            target = getattr(comm, "target_name", None)
        return _NOT_ECHOED if target in self.exclude_targets else target

    def publish(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """Publish the ``comm_echo`` of ``msg`` if it is to be echoed; return what was sent."""
        target = self._echoed_target(msg)
        if target is _NOT_ECHOED:
            return None
        content, buffers, omitted = trim_payload(
            target if isinstance(target, str) else None,
            msg["content"],
            msg.get("buffers") or (),
            self.max_buffer_bytes,
        )
        sent: dict[str, Any]
        raw = None if omitted is not None else self._client_frames(msg)
        if raw is not None:
            # The client's header (as the echo's parent), metadata, content and buffer frames as
            # they came, under the kernel's new header: the message below, without packing.
            header = self.session.msg_header(COMM_ECHO_MSG_TYPE)
            # The client's header becomes the echo's parent; the client's parent is dropped.
            parts = [self.session.pack(header), raw[HEADER], *raw[METADATA:]]
            # Copied only when small, as Session.send decides.
            copy = max(map(nbytes, parts)) < self.session.copy_threshold
            self.session.send_raw(self.iopub_socket, parts, copy=copy, ident=self.topic)
            sent = {"header": header, "parent_header": msg["header"], "content": content}
            sent.update(metadata=msg["metadata"], buffers=raw[BUFFERS:])
        else:
            echo = self.session.msg(COMM_ECHO_MSG_TYPE, content=content, parent=msg)
            # Set, not merged: Session.msg would mix in the kernel session's default metadata.
            metadata = msg["metadata"]
            echo["metadata"] = metadata if omitted is None else {**metadata, OMITTED_KEY: omitted}
            sent = self.session.send(
                self.iopub_socket, echo, ident=self.topic, buffers=list(buffers)
            )
        with self._counts_lock:
            self.echoed += 1
        return sent

    def _client_frames(self, msg: dict[str, Any]) -> list[Any] | None:
        """``[signature, header, parent, metadata, content, *buffers]`` of ``msg`` as received,
        or None if the frames being dispatched are not ``msg``'s (echoed from elsewhere)."""
        frames = _received.get()
        split = None if frames is None else split_frames(frames)
        if split is None or not split.whole:
            return None
        # The frames of the request being dispatched may be another message's: a comm message
        # handled mid-cell runs while the cell's execute_request is dispatched.
        return split.parts if msg["header"]["msg_id"].encode() in split.raw(HEADER) else None

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
