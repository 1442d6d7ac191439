"""What keeps the server hearing a kernel while its owner follows a cell: a feed per transport.

* :class:`Feed`: what the owner asks of one: told whether a tab of the kernel is open and
  whether a followed cell runs, it keeps (or stops) hearing the kernel; closed with the owner;
* :class:`ChannelsFeed`: a kernel of this server. The owner is its shared channels' watcher
  (a new set of the kernel gets it too), and while a followed cell runs and no websocket is
  open, a client of the feed's own holds the set open (without jupyter_server's offline
  buffer it would close under the cell);
* a kernel behind a gateway: :class:`~ipykernel_ext.server.gateway.gateway_link.GatewayFeed`, the
  server's own websocket to the gateway (it needs jupyter_server's gateway classes, so it
  lives beside them).
"""

from __future__ import annotations

from typing import Protocol

from ...shared_channels import KernelMessage, SharedChannels, SharedClient, Watcher


class Feed(Protocol):
    """What keeps the server hearing one kernel for its owner (one implementation per
    transport: module docstring)."""

    def update(self, tabs_open: bool, following: bool) -> None:
        """A tab of the kernel is open or not, a followed cell runs or not: hear the kernel
        while it must."""

    def close(self) -> None:
        """The owner is done: stop hearing the kernel."""


class WatchingOwner(Watcher, Protocol):
    """What a :class:`ChannelsFeed` needs of its owner: it watches the channels, and has a
    kernel id (named in the hold's name)."""

    kernel_id: str


class ChannelsFeed:
    """The feed of a kernel of this server: ``owner`` watches the kernel's shared channels,
    held open while a followed cell runs and no websocket is open."""

    def __init__(self, owner: WatchingOwner) -> None:
        self.watcher = owner
        self.kernel_id = owner.kernel_id
        self.channels: SharedChannels | None = None
        self._hold: SharedClient | None = None

    def watch(self, channels: SharedChannels) -> None:
        """Watch ``channels`` (the kernel's current set; a new set replaces the old)."""
        if self.channels is not channels:
            self._release()
            self.channels = channels
        channels.watcher = self.watcher

    def update(self, tabs_open: bool, following: bool) -> None:
        want = not tabs_open and following
        channels = self.channels
        if want and self._hold is None and channels is not None and not channels.closed:
            self._hold = channels.attach(
                _ignore,
                name=f"outputs of kernel {self.kernel_id}",
                on_lost=self._lost,
                announce_status=False,
            )
        elif not want:
            self._release()

    def close(self) -> None:
        self._release()
        if self.channels is not None and self.channels.watcher is self.watcher:
            self.channels.watcher = None

    def _release(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.close()

    def _lost(self, reason: str) -> None:
        self._hold = None


def _ignore(msg: KernelMessage) -> None:
    """The hold client's delivery: the owner saw the message already, as the watcher."""
