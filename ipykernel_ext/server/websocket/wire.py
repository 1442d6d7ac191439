"""How a tab's kernel messages are written for its websocket: :class:`WebsocketWire`.

jupyter_server's two kernel websocket protocols (``v1.kernel.websocket.jupyter.org``, and the
legacy JSON one with buffers in its binary form), each message encoded once however many
websockets get it (``KernelMessage.cache``), a merged message encoded anew, and a merged
message made a kernel message again for jupyter_server's offline buffer. :class:`Wire` is
what any connection class gives its pacer (the gateway's too); here, this class's three
``pace_*`` methods.
"""

from __future__ import annotations

from typing import Any, Protocol

from jupyter_server.services.kernels.connection.base import serialize_msg_to_ws_v1
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

from ...protocol import MESSAGE_PARTS
from ...shared_channels import KernelMessage
from .merging import Entry, Message
from .outbox import Outbox

V1_PROTOCOL = "v1.kernel.websocket.jupyter.org"


class Wire(Protocol):
    """What a connection class gives its pacer: how to read and send its messages."""

    def pace_decode(self, original: Any) -> Message:
        """``original`` as a message dict (``header``, ``parent_header``, ``metadata``,
        ``content``, ``buffers``)."""

    def pace_send(self, original: Any) -> None:
        """Send ``original`` to the tab unchanged."""

    def pace_send_merged(self, msg: Message) -> None:
        """Encode and send ``msg``, a message that stands for several (an IOPub message)."""


class WebsocketWire(ZMQChannelsWebsocketConnection):
    """jupyter_server's kernel websocket, writing kernel messages to an :class:`Outbox`."""

    @property
    def outbox(self) -> Outbox:
        """The websocket's outgoing queue (the connection class makes it)."""
        raise NotImplementedError

    @property
    def _v1(self) -> bool:
        return self.subprotocol == V1_PROTOCOL

    # --- the pacer's wire (:class:`Wire`) ---------------------------------------

    def pace_send(self, original: KernelMessage) -> None:
        """Encode one kernel message for this websocket (once per message) and queue it."""
        kmsg = original
        try:
            if self._v1:
                data = kmsg.memo("ws:v1", lambda: self._encode_v1(kmsg))
            else:
                data = kmsg.memo("ws:legacy", lambda: self._encode_legacy(kmsg))
        except Exception:
            self.log.critical("Malformed message: %r", kmsg.frames, exc_info=True)
            return
        self.outbox.put(data, isinstance(data, bytes), kmsg)

    def pace_decode(self, original: KernelMessage) -> Message:
        """The message as a dict whose content is decoded for the pacer alone (not kept in
        the kernel message's cache): what waits and cannot merge drops it, and its memory
        with it (what the tab's byte budget charges, :mod:`.pacer`)."""
        shared = "content" in original.cache  # another reader decoded it already
        msg = original.as_dict()
        if not shared:
            del original.cache["content"]  # kept by as_dict(): in the dict only
        return msg

    def pace_send_merged(self, msg: Message) -> None:
        """A message that stands for several waiting ones: encoded anew (no signature: a
        websocket message carries none)."""
        if self._v1:
            parts = [self.session.pack(msg[key]) for key in MESSAGE_PARTS]
            data: bytes | str = serialize_msg_to_ws_v1([*parts, *msg["buffers"]], "iopub")
        else:
            # The legacy protocol's messages carry msg_id and msg_type at the top too
            # (Session.deserialize puts them there), a merged one as well.
            header = msg["header"]
            legacy = {**msg, "msg_id": header.get("msg_id"), "msg_type": header.get("msg_type")}
            data = self._reserialize_reply(legacy, channel="iopub")
        # The message it stands for is its original: a close hands it back, for the replay.
        self.outbox.put(data, isinstance(data, bytes), msg)

    def _encode_v1(self, kmsg: KernelMessage) -> bytes:
        parts = kmsg.parts
        redact = not self.multi_kernel_manager.allow_tracebacks
        if redact and kmsg.channel == "iopub" and kmsg.msg_type == "error":
            parts = list(parts)  # _on_error rewrites the content frame in place
            self._on_error(kmsg.channel, {"header": kmsg.header, "content": None}, parts)
        return serialize_msg_to_ws_v1(parts, kmsg.channel)

    def _encode_legacy(self, kmsg: KernelMessage) -> str | bytes:
        msg = self.session.deserialize(list(kmsg.frames))  # verifies, as the stock class
        self._on_error(kmsg.channel, msg, kmsg.parts)
        return self._reserialize_reply(msg, channel=kmsg.channel)

    def _as_kernel_message(self, entry: KernelMessage | Entry | Message) -> KernelMessage:
        """A waiting entry (or a merged message the outbox held) as the kernel message a
        websocket's replay takes: as it came, or, merged, the message that stands for
        several, signed by this connection's session (the kernel's key), as the kernel's
        would be."""
        msg = entry.handed_over() if isinstance(entry, Entry) else entry
        if isinstance(msg, KernelMessage):
            return msg
        parts = [self.session.pack(msg[key]) for key in MESSAGE_PARTS]
        frames = [self.session.sign(parts), *parts, *msg["buffers"]]
        return KernelMessage("iopub", frames, self.session.unpack)
