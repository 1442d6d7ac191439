"""The messages that cross a set of shared channels, and the refusals of bad ones.

* :class:`KernelMessage`: one message from the kernel, decoded lazily and once, however many
  clients it is delivered to;
* :class:`RefusedMessage` / :class:`SessionInUse`: a client's message that was not sent, and
  why, with its header so the caller can answer the sender;
* :func:`header_of_outgoing`: the header of a client's signed frames (the only part of an
  outgoing message the shared channels read).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from ..protocol import (
    BUFFERS,
    CONTENT,
    HEADER,
    KERNEL_CHANNELS,
    METADATA,
    PARENT_HEADER,
    split_frames,
)

#: The channels a set relays: the kernel's, but the heartbeat (it stays with the kernel
#: manager, as in jupyter_server).
RELAYED_CHANNELS = tuple(c for c in KERNEL_CHANNELS if c != "hb")
#: The relayed channels whose kernel messages go to one client, by ``parent_header.session``:
#: all but IOPub, which goes to every client.
ROUTED_CHANNELS = tuple(c for c in RELAYED_CHANNELS if c != "iopub")

Unpack = Callable[[bytes], Any]


class RefusedMessage(ValueError):
    """A client's message was not sent to the kernel (the text says why).

    ``header`` is the refused message's header (``{}`` if it could not be decoded), so the
    caller can answer the sender with that header as parent.
    """

    def __init__(self, message: str, header: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.header = header or {}


class SessionInUse(RefusedMessage):
    """The message's ``header.session`` is owned by another attached client."""


class KernelMessage:
    """One message received from the kernel, shared by every client it is delivered to.

    ``frames`` is the message without routing identities and delimiter, as jupyter_server's
    websocket code expects it: ``[signature, header, parent_header, metadata, content,
    *buffers]``. Decoded parts are computed on first use and kept, so a message fanned out to
    a hundred clients is decoded once. ``cache`` holds what recipients derive from the message
    (a websocket encoding, say) so that they, too, compute it once.
    """

    __slots__ = ("_header", "_parent", "cache", "channel", "frames", "unpack")

    def __init__(self, channel: str, frames: list[bytes], unpack: Unpack = json.loads) -> None:
        self.channel = channel
        self.frames = frames
        self.unpack = unpack
        self._header: dict[str, Any] | None = None
        self._parent: dict[str, Any] | None = None
        self.cache: dict[str, Any] = {}

    @classmethod
    def from_wire(
        cls, channel: str, raw: list[bytes], unpack: Unpack = json.loads
    ) -> KernelMessage | None:
        """The message in ``[*identities, DELIMITER, signature, header, ...]``; None if
        malformed."""
        split = split_frames(raw)
        if split is None or not split.whole:
            return None
        return cls(channel, split.parts, unpack)

    @property
    def parts(self) -> list[bytes]:
        """``[header, parent_header, metadata, content, *buffers]`` (no signature)."""
        return self.frames[HEADER:]

    @property
    def header(self) -> dict[str, Any]:
        if self._header is None:
            self._header = self.unpack(self.frames[HEADER])
        return self._header

    @property
    def parent_header(self) -> dict[str, Any]:
        if self._parent is None:
            self._parent = self.unpack(self.frames[PARENT_HEADER])
        return self._parent

    @property
    def content(self) -> Any:
        """The content, decoded on first use and kept in :attr:`cache` (the rate limit reads
        a status's; most messages never need it)."""
        return self.memo("content", lambda: self.unpack(self.frames[CONTENT]))

    def content_once(self) -> Any:
        """The content for a single reader: the kept one if :attr:`content` decoded it, else
        decoded now and not kept (a message an offline buffer holds would otherwise hold
        its text twice, as bytes and decoded)."""
        try:
            return self.cache["content"]
        except KeyError:
            return self.unpack(self.frames[CONTENT])

    @property
    def msg_type(self) -> str:
        return self.header.get("msg_type", "")

    def as_dict(self) -> dict[str, Any]:
        """The whole message as ``Session.deserialize`` shapes it (not verified: the relay
        read it from the kernel's own socket), the decoded parts shared with :attr:`cache`."""
        return {
            "header": self.header,
            "parent_header": self.parent_header,
            "metadata": self.unpack(self.frames[METADATA]),
            "content": self.content,
            "buffers": self.frames[BUFFERS:],
        }

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """``cache[key]``, computed by ``compute()`` the first time."""
        try:
            return self.cache[key]
        except KeyError:
            value = self.cache[key] = compute()
            return value

    def __repr__(self) -> str:
        return f"<KernelMessage {self.channel} {len(self.frames)} frames>"


Deliver = Callable[[KernelMessage], None]


def header_of_outgoing(frames: Iterable[Any], unpack: Unpack) -> dict[str, Any]:
    """The decoded header of signed outgoing frames ``[*idents, DELIMITER, sig, header, ...]``."""
    split = split_frames(list(frames))
    try:
        if split is None:
            raise ValueError("no delimiter")
        header = unpack(split.raw(HEADER))
    except Exception as exc:
        raise RefusedMessage(f"malformed message header: {exc}") from exc
    if not isinstance(header, dict):
        raise RefusedMessage("malformed message header: not an object")
    return header
