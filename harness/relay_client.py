"""A logical client of :class:`~ipykernel_ext.shared_channels.SharedChannels` (the relay as a
library): a Session of its own on the kernel's key, and every message delivered to it.

What a websocket would get, collected by a plain callback: for the relay's tests against a
scripted kernel (tests/unit) and a real one (tests/shared_channels).
"""

from __future__ import annotations

from typing import Any

from jupyter_client.session import Session

from ipykernel_ext.shared_channels import KernelMessage, SharedChannels


class RelayClient:
    """Attached to ``channels`` (``attach``: its keywords) under ``session`` (default: new).

    ``received`` holds what is delivered to it, ``lost`` why the channels were lost.
    """

    def __init__(self, channels: SharedChannels, session: str | None = None, **attach: Any) -> None:
        key = channels.session.key
        self.session = Session(key=key) if session is None else Session(key=key, session=session)
        self.received: list[KernelMessage] = []
        self.lost: list[str] = []
        self.handle = channels.attach(
            self.received.append, self.session.session, on_lost=self.lost.append, **attach
        )

    def send(
        self, channel: str, msg_type: str, content: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A request on ``channel``, signed by this client's session; the message sent."""
        msg = self.session.send(self.handle.stream(channel), msg_type, content or {})  # type: ignore[arg-type]  # a ZMQStream look-alike: Session.send calls send_multipart
        assert msg is not None
        return msg

    def types(self) -> list[str]:
        return [m.msg_type for m in self.received]

    def replies(self) -> list[KernelMessage]:
        return [m for m in self.received if m.channel != "iopub"]
