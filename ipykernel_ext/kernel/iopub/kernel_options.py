"""The kernel's IOPub options: :class:`IOPubOptions`, the mixin ``ExtKernel`` inherits.

It owns what the kernel does with the options of :mod:`.settings` (``c.ExtKernel.iopub_*``),
whichever app starts it:

* once, from the kernel's ``__init__``: :meth:`IOPubOptions.adopt_iopub_socket` puts the
  no-loss send path, run with these options, on a socket another app bound
  (:mod:`.adoption`); under ExtKernelApp the socket is already ours and the app applied them;
* afterwards: a change of ``iopub_send_timeout`` or ``iopub_backlog_limit`` takes effect at
  once (:meth:`IOPubOptions._apply_at_run_time`).

The options themselves, their rules and the value they make are :mod:`.settings`' (shared with
``ExtKernelApp``); this module is kept apart from it so that :mod:`.settings` stays a leaf.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from traitlets import observe

from .adoption import adopt_iopub_socket
from .settings import IOPubTraits
from .socket import NoDropXPubSocket


class IOPubOptions(IOPubTraits):
    """The IOPub options of a kernel, honoured whichever app starts it.

    A mixin for the kernel class (``c.ExtKernel.iopub_nodrop = ...``; under ExtKernelApp the
    app's ``--iopub-*`` flags win where both are given). :meth:`adopt_iopub_socket` is called
    once, from the kernel's ``__init__``. The options are validated where they are declared
    (:class:`~.settings.IOPubTraits`), an error naming ``ExtKernel.iopub_*``.
    """

    #: False until the kernel is made: only later changes are run-time changes.
    _iopub_options_live = False

    @observe("iopub_send_timeout", "iopub_backlog_limit")
    def _apply_at_run_time(self, change: dict[str, Any]) -> None:
        """``kernel.iopub_send_timeout = ...`` (or the budget) takes effect at once.

        Runs on the thread that sets the option (user code: the main thread). The socket reads
        its settings at every decision, on the IOPub thread, so the new settings (those in
        force, with this one changed) are handed over there, between two sends.
        """
        if not self._iopub_options_live:
            return  # values from config at construction: the app or the adoption applies them
        thread = getattr(self, "iopub_thread", None)
        socket = getattr(thread, "socket", None)
        if thread is None or not isinstance(socket, NoDropXPubSocket):
            return
        changed = {self.trait_metadata(change["name"], "setting"): change["new"]}
        thread.schedule(lambda: socket.apply(replace(socket.settings, **changed)))

    def adopt_iopub_socket(self) -> None:
        """Give IOPub the no-loss send path if the app that made the socket did not."""
        parent = getattr(self, "parent", None)
        adopt_iopub_socket(
            getattr(self, "iopub_thread", None),
            settings=self.iopub_settings(),
            log=getattr(self, "log", logging.getLogger(__name__)),
            bound_by=type(parent).__name__ if parent is not None else "the embedding app",
        )
        self._iopub_options_live = True
