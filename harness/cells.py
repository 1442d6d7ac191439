"""Running a cell: to its idle and collected, to completion, for a value, or held running.

Owns "send an ``execute_request`` on a ``jupyter_client.BlockingKernelClient`` and read IOPub
until that request's idle" (:func:`run_cell`): the messages whose parent is the request (a
message of any other request is read and skipped), how many of each type came, the
``execute_reply`` and the time to the idle, in one :class:`CellRun`. The tests, the
benchmarks and ``python -m benchmarks demo`` all run their cells through it; the helpers below
it (:func:`run`, :func:`evaluate`, :func:`start_cell`, :func:`busy_cell`) are the shapes tests
use. (The cell *code* of the outputs tests and their marker files are
:mod:`harness.outputs_cells`.)

Two readers that are not a frontend keeping up are built in, since both are what the demo and
the benchmarks compare kernels under:

* a reader that stops reading IOPub mid-cell, as a frontend whose server is busy does
  (:class:`ReaderPause`);
* a reader that expects a lost idle (``quiet``): stock ipykernel drops messages once a client
  is 1000 behind, the idle among them, so its idle may never come.

``timeout`` is a hang guard only, never a verdict: :class:`CellTimeout` says what was read.
A cell that is not run to its idle here waits on its own messages
(:func:`harness.messages.wait_iopub`): a marker it prints, its idle.
"""

from __future__ import annotations

import ast
import queue
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client import BlockingKernelClient

from .messages import is_status, wait_iopub

Message = dict[str, Any]

#: How often a reader that expects a lost idle looks for the reply while IOPub is silent.
POLL_SECONDS = 0.1
#: The execute_reply comes before the idle (ipykernel replies, then publishes the idle), so
#: once the idle is in, the reply is in the shell queue or on its way: this only bounds a hang.
REPLY_AFTER_IDLE_SECONDS = 30.0


@dataclass
class CellRun:
    """What one client saw of one ``execute_request``.

    ``messages`` are the request's IOPub messages that ``keep`` accepted (all by default),
    in order, the idle included; ``counts`` counts every one of them by ``msg_type``, kept
    or not. ``idle`` is False only when a ``quiet`` reader gave up on a lost idle; then
    ``seconds`` is None. ``reply`` is the ``execute_reply`` (None only in a :class:`CellTimeout`
    whose reply had not come).
    """

    msg_id: str
    reply: Message | None = None
    messages: list[Message] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    idle: bool = False
    #: seconds from sending the request to its idle
    seconds: float | None = None

    @property
    def status(self) -> str | None:
        """The execute_reply's ``status`` ("ok", "error", "aborted"), None without a reply."""
        return None if self.reply is None else self.reply["content"].get("status")

    @property
    def error(self) -> str | None:
        """``"ename: evalue"`` of a cell that raised, else None."""
        if self.status != "error":
            return None
        assert self.reply is not None
        content = self.reply["content"]
        return f"{content.get('ename')}: {content.get('evalue')}"


class CellTimeout(TimeoutError):
    """The hang guard: the cell's idle (or, after it, its reply) did not come in time.

    ``run`` holds what had been read by then (``idle`` False).
    """

    def __init__(self, message: str, run: CellRun) -> None:
        super().__init__(message)
        self.run = run


@dataclass(frozen=True)
class ReaderPause:
    """A reader that stops reading IOPub mid-cell, as a frontend whose server is busy does.

    Once ``after`` messages of type ``msg_type`` have come, the reader reads nothing on IOPub
    for ``seconds`` and until the cell's execute_reply has come, so the kernel has sent the
    whole cell's output meanwhile, whatever the machine's speed. jupyter_client's blocking
    client reads a socket only when asked, so the output waits in libzmq's queues and the
    kernel's, as it does for a frontend behind a busy server. Only shell is read meanwhile.
    """

    seconds: float
    after: int = 300
    msg_type: str = "comm_open"


