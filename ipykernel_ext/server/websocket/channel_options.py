"""How a kernel's shared channel set is made for this server: the options, and the making.

:class:`ChannelOptions` is a mixin of :class:`~.connection.SharedChannelsConnection`: its
options are configured under that class's name, as before. A set is made the first time a
websocket of the kernel asks (:meth:`ChannelOptions.open_channels`), and also, with no
websocket, for a kernel the server took back with cells to give again
(:mod:`.tabless`): either way it is the kernel's one set (:data:`..kernels.channel_sets`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

from traitlets import Bool, Float, Int
from traitlets.config import Configurable

from ...shared_channels import (
    DEFAULT_GRACE_PERIOD,
    IOPUB_RCVHWM,
    RECV_BATCH,
    SharedChannels,
    Unpack,
)
from ..kernels import channel_sets, server_context, status_rule


class ChannelOptions(Configurable):
    """The shared channels' options, and the kernel's set made from them."""

    shared_channels_grace_period = Float(
        DEFAULT_GRACE_PERIOD,
        min=0,
        config=True,
        help="""Seconds a kernel's shared channels stay open after the last websocket left
        (and no offline buffer holds them), so a page reload reuses them.""",
    )

    deliver_own_comm_echo = Bool(
        False,
        config=True,
        help="""Also send a websocket the comm_echo messages its own comm messages caused.
        Off: each websocket gets only the other clients' echoes (it knows what it sent).""",
    )

    shared_iopub_rcvhwm = Int(
        IOPUB_RCVHWM,
        min=0,
        config=True,
        help="""RCVHWM (messages; 0: no limit) of the shared IOPub socket, set before it
        connects. libzmq's I/O thread drains the kernel into this queue whatever the event
        loop does, so a burst shorter than this never fills the kernel's queue to the relay
        (stock ipykernel drops past 1000 there).""",
    )

    shared_recv_batch = Int(
        RECV_BATCH,
        min=1,
        config=True,
        help="""Messages the shared channels read from one socket per event-loop turn. More
        reads a burst in fewer turns, but starves the server's other ZMQ streams (its IOPub
        activity monitor reads one message per turn, and overflows).""",
    )

    #: The channel-set class (a subclass may add behaviour, e.g. fault injection in tests).
    channels_class: ClassVar[type[SharedChannels]] = SharedChannels

    def open_channels(
        self,
        kernel_id: str,
        info: dict[str, Any],
        multi_kernel_manager: Any,
        unpack: Unpack,
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> SharedChannels:
        """The kernel's open set (a new one from these options, started, if it has none)."""

        def make(on_close: Callable[[SharedChannels], None]) -> SharedChannels:
            return self.channels_class(
                info,
                context=server_context(multi_kernel_manager),
                unpack=unpack,
                grace_period=self.shared_channels_grace_period,
                skip_own_echo=not self.deliver_own_comm_echo,
                logger=log,
                on_close=on_close,
                track_status=status_rule(multi_kernel_manager),
                iopub_rcvhwm=self.shared_iopub_rcvhwm,
                recv_batch=self.shared_recv_batch,
            )

        return channel_sets.get(kernel_id, info, make, multi_kernel_manager)
