"""A SharedChannelsConnection whose channels fail on demand, for a server started by a test.

Loaded by the jupyter_server subprocess (the test puts this folder on its ``PYTHONPATH``)
with ``--ServerApp.kernel_websocket_connection_class=fault_injection.FaultyConnection``. Any
kernel message that carries :data:`FAULT_MARKER` makes the receiving loop raise, as an
unexpected bug in it would.
"""

from __future__ import annotations

from typing import ClassVar

from ipykernel_ext.server import SharedChannelsConnection
from ipykernel_ext.shared_channels import SharedChannels

FAULT_MARKER = b"inject-shared-channels-fault"


class FaultyChannels(SharedChannels):
    def _dispatch(self, channel: str, raw: list[bytes]) -> None:
        if any(FAULT_MARKER in bytes(frame) for frame in raw):
            raise RuntimeError("injected fault in the receiving loop")
        super()._dispatch(channel, raw)


class FaultyConnection(SharedChannelsConnection):
    channels_class: ClassVar[type[SharedChannels]] = FaultyChannels
