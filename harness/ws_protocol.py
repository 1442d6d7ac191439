"""The kernel websocket protocol as a client speaks it: one rule per fact, for every client.

jupyter_server's ``/api/kernels/<id>/channels`` websocket carries kernel messages either with
the ``v1.kernel.websocket.jupyter.org`` subprotocol (one binary frame per message, as
JupyterLab negotiates) or, without a subprotocol, as legacy JSON text (binary when a message
has buffers). This module owns what every client of it must agree on: the subprotocol name,
the URL and the token header, how a request is built (jupyter_client's ``Session.msg``), how
it is framed, and the message dict a test reads back. The clients
(:class:`harness.kernel_websocket.KernelWebsocket`, synchronous;
:class:`harness.async_websocket.WSClient`, many in one event loop) and the page reader
(:mod:`harness.page_websocket`) only move frames.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jupyter_client.session import Session, json_packer
from jupyter_server.services.kernels.connection.base import (
    deserialize_binary_message,
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)


class ProtocolError(RuntimeError):
    """The server spoke the websocket protocol otherwise than a client agreed with it."""


#: The websocket subprotocol JupyterLab uses; the server then frames messages in binary.
WS_V1 = "v1.kernel.websocket.jupyter.org"

#: Channels the server exposes on a kernel's websocket.
CHANNELS = ("shell", "control", "iopub", "stdin")


def channels_path(kernel_id: str, session_id: str) -> str:
    """The websocket's path below the server's base URL (``session_id``: the client's session,
    which the server also uses as its shell/control DEALER identity)."""
    return f"api/kernels/{kernel_id}/channels?session_id={session_id}"


def auth_header(token: str) -> tuple[str, str]:
    """The header that authenticates a websocket with the server's token."""
    return "Authorization", f"token {token}"


# --- requests ------------------------------------------------------------------------


def new_message(
    session: Session,
    msg_type: str,
    content: dict[str, Any] | None = None,
    *,
    parent: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    buffers: list[bytes] | None = None,
) -> dict[str, Any]:
    """A request as jupyter_client builds one (``Session.msg``: header, msg_id, parent_header,
    content, metadata), plus its ``buffers``. The server signs it; the client needs no key."""
    msg = session.msg(msg_type, content={} if content is None else content, parent=parent)
    msg["metadata"] = dict(metadata or {})
    msg["buffers"] = list(buffers or [])
    return msg


def encode_message(channel: str, msg: dict[str, Any], v1: bool = True) -> bytes | str:
    """What a client writes for ``msg`` on ``channel``: a v1 binary frame, or legacy JSON text.

    The dicts are packed as jupyter_client packs them (``json_packer``: datetimes as ISO).
    Legacy JSON has no place for buffers; a message with buffers needs v1.
    """
    dicts = (msg["header"], msg["parent_header"], msg["metadata"], msg["content"])
    if v1:
        return encode_v1(channel, [*(json_packer(d) for d in dicts), *msg.get("buffers", [])])
    if msg.get("buffers"):
        raise ValueError("a legacy JSON message cannot carry buffers; use v1")
    keys = ("header", "parent_header", "metadata", "content")
    return json_packer({**dict(zip(keys, dicts, strict=True)), "channel": channel}).decode()


# --- the v1 binary framing -------------------------------------------------------------
#
# One websocket binary frame per message: a table of u64 offsets, then the channel name,
# header, parent_header, metadata, content and buffers. jupyter_server's own
# ``serialize_msg_to_ws_v1`` / ``deserialize_msg_from_ws_v1`` (the same framing as
# JupyterLab's ``serializeV1KernelMessage``) do the work; these wrappers only add a clear
# error for a frame too short to hold an offset table.


def encode_v1(channel: str, parts: list[bytes]) -> bytes:
    """Frame ``parts`` (header, parent_header, metadata, content, *buffers) for ``channel``."""
    return serialize_msg_to_ws_v1([bytes(p) for p in parts], channel)


def decode_v1(frame: bytes) -> tuple[str, list[bytes]]:
    """The channel and the parts of one v1 frame (inverse of :func:`encode_v1`)."""
    if len(frame) < 8 or len(frame) < 8 * (1 + int.from_bytes(frame[:8], "little")):
        raise ValueError(f"v1 frame too short for its offset table: {len(frame)} bytes")
    channel, parts = deserialize_msg_from_ws_v1(frame)
    return channel, [bytes(p) for p in parts]


# --- what a test reads -----------------------------------------------------------------


def message_from_parts(
    channel: str,
    parts: list[bytes],
    decode_content: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """A message dict (as jupyter_client gives it, with its ``channel``) from v1 parts.

    ``decode_content(header)`` false: the content stays ``{}`` and the buffers ``[]`` (a
    client that only counts big messages need not parse them).
    """
    if len(parts) < 4:
        raise ValueError(f"v1 message with {len(parts)} parts; need at least 4")
    header = json.loads(parts[0]) if parts[0] else {}
    whole = decode_content is None or decode_content(header)
    parent, metadata = (json.loads(p) if p else {} for p in parts[1:3])
    content = json.loads(parts[3]) if whole and parts[3] else {}
    return {
        "channel": channel,
        "header": header,
        "msg_id": header.get("msg_id"),
        "msg_type": header.get("msg_type"),
        "parent_header": parent,
        "metadata": metadata,
        "content": content,
        "buffers": list(parts[4:]) if whole else [],
    }


def decode_message(data: str | bytes, v1: bool = True) -> dict[str, Any]:
    """The message dict (see :func:`message_from_parts`) of one frame the server wrote."""
    if v1:
        if not isinstance(data, bytes):
            raise ProtocolError(f"text frame on a v1 websocket: {data[:200]!r}")
        return message_from_parts(*decode_v1(data))
    # Legacy: JSON text, or jupyter_server's binary form for a message with buffers.
    msg = deserialize_binary_message(data) if isinstance(data, bytes) else json.loads(data)
    header = msg["header"]
    return {
        "channel": msg["channel"],
        "header": header,
        "msg_id": header.get("msg_id"),
        "msg_type": header.get("msg_type"),
        "parent_header": msg.get("parent_header") or {},
        "metadata": msg.get("metadata") or {},
        "content": msg.get("content") or {},
        "buffers": list(msg.get("buffers") or []),
        # the legacy protocol's top-level copies, as the frame had them (None: missing)
        "top_level": (msg.get("msg_id"), msg.get("msg_type")),
    }
