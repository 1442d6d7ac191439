"""The Jupyter protocol facts ipykernel_ext relies on, each written once.

The kernel's channels, message names and targets (docs/PROTOCOL.md), a comm's IOPub topic,
a framed message split at its delimiter (:func:`split_frames`) with each part where it sits,
a frame's bytes (:func:`frame_bytes`), how a part is read before the message is verified,
and the content of an error reply. A leaf: any side may import it
(tests/package/test_layering.py).
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jupyter_client.session import DELIM

#: The kernel's channels, as a connection file names them (``{channel}_port``): shell, control
#: and stdin are the kernel's ROUTER sockets (a reply goes to the routing id that asked),
#: IOPub its publisher (PUB/XPUB: no routing ids), hb its heartbeat (REP). Each user derives
#: the channels it deals with from this list, under a name saying which they are.
KERNEL_CHANNELS = ("shell", "control", "stdin", "iopub", "hb")

#: The comm messages a client sends on shell (comm_echo echoes them; busy answers route them).
COMM_MSG_TYPES = frozenset({"comm_open", "comm_msg", "comm_close"})

#: What the kernel publishes on IOPub for each of those a client sent (PROTOCOL.md section 2).
COMM_ECHO_MSG_TYPE = "comm_echo"

#: ipywidgets' control comm: ``request_states`` -> ``update_states`` for every model.
CONTROL_COMM_TARGET = "jupyter.widget.control"

#: Our control-channel queries (PROTOCOL.md sections 1 and 3): answered without busy/idle.
QUERY_MSG_TYPES = ("widget_state_request", "iopub_stats_request", "journal_request")

#: The message-metadata key (true) on each IOPub message a lasting kernel sends again from its
#: cell journal (PROTOCOL.md section 9): a server tells them from the live ones by it.
AGAIN_METADATA_KEY = "ipykernel_ext_again"

#: The environment variable a launcher sets for a kernel it launched to outlive its server:
#: the seconds the kernel waits, with no IOPub subscriber and no running cell, before it
#: ends itself (ipykernel_ext.kernel.orphan reads it, server/lasting/provisioner.py sets it).
ORPHAN_TIMEOUT_ENV = "IPYKERNEL_EXT_ORPHAN_TIMEOUT"
#: The bytes of outputs such a kernel's cell journal holds (PROTOCOL.md section 9; 0: none).
JOURNAL_BYTES_ENV = "IPYKERNEL_EXT_JOURNAL_BYTES"
#: What a kernelspec's ``metadata`` says (true) for a kernel that honours it: the server
#: extension launches only such kernels to outlive it (a kernel that cannot end itself would
#: live forever if its server never came back).
ENDS_WHEN_ORPHANED = "ends_when_orphaned"

#: The message types whose statuses jupyter_server does not take the kernel's state from: the
#: default of its ``MappingKernelManager.untracked_message_types`` (``track_message_type``),
#: which JupyterLab 4 also applies to its status bar. Written here because the kernel must not
#: import jupyter_server; tests/package/test_contract.py checks it equals the server's default.
UNTRACKED_MESSAGE_TYPES = frozenset(
    {
        "comm_info_request",
        "comm_info_reply",
        "kernel_info_request",
        "kernel_info_reply",
        "shutdown_request",
        "shutdown_reply",
        "interrupt_request",
        "interrupt_reply",
        "debug_request",
        "debug_reply",
        "stream",
        "display_data",
        "update_display_data",
        "execute_input",
        "execute_result",
        "error",
        "status",
        "clear_output",
        "debug_event",
        "input_request",
        "input_reply",
    }
)

#: The frame between a message's identities (routing ids, or an IOPub topic) and its parts:
#: jupyter_client's, named once here (tests/package/test_layering.py: nowhere else).
DELIMITER: bytes = DELIM
#: Where each part sits in a message's frames after the delimiter.
SIGNATURE, HEADER, PARENT_HEADER, METADATA, CONTENT = range(5)
#: Where the binary buffers start, if any: a whole message has at least this many frames.
BUFFERS = CONTENT + 1
#: A message dict's keys for the parts from ``HEADER`` to ``CONTENT``, in frame order.
MESSAGE_PARTS = ("header", "parent_header", "metadata", "content")


def frame_bytes(frame: Any) -> bytes:
    """A frame's bytes, whatever it is: ``bytes`` as they are; a ``zmq.Frame``, a
    ``memoryview`` or a ``bytearray`` copied for this use only (a ``zmq.Frame``'s own
    ``bytes`` would keep a copy on the frame for as long as it is held: the comm inbox and the
    IOPub backlog hold many, some large)."""
    return frame if isinstance(frame, bytes) else bytes(memoryview(frame))


@dataclass(frozen=True)
class SplitFrames:
    """A framed message split at its delimiter, still encoded and unverified.

    ``identities``: the frames before the delimiter, as bytes (routing ids, or an IOPub
    topic); ``parts``: the frames after it, as they came (``bytes``, ``zmq.Frame``), each at
    its index (``SIGNATURE``, ``HEADER``, ... ``CONTENT``, then the buffers): what
    ``Session.deserialize`` takes.
    """

    identities: list[bytes]
    parts: list[Any]

    @property
    def whole(self) -> bool:
        """Whether every part up to the content is there."""
        return len(self.parts) >= BUFFERS

    def raw(self, index: int) -> bytes:
        """Part ``index`` (``HEADER``, ``CONTENT``, ...) as bytes; IndexError if it is missing."""
        return frame_bytes(self.parts[index])


def split_frames(frames: Sequence[Any]) -> SplitFrames | None:
    """``frames`` (``[*identities, DELIMITER, signature, header, ...]``) split at the
    delimiter, or None if it has none (not a Jupyter message). No frame is copied but the
    identities."""
    for i, frame in enumerate(frames):
        # Bytes compared as they are (most frames: the cheap test); anything else through a
        # view, so a large frame before the delimiter is not copied.
        if frame == DELIMITER if isinstance(frame, bytes) else memoryview(frame) == DELIMITER:
            return SplitFrames([frame_bytes(f) for f in frames[:i]], list(frames[i + 1 :]))
    return None


def comm_topic(comm_id: str) -> bytes:
    """The IOPub topic a kernel's comm ``comm_id`` publishes under (comm's ``BaseComm.topic``)."""
    return f"comm-{comm_id}".encode("ascii")


def peek(session: Any, frames: list[Any], index: int) -> Any:
    """One part of framed message ``frames`` (after the delimiter), unpacked, or None.

    Read *before* the signature is checked, so only to choose a path: whatever is answered
    is deserialized (and so verified) first.
    """
    try:
        return session.unpack(frame_bytes(frames[index]))
    except Exception:
        return None


def peek_msg_type(session: Any, frames: list[Any]) -> str | None:
    """The ``msg_type`` in the header of framed message ``frames``, unverified, or None."""
    header = peek(session, frames, HEADER)
    msg_type = header.get("msg_type") if isinstance(header, dict) else None
    return msg_type if isinstance(msg_type, str) else None


def expect_no_fields(content: Any, msg_type: str) -> None:
    """Refuse a request's ``content`` unless it is an empty object (a clear error)."""
    if not isinstance(content, dict):
        raise TypeError(f"{msg_type} content must be an object, not {type(content).__name__}")
    if content:
        raise ValueError(f"{msg_type} takes no fields; unknown: {sorted(content)}")


def error_content(exc: BaseException) -> dict[str, Any]:
    """A standard Jupyter error reply content for ``exc``."""
    return {
        "status": "error",
        "ename": type(exc).__name__,
        "evalue": str(exc),
        "traceback": traceback.format_exception(exc),
    }
