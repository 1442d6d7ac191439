"""The IOPub options: their defaults, the rule each value must meet, and their one declaration.

Two classes take the options: ``ExtKernelApp`` (``--iopub-*`` flags, ``c.ExtKernelApp.iopub_*``),
which binds the socket and so is the only one that can set the queue size, and ``ExtKernel``
(``c.ExtKernel.iopub_*``, honoured under any app, changeable at run time). Both inherit
:class:`IOPubTraits`, and both validate with the ``check_*`` functions, naming their own option
in the error, so a bad value reads the same whichever way it came in. The socket that uses
the values is :mod:`ipykernel_ext.kernel.iopub`.
"""

from __future__ import annotations

from traitlets import Bool, HasTraits, Integer

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


class IOPubTraits(HasTraits):
    """The IOPub options, declared once for the two classes that take them.

    ``ExtKernelApp`` (``--iopub-*``, ``c.ExtKernelApp.iopub_*``) and ``ExtKernel``
    (``c.ExtKernel.iopub_*``, honoured under any app) both inherit these; each validates with
    the ``check_*`` rules above, naming its own option in the error.
    """

    iopub_sndhwm = Integer(
        DEFAULT_SNDHWM,
        help="""IOPub queue per subscriber, in messages (ZMQ_SNDHWM; 0: unbounded). libzmq
        fixes it when the socket is bound: only ExtKernelApp (python -m ipykernel_ext) binds
        after reading it; under another app a different value is logged as a warning.""",
    ).tag(config=True)

    iopub_nodrop = Bool(
        True,
        help="""Make IOPub wait for room (XPUB_NODROP) instead of silently dropping messages
        for a full subscriber. Off: stock ipykernel behaviour.""",
    ).tag(config=True)

    iopub_send_timeout = Integer(
        DEFAULT_SEND_TIMEOUT_MS,
        help="""Milliseconds a subscriber's IOPub queue may stay full before the kernel gives
        that subscriber up (it then misses messages until it reads again; counted, logged and
        told to the cell). Until then the messages wait in the kernel, nothing is lost, and
        the kernel's channels stay responsive. Covers a server paused or slowed for less.""",
    ).tag(config=True)

    iopub_backlog_limit = Integer(
        DEFAULT_BACKLOG_LIMIT_BYTES,
        help="""Bytes of IOPub messages the kernel may hold while a subscriber's queue is
        full. Past it the full subscriber is given up at once, as at the send timeout, so a
        wait never grows the kernel's memory without bound.""",
    ).tag(config=True)
