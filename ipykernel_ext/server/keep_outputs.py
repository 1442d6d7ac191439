"""Outputs that survive the tab, for both connection classes: the settings, and the owner.

:class:`KeepOutputs` is a mixin of :class:`~ipykernel_ext.server.SharedChannelsConnection`
(kernels of this server) and :class:`~ipykernel_ext.server.GatewayOutputsConnection`
(kernels behind ``--gateway-url``): the same four options, configurable under either class
name or once for both as ``c.KeepOutputs`` (traitlets applies every configurable base's
section, the class's own last). It is also where both classes find, open and close their
kernel's :class:`~.outputs.OutputsOwner`, written once: the owner is made from these settings
the first time a websocket of the kernel asks, and kept in the server process's registry
(:data:`.kernels.outputs_owners`).

In an app that is not a jupyter_server (standalone Voila: no session manager, no notebook to
write into) the outputs keeping switches itself off (:meth:`KeepOutputs.keeps_outputs`), said
once at INFO.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from jupyter_server.services.kernels.connection.base import BaseKernelWebsocketConnection
from traitlets import Bool, Float, Int
from traitlets.config import Configurable

from ..shared_channels import Unpack
from .kernels import outputs_owners
from .outputs import DEFAULT_MAX_CELL_BYTES, DEFAULT_MAX_KERNEL_BYTES, MakeFeed, OutputsOwner


class KeepOutputs(Configurable):
    """Whether and how the server keeps a departed tab's outputs (docs/PROTOCOL.md section 6)."""

    keep_outputs = Bool(
        True,
        config=True,
        help="""Keep the outputs of a notebook cell whose tab went away mid-cell (closed,
        reloaded, network lost) and write them: into the live collaborative document when
        jupyter-collaboration is on, else into the .ipynb once the cell ended and no tab of
        the kernel is connected. Cells run as before; the server only watches.""",
    )

    keep_outputs_grace = Float(
        2.0,
        min=0,
        config=True,
        help="""Seconds a session whose websocket closed has to come back (a network blip)
        before the server takes over the outputs of its running cells; also how long no tab
        of a kernel must be connected before the server writes the .ipynb.""",
    )

    keep_outputs_cell_bytes = Int(
        DEFAULT_MAX_CELL_BYTES,
        min=1,
        config=True,
        help="Bytes of outputs the server keeps per cell (a note marks where it cut).",
    )

    keep_outputs_kernel_bytes = Int(
        DEFAULT_MAX_KERNEL_BYTES,
        min=1,
        config=True,
        help="Bytes of outputs the server keeps per kernel, all its cells together.",
    )

    #: the kernel's outputs owner, once this websocket found it (:meth:`find_owner`)
    owner: OutputsOwner | None = None
    #: the session the owner was told opened, until it is told it closed
    _owner_session: str | None = None

    #: whether the switch-off in an app without a session manager was logged (once a process)
    _told_off: ClassVar[bool] = False

    def keeps_outputs(self) -> bool:
        """``keep_outputs``, unless the app serving this websocket has no session manager in
        its settings (standalone Voila): the owner finds a cell's notebook through it, so
        there is nothing to keep outputs for; said once at INFO."""
        if not self.keep_outputs:
            return False
        websocket = self._websocket()
        if "session_manager" in websocket.websocket_handler.settings:
            return True
        if not KeepOutputs._told_off:
            KeepOutputs._told_off = True
            websocket.log.info(
                "keep_outputs is off: this app (%s) has no session manager, so no notebook "
                "to write a departed tab's outputs into",
                type(websocket.websocket_handler.application).__name__,
            )
        return False

    def find_owner(self, make_feed: MakeFeed) -> OutputsOwner:
        """The kernel's owner, kept as :attr:`owner`: made from these settings, with its feed
        (``make_feed``) and the restarter's callbacks, the first time a websocket of the
        kernel asks."""
        websocket = self._websocket()
        settings = websocket.websocket_handler.settings
        outputs_owners.listen(settings.get("event_logger"))
        self.owner = self.kernel_owner(
            websocket.kernel_id,
            settings,
            websocket.session.unpack,
            websocket.log,
            make_feed,
            websocket.multi_kernel_manager,
        )
        return self.owner

    def kernel_owner(
        self,
        kernel_id: str,
        settings: dict[str, Any],
        unpack: Unpack,
        log: logging.Logger | logging.LoggerAdapter[Any],
        make_feed: MakeFeed,
        multi_kernel_manager: Any,
    ) -> OutputsOwner:
        """The kernel's owner, made from these settings if it has none (also with no
        websocket: a kernel taken back with cells to give again, :mod:`.websocket.tabless`)."""

        def make() -> OutputsOwner:
            return OutputsOwner(
                kernel_id,
                settings,
                grace=self.keep_outputs_grace,
                unpack=unpack,
                log=log,
                max_cell_bytes=self.keep_outputs_cell_bytes,
                max_kernel_bytes=self.keep_outputs_kernel_bytes,
                make_feed=make_feed,
            )

        return outputs_owners.get(kernel_id, make, multi_kernel_manager)

    def owner_opened(self) -> None:
        """Tell the owner (if this websocket has one) that its session is open."""
        if self.owner is not None:
            self._owner_session = self._websocket().session.session
            self.owner.opened(self._owner_session)

    def owner_closed(self) -> None:
        """Tell the owner that this websocket's session closed: once, and only if it was told
        that it opened."""
        owner, session = self.owner, self._owner_session
        if owner is not None and session is not None:
            self._owner_session = None
            owner.closed(session)

    def _websocket(self) -> BaseKernelWebsocketConnection:
        """This object as the kernel websocket connection both classes are."""
        assert isinstance(self, BaseKernelWebsocketConnection)
        return self
