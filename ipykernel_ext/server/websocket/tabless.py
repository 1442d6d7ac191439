"""A taken-back kernel's channels and outputs owner, opened by the server with no websocket.

A kernel the server took back at its start (:mod:`ipykernel_ext.server.lasting`) may hold
cells that ran while no server was up (its journal). Nobody's tab may ever come back for them
(the laptop stayed closed), yet the notebook must end with their outputs. :class:`Tabless`
opens, for such a kernel, what its first websocket would have opened: its shared channel
set (:class:`~.channel_options.ChannelOptions`) and, with ``keep_outputs``, its outputs
owner watching it; the resume then gives the cells to the owner, which writes them as for
a departed tab (docs/PROTOCOL.md section 6). Both are made from the server's connection
class as configured (an instance of it that is never a websocket: its options only), and
are the ones every later websocket of the kernel joins.
"""

from __future__ import annotations

from typing import Any

from ...shared_channels import SharedChannels
from ..kernels import channel_sets, outputs_owners
from ..outputs import ChannelsFeed, OutputsOwner
from .connection import SharedChannelsConnection


class Tabless:
    """Opens a kernel's channels and outputs owner for the server itself (module docstring)."""

    def __init__(self, connection_class: type[SharedChannelsConnection], serverapp: Any) -> None:
        self.serverapp = serverapp
        #: the configured class's options: never connected, never a websocket
        self.options = connection_class(parent=serverapp)

    def open(self, kernel_id: str) -> tuple[SharedChannels, OutputsOwner | None]:
        """The kernel's channel set, and its outputs owner watching it (None: keep_outputs
        is off)."""
        multi_kernel_manager = self.serverapp.kernel_manager
        km = multi_kernel_manager.get_kernel(kernel_id)
        log = self.serverapp.log
        settings = self.serverapp.web_app.settings
        channel_sets.listen(settings.get("event_logger"))  # as a websocket's would
        outputs_owners.listen(settings.get("event_logger"))
        shared = self.options.open_channels(
            kernel_id, km.get_connection_info(), multi_kernel_manager, km.session.unpack, log
        )
        if not self.options.keep_outputs:
            return shared, None
        owner = self.options.kernel_owner(
            kernel_id,
            settings,
            km.session.unpack,
            log,
            ChannelsFeed,
            multi_kernel_manager,
        )
        assert isinstance(owner.feed, ChannelsFeed)  # made here, or by this class's websockets
        owner.feed.watch(shared)
        return shared, owner