def run_cell(
    kc: BlockingKernelClient,
    code: str,
    timeout: float = 120.0,
    *,
    keep: Callable[[Message], bool] | None = None,
    quiet: float | None = None,
    pause: ReaderPause | None = None,
) -> CellRun:
    """Execute ``code`` on ``kc``; read IOPub until the request's idle; the :class:`CellRun`.

    ``keep(msg)`` says which of the request's messages to keep in ``messages`` (a big burst
    need not be held; ``counts`` counts them all). ``quiet``: the reader expects that the idle
    may be lost, and gives up on it once the execute_reply has come and nothing has come on
    IOPub for ``quiet`` seconds; the run then has ``idle=False``. Without it a lost idle is a
    :class:`CellTimeout` after ``timeout`` seconds, the hang guard for the whole run.
    """
    start = time.monotonic()
    deadline = start + timeout
    run = CellRun(kc.execute(code))
    last_heard = start  # the latest IOPub message, or the reply, or the end of a pause
    paused = False
    while not run.idle:
        now = time.monotonic()
        if now >= deadline:
            raise _timeout(run, code, timeout)
        wait = deadline - now if quiet is None else min(deadline - now, POLL_SECONDS)
        try:
            msg = kc.get_iopub_msg(timeout=wait)
        except queue.Empty:
            if quiet is None:
                continue
            if run.reply is None and (reply := _poll_reply(kc, run.msg_id)) is not None:
                run.reply, last_heard = reply, time.monotonic()
            if run.reply is not None and time.monotonic() - last_heard > quiet:
                return run  # the reply is in and IOPub stayed quiet: the idle was lost
            continue
        last_heard = time.monotonic()
        if msg["parent_header"].get("msg_id") != run.msg_id:
            continue
        msg_type = msg["msg_type"]
        run.counts[msg_type] = run.counts.get(msg_type, 0) + 1
        if keep is None or keep(msg):
            run.messages.append(msg)
        if msg_type == "status" and msg["content"].get("execution_state") == "idle":
            run.idle, run.seconds = True, last_heard - start
        elif (
            pause is not None
            and not paused
            and msg_type == pause.msg_type
            and run.counts[msg_type] == pause.after
        ):
            paused = True
            reply = _pause_reading(kc, run.msg_id, pause.seconds, deadline)
            run.reply = run.reply or reply
            last_heard = time.monotonic()  # quiet is counted from the resume
    if run.reply is None:
        run.reply = _wait_reply(kc, run.msg_id, REPLY_AFTER_IDLE_SECONDS)
        if run.reply is None:
            raise CellTimeout(
                f"the idle of {_what(run, code)} came, but not its execute_reply within "
                f"{REPLY_AFTER_IDLE_SECONDS:g} s",
                run,
            )
    return run


def _what(run: CellRun, code: str) -> str:
    return f"the cell {code[:60]!r} (execute_request {run.msg_id})"


def _timeout(run: CellRun, code: str, timeout: float) -> CellTimeout:
    read = sum(run.counts.values())
    reply = "came" if run.reply is not None else "had not come"
    return CellTimeout(
        f"no idle for {_what(run, code)} in {timeout:g} s: {read} of its IOPub messages were "
        f"read ({run.counts}); its execute_reply {reply}",
        run,
    )


