"""A kernel left without a server ends itself once nobody has listened for a while.

The server extension launches the kernels of a kernelspec that declares this (its
``metadata.ends_when_orphaned``) so that they outlive a server that dies
(:mod:`ipykernel_ext.server.lasting`): a crash, ``kill -9`` or a hung-up SSH session no
longer ends a running cell, and the next server takes the kernel back. A kernel whose
server never comes back must not live forever either. The provisioner passes the time in
the environment (:data:`ENV`, seconds); a kernel started any other way (``jupyter
console``, VS Code, nbclient, a stock server) has no such variable and never ends itself,
as with stock ipykernel.

The rule: the kernel shuts down once, for the whole time, **no IOPub subscriber was
connected and the main shell ran no request**. A running cell is never cut: the time only
counts from the moment both hold, so a cell that runs for hours while no server is up
ends, and the kernel then still waits the whole time for a server to take it back. Until a
first subscriber came, the kernel waits at least :data:`STARTUP_GRACE` (its server may be
slow to subscribe).

Why IOPub subscribers: a server that manages a kernel always holds one (jupyter_server's
activity watcher subscribes to the IOPub of every kernel it runs, tab or no tab), and so does
every frontend that shows output. A monitor socket on the IOPub socket counts them
(``ZMQ_EVENT_ACCEPTED`` less ``ZMQ_EVENT_DISCONNECTED``): a server killed with ``kill -9``
has its connections closed by the operating system, which libzmq reports at once.

The watch runs on a thread of its own (the main thread is in the cell); it ends the kernel
the way a ``shutdown_request`` does at its end, by stopping the main event loop, so the
process exits through its normal exit path (history saved, atexit handlers run).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

import zmq
from zmq.utils.monitor import recv_monitor_message

from ..protocol import ORPHAN_TIMEOUT_ENV


class RunningState(Protocol):
    """Whether the main shell runs a request now (the kernel's ``MainShellStatus``)."""

    @property
    def busy(self) -> bool: ...


class MainLoop(Protocol):
    """The kernel's main event loop (tornado's IOLoop: ``add_callback`` is thread-safe)."""

    def add_callback(self, callback: Any) -> None: ...

    def stop(self) -> None: ...


class WatchedKernel(Protocol):
    """What the watch reads of the kernel: its main shell's state, and its main loop (set
    by the kernel's ``start``, before the watch can need it)."""

    main_shell_status: RunningState
    io_loop: MainLoop


#: The environment variable the provisioner sets: seconds with no subscriber and no request.
ENV = ORPHAN_TIMEOUT_ENV

#: The monitor events that count subscribers' connections.
EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED

#: The least time a kernel waits for its first subscriber (seconds): a short time-out must
#: not end a kernel whose server is slow to subscribe on a loaded machine.
STARTUP_GRACE = 120.0

#: How often the watch looks (seconds): the time-out is honoured to within this.
POLL_SECONDS = 0.5


def orphan_timeout(environ: Mapping[str, str]) -> float | None:
    """The time-out the launcher asked for (None: never end; a bad value is an error)."""
    raw = environ.get(ENV)
    if raw is None or raw == "":
        return None
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"{ENV}={raw!r}: expected a number of seconds") from None
    if not seconds > 0:
        raise ValueError(f"{ENV}={raw!r}: expected a positive number of seconds")
    return seconds


class OrphanWatch:
    """Ends the kernel after ``timeout`` seconds with no IOPub subscriber and no request.

    ``monitor`` is the IOPub socket's monitor (made on the thread that made the socket,
    before that socket is used anywhere else); the watch owns it from :meth:`start` on.
    """

    def __init__(
        self,
        monitor: zmq.Socket[Any],
        timeout: float,
        kernel: WatchedKernel,
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        self.monitor = monitor
        self.timeout = timeout
        self.kernel = kernel
        self.log = log
        #: connected IOPub peers, as the monitor reported them
        self.connections = 0
        #: whether any peer ever connected (before that, :data:`STARTUP_GRACE` at least)
        self.ever_connected = False
        self._thread = threading.Thread(target=self._run, name="orphan-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _count(self) -> None:
        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)["event"]
            if event == zmq.EVENT_ACCEPTED:
                self.connections += 1
                self.ever_connected = True
            elif event == zmq.EVENT_DISCONNECTED:
                # A peer whose handshake failed is disconnected too: never below zero.
                self.connections = max(0, self.connections - 1)

    def limit(self) -> float:
        """The time-out now: a kernel no server has subscribed to yet is still starting
        (the server's activity watcher subscribes once the kernel answered)."""
        return self.timeout if self.ever_connected else max(self.timeout, STARTUP_GRACE)

    def _run(self) -> None:
        alone_since = time.monotonic()
        while True:
            try:
                if self.monitor.poll(int(POLL_SECONDS * 1000)):
                    self._count()
            except zmq.ZMQError:
                # The kernel is exiting (its context terminated): nothing to watch. Closed
                # here, on its own thread, or the context's term would wait for it.
                self.monitor.close(linger=0)
                return
            now = time.monotonic()
            if self.connections > 0 or self.kernel.main_shell_status.busy:
                alone_since = now
            elif now - alone_since >= self.limit():
                self.log.warning(
                    "No server or frontend has listened to this kernel for %.0f s and it ran "
                    "nothing (%s): shutting down",
                    self.limit(),
                    ENV,
                )
                self.monitor.close(linger=0)
                loop = self.kernel.io_loop
                loop.add_callback(loop.stop)
                return


def watch_from_environment(socket: zmq.Socket[Any]) -> tuple[zmq.Socket[Any], float] | None:
    """The IOPub socket's monitor and the time-out, if the launcher asked for one.

    Called where the IOPub socket is made, before any other thread uses it (libzmq's
    ``zmq_socket_monitor`` is a call on the socket).
    """
    timeout = orphan_timeout(os.environ)
    if timeout is None:
        return None
    return socket.get_monitor_socket(EVENTS), timeout
