"""The IOPub settings: their defaults, the rule each value must meet, and the options that set them.

:class:`IOPubSettings` is what the socket (:mod:`ipykernel_ext.kernel.iopub.socket`) runs with: one
frozen value, checked when it is made and replaced as a whole when an option changes.

Two classes take the options: ``ExtKernelApp`` (``--iopub-*`` flags, ``c.ExtKernelApp.iopub_*``),
which binds the socket and so is the only one that can set the queue size, and ``ExtKernel``
(``c.ExtKernel.iopub_*``, honoured under any app; the send timeout and the backlog budget
can be changed at run time: the kernel's use of them is in :mod:`.kernel_options`).
tests/unit/test_iopub_socket.py holds each option's help against what the socket does. Both inherit
:class:`IOPubTraits`: the options, their validation (one rule per setting, the error naming
the option as each class spells it) and :meth:`IOPubTraits.iopub_settings`, the value they make.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from traitlets import Bool, HasTraits, Integer, TraitError, validate

#: Defaults, chosen from the pause measurements in docs/BENCHMARKS.md and explained in
#: README.md ("Choosing the IOPub defaults"). A subscriber's queue gets room back only after
#: its reader has taken about half of it (libzmq's low-water mark), so a *smaller* queue is
#: kinder to slow readers, and it bounds what a parked subscriber holds in libzmq.
DEFAULT_SNDHWM = 1_000
DEFAULT_SEND_TIMEOUT_MS = 60_000
DEFAULT_BACKLOG_LIMIT_BYTES = 256 * 1024 * 1024


def check_sndhwm(value: int, option: str) -> int:
    """``value`` as an IOPub queue size, or ValueError naming ``option``."""
    if value < 0:
        raise ValueError(f"{option} must be 0 (unbounded) or more, not {value}")
    return int(value)


def check_send_timeout(value: int, option: str) -> int:
    """``value`` as an IOPub send timeout in ms, or ValueError naming ``option``."""
    if value < 1:
        raise ValueError(f"{option} must be at least 1 ms, not {value}")
    return int(value)


def check_backlog_limit(value: int, option: str) -> int:
    """``value`` as an IOPub backlog budget in bytes, or ValueError naming ``option``."""
    if value < 1:
        raise ValueError(f"{option} must be at least 1 byte, not {value}")
    return int(value)


#: The rule of each :class:`IOPubSettings` field that has one (``nodrop`` is any bool).
RULES: dict[str, Callable[[int, str], int]] = {
    "sndhwm": check_sndhwm,
    "send_timeout_ms": check_send_timeout,
    "backlog_limit_bytes": check_backlog_limit,
}


@dataclass(frozen=True)
class IOPubSettings:
    """What one IOPub socket runs with; its fields are also those of ``iopub_stats_reply``.

    Frozen: a change makes a new value (``dataclasses.replace``), which the socket takes as a
    whole on the IOPub thread, so a reader on another thread never sees half of a change.
    A value that breaks a rule is refused when it is made (ValueError naming the field).
    """

    #: each subscriber's queue, in messages (ZMQ_SNDHWM; 0: unbounded)
    sndhwm: int = DEFAULT_SNDHWM
    #: XPUB_NODROP: wait for room instead of dropping (off: stock behaviour)
    nodrop: bool = True
    #: how long a queue may stay full before its subscriber is given up
    send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS
    #: bytes that may wait in the kernel before its output is held back
    backlog_limit_bytes: int = DEFAULT_BACKLOG_LIMIT_BYTES

    def __post_init__(self) -> None:
        for field in fields(self):
            if field.name in RULES:
                RULES[field.name](getattr(self, field.name), field.name)


class IOPubTraits(HasTraits):
    """The IOPub options, declared and validated once for the two classes that take them.

    ``ExtKernelApp`` (``--iopub-*``, ``c.ExtKernelApp.iopub_*``) and ``ExtKernel``
    (``c.ExtKernel.iopub_*``, honoured under any app) both inherit these. Each option is
    tagged with the :class:`IOPubSettings` field it sets (``setting``); a class says how its
    errors name an option by overriding :meth:`_iopub_option`.
    """

    iopub_sndhwm = Integer(
        DEFAULT_SNDHWM,
        help="""IOPub queue per subscriber, in messages (ZMQ_SNDHWM; 0: unbounded): what a
        subscriber that does not read can be sent before its queue is full. libzmq fixes it
        when the socket is bound: only ExtKernelApp (python -m ipykernel_ext) binds after
        reading it; under another app a different value is logged as a warning.""",
    ).tag(config=True, setting="sndhwm")

    iopub_nodrop = Bool(
        True,
        help="""Make IOPub wait for room (XPUB_NODROP) instead of silently dropping messages
        for a full subscriber: they wait in the kernel, in order, and reach it once it reads.
        Off: stock ipykernel behaviour (libzmq drops what finds a queue full).""",
    ).tag(config=True, setting="nodrop")

    iopub_send_timeout = Integer(
        DEFAULT_SEND_TIMEOUT_MS,
        help="""Milliseconds a subscriber's IOPub queue may have no room at all before the
        kernel gives that subscriber up: it then misses messages until it has read about
        half its queue (counted, logged and told to the cell, see iopub_missed_notice);
        the other subscribers lose nothing. Until then the messages wait in the kernel and
        nothing is lost, and the kernel's channels stay responsive while the wait is within
        iopub_backlog_limit. Covers a server paused or slowed for less. Set on the kernel at
        run time (get_ipython().kernel.iopub_send_timeout), it takes effect at once.""",
    ).tag(config=True, setting="send_timeout_ms")

    iopub_backlog_limit = Integer(
        DEFAULT_BACKLOG_LIMIT_BYTES,
        help="""Bytes of IOPub messages that may wait in the kernel while a subscriber's
        queue is full. Past it the output is held back: the IOPub thread waits for room
        until the backlog is under the limit again, so the kernel's threads wait to hand it
        more and the cell slows down (output flushes wait too) instead of the kernel's memory
        growing, and a subscriber that is slow but reading loses nothing. A queue with no
        room for the whole iopub_send_timeout is still given up. Set on the kernel at run
        time (get_ipython().kernel.iopub_backlog_limit), it takes effect at once.""",
    ).tag(config=True, setting="backlog_limit_bytes")

    @validate("iopub_sndhwm", "iopub_send_timeout", "iopub_backlog_limit")
    def _valid_iopub_option(self, proposal: dict[str, Any]) -> int:
        name = proposal["trait"].name
        option, source = self._iopub_option(name)
        try:
            return RULES[self.trait_metadata(name, "setting")](proposal["value"], option)
        except ValueError as exc:
            raise TraitError(f"{exc}{source}") from None

    def _iopub_option(self, name: str) -> tuple[str, str]:
        """How an error names option ``name``, and what it adds after the rule (a source)."""
        return f"{type(self).__name__}.{name}", ""

    def iopub_settings(self) -> IOPubSettings:
        """These options' values, as the socket takes them."""
        return IOPubSettings(
            **{
                trait.metadata["setting"]: getattr(self, name)
                for name, trait in self.traits(setting=lambda field: field is not None).items()
            }
        )
