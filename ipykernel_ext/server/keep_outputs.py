"""The settings of outputs that survive the tab, shared by both connection classes.

:class:`KeepOutputs` is a mixin of :class:`~ipykernel_ext.server.SharedChannelsConnection`
(kernels of this server) and :class:`~ipykernel_ext.server.GatewayOutputsConnection`
(kernels behind ``--gateway-url``): the same four options, configurable under either class
name or once for both as ``c.KeepOutputs`` (traitlets applies every configurable base's
section, the class's own last). It also holds the one registry of
:class:`~.outputs.owner.OutputsOwner` per kernel of this server process and makes a kernel's owner
from these settings the first time a websocket of the kernel asks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

from traitlets import Bool, Float, Int
from traitlets.config import Configurable

from .kernels import OutputsOwners
from .outputs.owner import OutputsOwner
from .outputs.registry import DEFAULT_MAX_CELL_BYTES, DEFAULT_MAX_KERNEL_BYTES


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

    #: kernel id -> the owner of its cells' outputs: one registry for the server process, a
    #: class attribute of this mixin on purpose. jupyter_server makes a connection object per
    #: websocket, and a kernel's owner must be found by every websocket of the kernel, of
    #: either class (a server runs one), and outlive each: it writes a cell once its tab has
    #: left. An owner goes when its kernel is shut down through the server's API
    #: (:meth:`OutputsOwners.listen`). Only the server's event loop touches it (websocket
    #: handlers, restart callbacks, jupyter_events listeners), so it takes no lock.
    _owners: ClassVar[OutputsOwners] = OutputsOwners()

    def outputs_owner(
        self,
        kernel_id: str,
        settings: dict[str, Any],
        unpack: Callable[[bytes], Any],
        log: logging.Logger | logging.LoggerAdapter[Any],
        multi_kernel_manager: Any,
    ) -> OutputsOwner:
        """The kernel's owner (made from these settings, with its restart callbacks, the
        first time; ``settings`` is the server's ``web_app.settings``)."""

        def make() -> OutputsOwner:
            return OutputsOwner(
                kernel_id,
                settings,
                grace=self.keep_outputs_grace,
                unpack=unpack,
                log=log,
                max_cell_bytes=self.keep_outputs_cell_bytes,
                max_kernel_bytes=self.keep_outputs_kernel_bytes,
            )

        self._owners.listen(settings.get("event_logger"))
        return self._owners.get(kernel_id, make, multi_kernel_manager)