def _poll_reply(kc: BlockingKernelClient, msg_id: str) -> Message | None:
    """The reply to ``msg_id`` if it is in the shell queue now; replies to others are dropped."""
    while True:
        try:
            reply = kc.get_shell_msg(timeout=0)
        except queue.Empty:
            return None
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def _wait_reply(kc: BlockingKernelClient, msg_id: str, seconds: float) -> Message | None:
    """The reply to ``msg_id`` within ``seconds`` (replies to others are dropped), or None."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            reply = kc.get_shell_msg(timeout=remaining)
        except queue.Empty:
            return None
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply
    return None


def _pause_reading(
    kc: BlockingKernelClient, msg_id: str, seconds: float, deadline: float
) -> Message | None:
    """Read nothing on IOPub for ``seconds`` and until the reply to ``msg_id`` has come (or
    ``deadline``, monotonic time); that reply, or None."""
    resume_at = time.monotonic() + seconds
    reply = _wait_reply(kc, msg_id, max(0.0, deadline - time.monotonic()))
    time.sleep(max(0.0, resume_at - time.monotonic()))
    return reply


# --- the shapes tests use ------------------------------------------------------------------


def run(kc: BlockingKernelClient, code: str) -> None:
    """Run ``code`` to its idle; fail with its traceback unless it ends ``ok``."""
    cell = run_cell(kc, code)
    errors = [m["content"]["traceback"] for m in cell.messages if m["msg_type"] == "error"]
    assert cell.status == "ok", errors


@contextmanager
def kernel_set(kc: BlockingKernelClient, name: str, value: Any, after: Any) -> Iterator[None]:
    """``get_ipython().kernel.<name>`` is ``value`` inside the block, ``after`` once out."""
    run(kc, f"get_ipython().kernel.{name} = {value!r}")
    try:
        yield
    finally:
        run(kc, f"get_ipython().kernel.{name} = {after!r}")


#: How many times :func:`evaluate` sends its request again when the kernel aborted it.
EVALUATE_TRIES = 50


def evaluate(kc: BlockingKernelClient, expression: str) -> Any:
    """The value of ``expression`` in the kernel (through repr and ast.literal_eval).

    A request that reaches the kernel right after a cell failed can be *aborted* (ipykernel's
    ``stop_on_error``: what comes while it clears its queue is not run): it was not run, so it
    is sent again, as a user would run the cell again."""
    for _ in range(EVALUATE_TRIES):
        reply = kc.execute_interactive(
            "", user_expressions={"x": expression}, timeout=60, output_hook=lambda m: None
        )
        if reply["content"]["status"] != "aborted":
            break
    assert reply["content"]["status"] == "ok", reply["content"]
    result = reply["content"]["user_expressions"]["x"]
    assert result["status"] == "ok", result
    return ast.literal_eval(result["data"]["text/plain"])


#: What a held cell prints first: :func:`start_cell` returns once it is seen.
START_MARKER = "CELL STARTED"


def start_cell(kc: BlockingKernelClient, code: str, seen: list[Any] | None = None) -> str:
    """Execute ``code`` (which prints :data:`START_MARKER` first); return its msg_id once the
    marker is seen. ``seen`` collects the IOPub messages read meanwhile."""
    msg_id = kc.execute(code)
    wait_iopub(
        kc,
        lambda m: (
            m["msg_type"] == "stream"
            and m["parent_header"].get("msg_id") == msg_id
            and START_MARKER in m["content"]["text"]
        ),
        what="the cell's start marker",
        seen=seen,
    )
    return msg_id


class BusyCell:
    """A cell that runs until :meth:`release`; its execute request's id is ``msg_id``."""

    def __init__(self, kc: BlockingKernelClient, release_file: Path, msg_id: str) -> None:
        self.kc = kc
        self.release_file = release_file
        self.msg_id = msg_id

    def release(self) -> None:
        self.release_file.touch()


@contextmanager
def busy_cell(kc: BlockingKernelClient, tmp_path: Path, then: str = "") -> Iterator[BusyCell]:
    """Run a cell that prints a marker, runs ``then``, and waits for a file; return once the
    marker is seen."""
    release_file = tmp_path / f"release-{uuid.uuid4().hex}"
    code = (
        f"import os as _os, time as _time\nprint({START_MARKER!r}, flush=True)\n{then}\n"
        f"while not _os.path.exists({str(release_file)!r}):\n    _time.sleep(0.01)\n"
    )
    cell = BusyCell(kc, release_file, start_cell(kc, code))
    try:
        yield cell
    finally:
        cell.release()
        wait_iopub(
            kc,
            is_status("idle", cell.msg_id),
            what="the cell's idle",
        )
