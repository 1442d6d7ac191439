"""IOPub under any launcher: the kernel adopts an IOPub socket another app bound.

``ExtKernelApp`` makes the IOPub socket itself (:class:`~.socket.NoDropXPubSocket`,
configured before bind). Other apps bind a plain XPUB and hand the kernel an ``IOPubThread``
around it: stock ``IPKernelApp`` (``--IPKernelApp.kernel_class=ipykernel_ext.kernel.ExtKernel``),
the cluster launchers of gateway_provisioners and Enterprise Gateway (``launch_ipykernel.py
--kernel-class-name ipykernel_ext.kernel.ExtKernel``) and ``embed_kernel(kernel_class=...)``.
Under those, ExtKernel adopts the bound socket when it is made (its ``__init__`` calls
:meth:`~.kernel_options.IOPubOptions.adopt_iopub_socket`). This module owns the adoption,
:func:`adopt_iopub_socket` and the socket it puts in place, :class:`AdoptedXPubSocket`:

* :class:`AdoptedXPubSocket` is a ``NoDropXPubSocket`` over the *same* libzmq socket (pyzmq's
  ``shadow``): the wait / timeout / fallback / counters code is the one ExtKernelApp uses;
  no second libzmq socket is made and the app's socket object is left as it is.
* ``XPUB_NODROP`` and ``SNDTIMEO`` are set on it; libzmq reads both at each send, so they hold
  for subscribers that are already connected. ``SNDHWM`` is not: libzmq copies it into each
  subscriber's queue from the options the socket had when it was *bound*, so a queue size
  other than the bound one (libzmq's 1000, which is also our default) needs ExtKernelApp;
  asking for one is logged as a warning, and the reply reports the queue actually in use.
* The swap is done on the IOPub thread (``IOPubThread.schedule``), between two sends, since
  only that thread may use the socket; the kernel waits for it before it goes on.
* From then on the IOPub thread sends through the adopted socket: ``IOPubThread.socket`` is
  reassigned (ipykernel reads that attribute at each send; tests/package/test_contract.py names it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import zmq

from .settings import IOPubSettings
from .socket import NoDropXPubSocket
from .stats import ADOPTED

#: How long the kernel waits for the IOPub thread to make the swap. The thread only has to
#: finish the send in hand; stock IOPub never waits for a subscriber, so this is generous.
ADOPT_TIMEOUT_S = 10.0


class AdoptedXPubSocket(NoDropXPubSocket):
    """A :class:`NoDropXPubSocket` over an XPUB socket another object owns.

    Made with ``AdoptedXPubSocket(shadow=owner)``. Sending is inherited unchanged. Closing
    goes to the owner, which may also be closed on its own (ipykernel closes it when the IOPub
    thread's loop ends): a shadow closing the libzmq socket as well would close it twice.
    """

    origin = ADOPTED

    owner: zmq.Socket[Any]

    def __init__(self, *, shadow: zmq.Socket[Any], **kwargs: Any) -> None:
        super().__init__(shadow=shadow, **kwargs)
        self.owner = shadow

    def close(self, linger: int | None = None) -> None:
        """Close the owner's socket (once, whoever asks first)."""
        self.owner.close(linger=linger)

    def send_multipart(self, msg_parts: Any, *args: Any, **kwargs: Any) -> Any:
        """:meth:`NoDropXPubSocket.send_multipart`, refused once the owner is closed.

        The shadow's own closed flag never changes, so this is what stops a late send (an
        output flush at exit) from reaching a libzmq socket that is gone; ipykernel expects
        ``ENOTSOCK`` then, as from its own closed socket.
        """
        if self.owner.closed:
            raise zmq.ZMQError(zmq.ENOTSOCK)
        return super().send_multipart(msg_parts, *args, **kwargs)

    @property
    def closed(self) -> bool:
        return self.owner.closed


def _swap_on_iopub_thread(
    iopub_thread: Any,
    socket: zmq.Socket[Any],
    configure: Callable[[AdoptedXPubSocket], None],
    log: logging.Logger,
    bound_by: str,
) -> AdoptedXPubSocket | None:
    """Make the adopted socket on the IOPub thread itself, ``configure`` it and put it in place.

    Only that thread sends on the socket, so swapping it there needs no lock and never cuts a
    send in two. Waits for the swap; None (with the reason logged) if it failed or was late.
    """
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def adopt_on_iopub_thread() -> None:
        try:
            adopted = AdoptedXPubSocket(shadow=socket)
            configure(adopted)
            adopted.attach(iopub_thread.io_loop.call_later, iopub_thread.thread)
            iopub_thread.socket = adopted
            outcome["socket"] = adopted
        except Exception as exc:  # reported by the waiting thread, with its traceback
            outcome["error"] = exc
        finally:
            done.set()

    # Runs at once if the thread is not running (then no other thread can be sending).
    iopub_thread.schedule(adopt_on_iopub_thread)
    if not done.wait(ADOPT_TIMEOUT_S):
        log.warning(
            "IOPub: the IOPub thread did not adopt the socket within %.0f s; it will when it "
            "gets to it, and sends until then keep stock behaviour.",
            ADOPT_TIMEOUT_S,
        )
        return None
    if "error" in outcome:
        log.error(
            "IOPub: could not adopt the IOPub socket made by %s; it keeps stock behaviour "
            "(messages for a full subscriber are dropped silently).",
            bound_by,
            exc_info=outcome["error"],
        )
        return None
    return outcome["socket"]


def adopt_iopub_socket(
    iopub_thread: Any,
    *,
    settings: IOPubSettings,
    log: logging.Logger,
    bound_by: str,
) -> AdoptedXPubSocket | None:
    """Put the no-loss send path, run with ``settings``, on ``iopub_thread``'s socket; return it.

    Returns None, after saying why in the log, when there is nothing to adopt (no IOPub
    thread, or a socket that is not an XPUB). Already an ExtKernelApp socket: returns None
    quietly, as nothing needs doing.
    """
    socket = getattr(iopub_thread, "socket", None)
    if socket is None:
        log.debug("IOPub: no IOPub thread socket to adopt (%s)", bound_by)
        return None
    if isinstance(socket, NoDropXPubSocket):
        return None
    if not isinstance(socket, zmq.Socket) or socket.type != zmq.XPUB:
        log.warning(
            "IOPub: the IOPub socket made by %s is %r, not a zmq XPUB socket: it keeps stock "
            "behaviour (messages for a full subscriber are dropped silently) and "
            "iopub_stats_request cannot report on it.",
            bound_by,
            socket,
        )
        return None

    def configure(adopted: AdoptedXPubSocket) -> None:
        adopted.apply(settings, log=log)

    adopted = _swap_on_iopub_thread(iopub_thread, socket, configure, log, bound_by)
    if adopted is None:
        return None
    in_use = adopted.settings.sndhwm
    if settings.sndhwm != in_use:
        log.warning(
            "IOPub: a queue of %d messages per subscriber (iopub_sndhwm) was asked for, but the "
            "IOPub socket was bound by %s before this kernel was made, and libzmq fixes each "
            "subscriber's queue at bind time: it stays %d. Start the kernel with "
            "`python -m ipykernel_ext` (ExtKernelApp) to change it. NODROP and the send "
            "timeout are in effect.",
            settings.sndhwm,
            bound_by,
            in_use,
        )
    log.info(
        "IOPub: adopted the IOPub socket bound by %s: nodrop=%s, send timeout %d ms, queue %d",
        bound_by,
        settings.nodrop,
        settings.send_timeout_ms,
        in_use,
    )
    return adopted
