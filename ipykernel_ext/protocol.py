"""The Jupyter protocol facts ipykernel_ext relies on, each written once.

The kernel's channels, message names and targets (docs/PROTOCOL.md), a comm's IOPub topic,
where each part sits in a framed message, how a part is read before the message is verified,
and the content of an error reply. A leaf: any side may import it
(tests/package/test_layering.py).
"""

from __future__ import annotations

import traceback
from typing import Any

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
QUERY_MSG_TYPES = ("widget_state_request", "iopub_stats_request")

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

#: Where each part sits in a message's frames after the ``<IDS|MSG>`` delimiter.
SIGNATURE, HEADER, PARENT_HEADER, METADATA, CONTENT = range(5)
#: Where the binary buffers start, if any: a whole message has at least this many frames.
BUFFERS = CONTENT + 1
#: A message dict's keys for the parts from ``HEADER`` to ``CONTENT``, in frame order.
MESSAGE_PARTS = ("header", "parent_header", "metadata", "content")


def comm_topic(comm_id: str) -> bytes:
    """The IOPub topic a kernel's comm ``comm_id`` publishes under (comm's ``BaseComm.topic``)."""
    return f"comm-{comm_id}".encode("ascii")


def peek(session: Any, frames: list[Any], index: int) -> Any:
    """One part of framed message ``frames`` (after the delimiter), unpacked, or None.

    Read *before* the signature is checked, so only to choose a path: whatever is answered
    is deserialized (and so verified) first.
    """
    try:
        frame = frames[index]
        # A copy for this read only: a zmq.Frame's ``bytes`` would keep one on the frame for as
        # long as the message is held (the comm inbox holds many, some large).
        buffer = getattr(frame, "buffer", None)
        return session.unpack(bytes(buffer) if buffer is not None else frame)
    except Exception:
        return None


def peek_msg_type(session: Any, frames: list[Any]) -> str | None:
    """The ``msg_type`` in the header of framed message ``frames``, unverified, or None."""
    header = peek(session, frames, HEADER)
    msg_type = header.get("msg_type") if isinstance(header, dict) else None
    return msg_type if isinstance(msg_type, str) else None


def error_content(exc: BaseException) -> dict[str, Any]:
    """A standard Jupyter error reply content for ``exc``."""
    return {
        "status": "error",
        "ename": type(exc).__name__,
        "evalue": str(exc),
        "traceback": traceback.format_exception(exc),
    }
