"""The IOPub rate settings of both connection classes: merge and pace instead of dropping.

:class:`PacedIOPub` is a mixin of :class:`~ipykernel_ext.server.SharedChannelsConnection`
and :class:`~ipykernel_ext.server.GatewayOutputsConnection`. It reads jupyter_server's own
rate settings, under their own names and defaults (``limit_rate``, ``iopub_msg_rate_limit``,
``iopub_data_rate_limit``, ``rate_limit_window``: configs written for the stock class keep
working, ``c.ZMQChannelsWebsocketConnection.*`` included, and the gateway class, which has
none in jupyter_server, reads them too), and adds one switch, ``iopub_merge``: on (the
default), a tab over the rate gets what waits merged and paced by a
:class:`~.pacer.Pacer`, never dropped; off, stock's limiter drops as it always did (the
gateway class, which has no limiter upstream, then sends everything). ``limit_rate=False``
sends everything unpaced, as stock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from traitlets import Bool, Float
from traitlets.config import Configurable

from .budgets import Rates
from .outbox import Outbox
from .pacer import Pacer
from .wire import Wire

#: The stock class whose config section holds the rate settings (read by both classes).
STOCK_SECTION = "ZMQChannelsWebsocketConnection"


class PacedIOPub(Configurable):
    """A tab's IOPub rate: merged and paced (module docstring)."""

    iopub_merge = Bool(
        True,
        config=True,
        help="""With limit_rate: give a tab that is over the IOPub rate (or behind) the
        messages that wait for it merged (consecutive streams joined, a widget's updates as
        its latest state, a display's latest update, an animation's replaced frames
        skipped) and paced (at most iopub_msg_rate_limit messages a second over any
        rate_limit_window, a growing stream output re-sent as iopub_data_rate_limit allows),
        never dropped. False: jupyter_server's limiter, which drops messages over the rate
        and writes "IOPub message rate exceeded" into the cell.""",
    )

    # jupyter_server's names and defaults (ZMQChannelsWebsocketConnection), for the gateway
    # class, which has none of its own; the shared-channels class inherits the stock ones.
    limit_rate = Bool(True, config=True, help="Whether to limit the rate of IOPub messages.")
    iopub_msg_rate_limit = Float(
        1000, config=True, help="(msgs/sec) Maximum rate at which messages reach a tab."
    )
    iopub_data_rate_limit = Float(
        1000000,
        config=True,
        help="(bytes/sec) Maximum rate of stream output a tab's page is asked to render.",
    )
    rate_limit_window = Float(
        3, config=True, help="(sec) Time window used to check the message and data rates."
    )

    @classmethod
    def section_names(cls) -> list[str]:
        """The stock class's section first (lowest priority), then the class's own."""
        names: list[str] = super().section_names()
        return names if STOCK_SECTION in names else [STOCK_SECTION, *names]

    if TYPE_CHECKING:  # each connection class's own, made by make_pacer

        @property
        def pacer(self) -> Pacer: ...

    @property
    def paces_iopub(self) -> bool:
        """Whether this connection's IOPub goes through a :class:`Pacer`."""
        return bool(self.limit_rate and self.iopub_merge)

    def rates(self) -> Rates:
        return Rates(
            messages=self.iopub_msg_rate_limit,
            stream_bytes=self.iopub_data_rate_limit,
            window=self.rate_limit_window,
        )

    def make_pacer(
        self,
        wire: Wire,
        outbox: Outbox,
        on_overflow: Callable[[int], None],
        logger: logging.Logger | logging.LoggerAdapter[Any],
        name: str,
    ) -> Pacer:
        return Pacer(
            wire,
            outbox,
            self.rates(),
            budget=outbox.budget,
            on_overflow=on_overflow,
            logger=logger,
            name=name,
        )

    def _replaying(self) -> AbstractContextManager[None]:
        """Around a replay of what the tab's session missed: paced, it is let in as the tab
        reads (:meth:`Pacer.replaying`); unpaced, it is written as it comes, as stock."""
        return self.pacer.replaying() if self.paces_iopub else nullcontext()
