"""What the outputs owner hears, and how it reads it without decoding more than it needs.

* :class:`HeardMessage`: a kernel message as the owner reads it: a shared channels'
  :class:`~ipykernel_ext.shared_channels.KernelMessage`, or a gateway websocket's decoded
  JSON (:class:`~ipykernel_ext.server.gateway.GatewayMessage`);
* a client's message to the kernel, read part by part: :func:`frame_parts` (signed ZMQ
  frames: the raw header for cheap byte tests, each part decoded only when asked for) and
  :func:`json_parts` (a gateway tab's decoded JSON);
* :func:`for_the_fold`: a heard message as the fold reads it, its content decoded for the
  fold alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ...protocol import CONTENT, HEADER, METADATA, PARENT_HEADER, split_frames
from ...shared_channels import Unpack

#: ``part(i)``: a message's decoded part ``i`` (``METADATA``, ``CONTENT``, ...).
Part = Callable[[int], Any]

#: The keys of a decoded message's parts, by their index in the frames after the delimiter.
_PARTS = {
    HEADER: "header",
    PARENT_HEADER: "parent_header",
    METADATA: "metadata",
    CONTENT: "content",
}


class HeardMessage(Protocol):
    """A kernel message as the owner reads it: a shared channels' ``KernelMessage``, or a
    gateway websocket's decoded JSON (:mod:`ipykernel_ext.server.gateway`)."""

    channel: str

    @property
    def header(self) -> dict[str, Any]: ...

    @property
    def parent_header(self) -> dict[str, Any]: ...

    @property
    def msg_type(self) -> str: ...

    def content_once(self) -> Any: ...


def frame_parts(frames: list[Any], unpack: Unpack) -> tuple[bytes, Part]:
    """A client's signed frames (``[*identities, DELIMITER, signature, header, ...]``): the
    raw header, for byte tests before anything is decoded, and a reader of the decoded parts."""
    split = split_frames(frames)
    if split is None:
        raise ValueError("not a framed message: no delimiter")
    return split.raw(HEADER), lambda i: unpack(split.raw(i))


def json_parts(msg: dict[str, Any]) -> Part:
    """The reader of the parts of a decoded message (a gateway tab's legacy JSON)."""
    return lambda i: msg.get(_PARTS[i]) or {}


def for_the_fold(msg: HeardMessage) -> dict[str, Any]:
    """The message as the fold reads it. The content is decoded for the fold alone, not kept
    on the message (``msg.content`` would memoize it): a message jupyter_server's offline
    buffer holds for a departed session would then hold its text twice, as bytes and as the
    decoded content (the 50 MB cell's +190 MB, docs/BENCHMARKS.md)."""
    return {
        "header": msg.header,
        "parent_header": msg.parent_header,
        "metadata": {},
        "content": msg.content_once(),
    }
