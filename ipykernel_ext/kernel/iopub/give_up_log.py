"""The kernel log's warning about IOPub give-ups: every one logged, those close together as one.

The socket (:mod:`ipykernel_ext.kernel.iopub.socket`) calls :meth:`GiveUpWarnings.given_up` after
each give-up it has counted. The first is logged at once; those within WARNING_INTERVAL_S of
the last warning are gathered and logged together by one timer when the interval is over, so
neither a flapping subscriber floods the log nor a second one goes unreported. The warning
reads the socket's counters and settings when it is written, from whichever thread writes it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from .settings import IOPubSettings
from .stats import IOPubStats

#: Give-ups closer together than this are gathered into one warning, logged when it is over.
WARNING_INTERVAL_S = 10.0


class Reporting(Protocol):
    """What the warning reads of the socket, when it is written."""

    log: logging.Logger
    settings: IOPubSettings
    stats: IOPubStats


class GiveUpWarnings:
    """Logs the give-ups ``socket`` counts (``stats.timeouts``), gathering those close together."""

    def __init__(self, socket: Reporting, interval_s: float = WARNING_INTERVAL_S) -> None:
        self._socket = socket
        self._interval_s = interval_s
        self._last_warning = -interval_s
        self._reported = 0
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def given_up(self) -> None:
        """Warn about the give-up just counted: now, or gathered with others a little later."""
        with self._lock:
            if self._timer is not None:
                return  # a gathered warning is already due
            delay = self._last_warning + self._interval_s - time.monotonic()
            if delay > 0:
                self._timer = threading.Timer(delay, self._log)
                self._timer.daemon = True
                self._timer.start()
                return
        self._log()

    def _log(self) -> None:
        socket = self._socket
        stats, settings = socket.stats, socket.settings
        with self._lock:
            self._timer = None
            give_ups = stats.timeouts
            new = give_ups - self._reported
            if new <= 0:
                return
            self._reported = give_ups
            self._last_warning = time.monotonic()
        socket.log.warning(
            "IOPub: %d subscriber stall(s): a frontend's queue stayed full for the whole send "
            "timeout (%.1f s). The messages went to the other frontends; the stalled one missed "
            "at least %d in all and misses IOPub messages until it has read about half its "
            "queue (%d messages). %d give-up(s) in all, %d messages sent. If that frontend is "
            "alive but slow, raise --iopub-send-timeout. Counters: control message "
            "iopub_stats_request.",
            new,
            settings.send_timeout_ms / 1000,
            stats.missed,
            settings.sndhwm // 2,
            give_ups,
            stats.sent,
        )
