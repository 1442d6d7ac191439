"""CPU time of a kernel process, thread by thread: where a request's cost goes.

Linux only: ``/proc/PID/task/TID/stat`` gives each thread's user and system time; the kernel
itself names its Python threads (``threading.enumerate()``: ``MainThread``, ``Shell channel``,
``IOPub``, ``Control``, a subshell's, jupyter-ui-poll's), asked through a client. A thread that
is not a Python thread (libzmq's I/O threads, which do CurveZMQ's encryption) is counted under
:data:`NATIVE`. A profile that sees every thread, unlike cProfile (the main thread only)::

    before = thread_times(pid)
    ...  # the requests
    spent = since(before, thread_times(pid))   # {tid: seconds}
    by_name = named(spent, thread_names(kc), thread_times(pid))  # {"IOPub": seconds, ...}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from jupyter_client import BlockingKernelClient

from .cells import evaluate

#: Where the threads that are not Python threads are counted (libzmq's I/O threads).
NATIVE = "not Python (libzmq I/O)"
#: Where the threads that ended before the names were asked are counted (jupyter-ui-poll's
#: loop thread lives as long as its ``with ui_events()``).
ENDED = "ended since (jupyter-ui-poll's)"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def thread_times(pid: int) -> dict[int, float]:
    """User + system CPU seconds of each thread of process ``pid``, by thread id."""
    times: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        # The fields after the command name, which is in parentheses and may hold spaces.
        fields = stat.rsplit(")", 1)[1].split()
        times[int(task.name)] = (int(fields[11]) + int(fields[12])) / _TICKS
    return times


def since(before: dict[int, float], after: dict[int, float]) -> dict[int, float]:
    """CPU seconds each thread spent between two :func:`thread_times`."""
    return {tid: seconds - before.get(tid, 0.0) for tid, seconds in after.items()}


def thread_names(kc: BlockingKernelClient) -> dict[int, str]:
    """The kernel's Python threads by native id (a subshell's name is kept whole)."""
    names: dict[int, str] = evaluate(
        kc, "{t.native_id: t.name for t in __import__('threading').enumerate()}"
    )
    return names


def named(
    spent: Mapping[int, float], names: dict[int, str], alive: Mapping[int, float]
) -> dict[str, float]:
    """``spent`` summed by thread name (``names`` and ``alive``, the :func:`thread_times`, taken
    together); every subshell's thread under ``subshell``."""
    totals: dict[str, float] = {}
    for tid, seconds in spent.items():
        name = names.get(tid, NATIVE if tid in alive else ENDED)
        key = "subshell" if name.startswith("subshell") else name
        totals[key] = totals.get(key, 0.0) + seconds
    return totals
