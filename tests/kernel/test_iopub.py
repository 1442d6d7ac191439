"""IOPub: no silent loss (PROTOCOL.md section 1), against real kernels over CurveZMQ.

What is checked, and how each check can fail:

* bursts (a GridBox of 1000 and 3000 Buttons, a ``create_comm`` loop of 10000) reach the
  client whole: every ``comm_open``, the ``display_data`` and the idle status;
* NODROP, deterministically: a subscriber that reads only when the kernel waits for it gets
  every message with NODROP on and loses some with ``--no-iopub-nodrop``;
* a stalled subscriber (a SUB socket that never reads) costs about one send timeout, is
  counted, logged once on the kernel's stderr (never on stdout or IOPub), and gets messages
  again once it drains; a subscriber killed mid-burst changes nothing for the others;
* launcher flags, ``--ExtKernelApp.x=`` and config files reach the socket, bad values stop
  the kernel before it writes its connection file;
* the IOPub thread sends more messages from one of its own events than its wake-up pipe holds
  and goes on (stock's thread blocks for ever on its own pipe).

Raw subscribers are plain ``zmq.SUB`` sockets with the connection file's curve keys, a small
``RCVHWM`` and a small kernel receive buffer (``RCVBUF``): a subscriber that does not read
then holds only a few messages besides the kernel's per-subscriber queue (``SNDHWM``).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient, KernelManager

from harness.bursts import (
    STALL_BURST,
    STALL_SNDHWM,
    STALL_TIMEOUT_MS,
    STALL_WARNING,
    Burst,
    assert_burst_whole,
    comm_loop_code,
    run_burst,
    widget_grid_code,
)
from harness.cells import run_cell
from harness.kernels import (
    EXT_KERNEL,
    iopub_stats,
    running_kernel,
    shell_and_control_client,
    unbounded_client,
    wait_stats,
)
from harness.messages import count_types, is_idle_for, shell_reply
from harness.raw_subscriber import RawSubscriber
from ipykernel_ext.kernel.iopub.notice import NOTICE_PREFIX
from ipykernel_ext.kernel.iopub.settings import DEFAULT_SEND_TIMEOUT_MS


def count_for(messages: list[dict[str, Any]], msg_id: str) -> dict[str, int]:
    """Counts by type of the messages whose parent is ``msg_id``."""
    return count_types([m for m in messages if m["parent_header"].get("msg_id") == msg_id])


# --- 1. bursts ----------------------------------------------------------------------


# Hang guard: a kernel start and up to 3000 Buttons read whole (a minute under load).
@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    ("code", "comm_opens"),
    [
        # A Button, its Layout and its ButtonStyle per button; the GridBox and its Layout.
        (widget_grid_code(1000), 3 * 1000 + 2),
        (widget_grid_code(3000), 3 * 3000 + 2),
        (comm_loop_code(10_000) + "\ndisplay('done')", 10_000),
    ],
    ids=["grid-1000", "grid-3000", "create_comm-10000"],
)
def test_burst_arrives_whole(ext_kernel: Any, code: str, comm_opens: int) -> None:
    assert_burst_whole(run_burst(ext_kernel[1], code), comm_opens)


# --- 2. NODROP, deterministically ---------------------------------------------------

NODROP_HWM = 20
NODROP_BURST = 1500
NODROP_PAD = 16_000  # bytes per message: TCP buffers then hold few messages
#: The cell's IOPub messages: busy, execute_input, the comm_opens, idle.
NODROP_CELL_MESSAGES = NODROP_BURST + 3
#: The subscriber's kernel receive buffer (RawSubscriber's default, named here because the
#: bound below counts it): 4 times a message, so TCP's window does not pace the reading (a
#: 4 kB buffer, smaller than one message, makes each read wait on the window: minutes on a
#: loaded machine), yet a subscriber that does not read holds few of these messages.
NODROP_RCVBUF = 64 * 1024


def most_a_silent_subscriber_holds() -> int:
    """How many NODROP_PAD messages a subscriber that never reads can hold, at most.

    Its queue in the kernel, its own queue (RCVHWM 1), its receive buffer (Linux doubles
    SO_RCVBUF) and the kernel's send buffer (at most ``tcp_wmem``'s maximum).
    """
    wmem = Path("/proc/sys/net/ipv4/tcp_wmem")
    send_buffer = int(wmem.read_text().split()[2]) if wmem.exists() else 4 * 1024 * 1024
    return NODROP_HWM + 1 + (2 * NODROP_RCVBUF + send_buffer) // NODROP_PAD + 1


@dataclass
class WaitedForRun:
    """What :func:`read_only_when_waited_for` saw, and what a failure must report."""

    msg_id: str
    #: every message read up to the barrier's idle, in order
    received: list[dict[str, Any]]
    #: iopub_stats before the cell (after the shell barrier) and after the reading
    before: dict[str, Any]
    stats: dict[str, Any]
    #: when no idle came before the barrier: what came after it, up to the idle
    after_barrier: list[dict[str, Any]] | None = None

    @property
    def counts(self) -> dict[str, int]:
        """The cell's messages by type, wherever they came (before or after the barrier)."""
        return count_for(self.received + (self.after_barrier or []), self.msg_id)

    @property
    def idle(self) -> bool:
        """The cell's idle reached the subscriber (NODROP's promise), before the barrier or
        after it: the barrier only says when the reading may stop."""
        return any(is_idle_for(m, self.msg_id) for m in self.received + (self.after_barrier or []))

    @property
    def idle_after_barrier(self) -> bool | None:
        """None: the idle came before the barrier, or was not looked for after it."""
        if self.after_barrier is None:
            return None
        return any(is_idle_for(m, self.msg_id) for m in self.after_barrier)

    def describe(self) -> str:
        """The kernel's counters, the last messages read, and where the idle was."""
        last = [(m["header"]["msg_type"], self._parent(m)) for m in self.received[-8:]]
        before_barrier = any(is_idle_for(m, self.msg_id) for m in self.received)
        where = {
            None: "not looked for after it",
            True: "it came after the barrier (the baseline was not exact: the reading "
            "stopped before the kernel had sent it)",
            False: f"nor in {IDLE_AFTER_BARRIER_S} s after it (the kernel lost it)",
        }[self.idle_after_barrier]
        sent = self.stats["sent"] - self.before["sent"]
        return (
            f"counts {self.counts}; idle before the barrier: {before_barrier}, {where}; "
            f"sent since the baseline {sent} (the cell is {NODROP_CELL_MESSAGES}, each barrier "
            f"2 more); last messages read (type, parent): {last}; iopub_stats {self.stats}"
        )

    def _parent(self, msg: dict[str, Any]) -> str | None:
        """``"cell"`` for the cell's messages, else the parent's type (a barrier's, ...)."""
        if msg["parent_header"].get("msg_id") == self.msg_id:
            return "cell"
        return msg["parent_header"].get("msg_type")


#: How long the reading goes on after the barrier for an idle that did not come before it.
#: A hang guard, used only on the way to a failure: the cell's reply has come by then.
IDLE_AFTER_BARRIER_S = 30


def read_to_shell_barrier(kc: BlockingKernelClient, sub: RawSubscriber) -> None:
    """Read ``sub`` up to the idle of a *shell* ``kernel_info_request``: the baseline.

    The main shell handles requests one at a time and publishes a request's idle after its
    reply: once this idle is read, the idles of the client's start-up requests were too, and
    nothing sent before the cell can be counted in ``sent`` after the baseline.
    """
    barrier = kc.kernel_info()
    sub.read_until(lambda m: is_idle_for(m, barrier), timeout=60)
    shell_reply(kc, barrier)


def read_only_when_waited_for(
    kc: BlockingKernelClient,
    sub: RawSubscriber,
    code: str,
    batch: int,
    look_for_idle: bool,
    timeout: float = 45,
) -> WaitedForRun:
    """Run ``code``; ``sub`` reads only while the kernel holds messages back for it (at most
    ``batch`` of those each time), and once the kernel has taken the whole cell.

    With NODROP off there is never a backlog, so ``sub`` reads nothing until ``sent`` shows
    the whole cell (its idle included) handed to the socket: what did not fit is lost,
    whatever the machine's speed; then it reads up to a barrier. That count is exact only
    from an exact baseline (:func:`read_to_shell_barrier`). ``look_for_idle``: if the cell's
    idle was not before the barrier, read on for it (NODROP promises it). ``timeout`` is a
    hang guard.
    """
    read_to_shell_barrier(kc, sub)
    before = iopub_stats(kc)
    msg_id = kc.execute(code)
    received: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        stats = iopub_stats(kc)
        # Only the cell publishes meanwhile (an iopub_stats_request publishes no status).
        if stats["sent"] - before["sent"] >= NODROP_CELL_MESSAGES:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"the kernel did not take the whole cell in {timeout} s: {stats}")
        for _ in range(min(stats["backlog_messages"], batch)):
            msg = sub.recv(timeout=30)
            if msg is None:
                raise AssertionError(f"held messages did not come in 30 s; {stats}")
            received.append(msg)
        if not stats["backlog_messages"]:
            time.sleep(0.01)  # paces the polls
    received += sub.read_to_barrier(kc, timeout=timeout)
    assert shell_reply(kc, msg_id)["content"]["status"] == "ok"
    run = WaitedForRun(msg_id, received, before, iopub_stats(kc))
    if look_for_idle and not run.idle:
        # Whether the reading stopped too early or the kernel lost it: read on for it.
        run.after_barrier = sub.read_until(
            lambda m: is_idle_for(m, msg_id), timeout=IDLE_AFTER_BARRIER_S
        )
    return run


@pytest.mark.parametrize("nodrop", [True, False], ids=["nodrop", "no-nodrop"])
def test_nodrop_makes_a_slow_subscriber_lose_nothing(nodrop: bool) -> None:
    # The burst is over twice what a subscriber that does not read can hold.
    assert 2 * most_a_silent_subscriber_holds() < NODROP_BURST
    args = [f"--iopub-sndhwm={NODROP_HWM}", "--iopub-send-timeout=60000"]
    if not nodrop:
        args.append("--no-iopub-nodrop")
    with (
        running_kernel(EXT_KERNEL, args, client=shell_and_control_client) as (km, kc),
        RawSubscriber(km, rcvbuf=NODROP_RCVBUF) as sub,
    ):
        run = read_only_when_waited_for(
            kc,
            sub,
            comm_loop_code(NODROP_BURST, pad=NODROP_PAD),
            batch=2 * NODROP_HWM,
            look_for_idle=nodrop,
        )
    stats = run.stats
    assert (stats["sndhwm"], stats["nodrop"]) == (NODROP_HWM, nodrop)
    if nodrop:
        assert run.counts.get("comm_open", 0) == NODROP_BURST, run.describe()
        # NODROP's promise is that the idle arrives; its place against the barrier is the
        # harness's (an exact baseline puts it before), and describe() says which it was.
        assert run.idle, run.describe()
        assert stats["waits"] >= 1, f"the kernel never waited: the test proved nothing; {stats}"
        assert stats["timeouts"] == 0, run.describe()
    else:
        # The same subscriber, the same burst, no waiting: messages are lost.
        assert run.counts.get("comm_open", 0) < NODROP_BURST, run.describe()
        assert stats["waits"] == 0, run.describe()


# --- 3 and 5. a stalled subscriber; the warning on stderr ---------------------------


@dataclass
class StallRun:
    """Everything one stall scenario produced, for the tests below to look at."""

    km: KernelManager
    kc: BlockingKernelClient
    baseline: Burst
    stalled: Burst
    stats_before: dict[str, Any]
    stats_after: dict[str, Any]
    after_reply: dict[str, Any]
    stats_after_reply: dict[str, Any]
    drained: int
    resumed_counts: dict[str, int]
    stdout_path: Path
    stderr_path: Path
    stderr_after_stall: str


@pytest.fixture(scope="module")
def stall_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StallRun]:
    """One kernel (short send timeout, stdout/stderr to files) through a stall episode.

    A baseline burst with one reading client; the same burst with a second subscriber that
    never reads; an execute_request right after; then the stalled subscriber drains and must
    receive a new cell's output.
    """
    logs = tmp_path_factory.mktemp("stall-logs")
    stdout_path, stderr_path = logs / "kernel.stdout", logs / "kernel.stderr"
    args = [f"--iopub-sndhwm={STALL_SNDHWM}", f"--iopub-send-timeout={STALL_TIMEOUT_MS}"]
    with (
        stdout_path.open("wb") as out,
        stderr_path.open("wb") as err,
        # The reading client's queue must never be the one found full (unbounded_client): a
        # busy machine starved it past the 2 s send timeout once, and it was given up too.
        running_kernel(
            EXT_KERNEL, args, unbounded_client, launch={"stdout": out, "stderr": err}
        ) as (km, kc),
    ):
        code = comm_loop_code(STALL_BURST, pad=1000)
        baseline = run_burst(kc, code)
        stats_before = iopub_stats(kc)
        with RawSubscriber(km) as stalled_sub:
            stalled = run_burst(kc, code)
            stats_after = iopub_stats(kc)
            after_reply = run_cell(kc, "1 + 1", timeout=30).reply
            assert after_reply is not None
            stats_after_reply = iopub_stats(kc)
            stderr_after_stall = stderr_path.read_text()
            # The stalled subscriber wakes up: it reads what it holds, then a new cell.
            drained = len(stalled_sub.read_to_barrier(kc))
            msg_id = kc.execute("print('after the stall')")
            seen = stalled_sub.read_until(lambda m: is_idle_for(m, msg_id), timeout=30)
            kc.get_shell_msg(timeout=30)
        yield StallRun(
            km=km,
            kc=kc,
            baseline=baseline,
            stalled=stalled,
            stats_before=stats_before,
            stats_after=stats_after,
            after_reply=after_reply,
            stats_after_reply=stats_after_reply,
            drained=drained,
            resumed_counts=count_for(seen, msg_id),
            stdout_path=stdout_path,
            stderr_path=stderr_path,
            stderr_after_stall=stderr_after_stall,
        )


# Hang guard: the module's stall episode (stall_run): two bursts, a subscriber that never
# reads, the send timeout, then the drain.
@pytest.mark.timeout(180)
def test_stalled_subscriber(stall_run: StallRun) -> None:
    """It costs the reader nothing and one give-up, is counted, does not delay the next cell,
    gets messages again once it drains, is logged once on stderr and noticed once in the cell."""
    run, before, after = stall_run, stall_run.stats_before, stall_run.stats_after
    # The reader gets every message, with and without the stalled subscriber.
    assert run.baseline.counts.get("comm_open") == STALL_BURST
    assert run.stalled.counts.get("comm_open") == STALL_BURST
    assert run.stalled.reply["content"]["status"] == "ok"
    # One give-up, not one per message: libzmq parks the pipe the give-up found full, and a
    # parked pipe does not count for NODROP.
    assert after["timeouts"] - before["timeouts"] == 1, (before, after)
    assert after["over_budget"] == before["over_budget"]
    # Counted.
    missed = after["missed"] - before["missed"]
    assert missed >= 1
    assert after["stalls"] - before["stalls"] >= 1
    assert after["send_timeout_ms"] == STALL_TIMEOUT_MS
    assert after["sent"] - before["sent"] >= STALL_BURST
    # The kernel answers right after, waiting for nobody (the pipe stays parked).
    assert run.after_reply["content"]["status"] == "ok"
    assert run.stats_after_reply["timeouts"] == after["timeouts"]
    assert run.stats_after_reply["sent"] > after["sent"]
    # Drained, it gets a new cell's messages.
    assert run.drained >= STALL_SNDHWM - 1
    assert run.resumed_counts.get("stream") == 1, run.resumed_counts
    assert run.resumed_counts.get("status") == 2
    # Logged once on stderr (later stalls within 10 s would be gathered into one later line),
    # never on stdout nor on IOPub.
    warnings = [ln for ln in run.stderr_after_stall.splitlines() if STALL_WARNING in ln]
    assert len(warnings) == 1, run.stderr_after_stall
    assert "WARNING" in warnings[0]
    assert "IOPub: 1 subscriber stall(s)" in warnings[0]
    assert run.stdout_path.read_text() == ""
    for msg in run.baseline.others:
        assert msg["msg_type"] != "stream", msg["content"]
    # The stalled cell is told once, on its stderr ahead of its idle, how many were missed.
    notices = [m for m in run.stalled.others if m["msg_type"] == "stream"]
    assert len(notices) == 1, notices
    assert notices[0]["content"]["name"] == "stderr"
    text = notices[0]["content"]["text"]
    assert text.startswith(NOTICE_PREFIX) and f"at least {missed} " in text, text
    assert after["notices"] - before["notices"] == 1


SLEEPY_SUBSCRIBER = textwrap.dedent(
    """
    import json, os, sys, time, zmq
    info = json.load(open(sys.argv[1]))
    s = zmq.Context().socket(zmq.SUB)
    s.rcvhwm = 1
    s.rcvbuf = 4096
    s.curve_secretkey = info["curve_secretkey"].encode()
    s.curve_publickey = info["curve_publickey"].encode()
    s.curve_serverkey = info["curve_publickey"].encode()
    token = os.urandom(8).hex().encode()
    s.subscribe(b"")
    s.subscribe(token)
    s.connect("tcp://%s:%d" % (info["ip"], info["iopub_port"]))
    while s.recv_multipart()[0] != token:  # our own iopub_welcome: subscribed
        pass
    print("subscribed", flush=True)
    time.sleep(3600)
    """
)


# Hang guard: a kernel of its own, a burst, and a subscriber process killed mid-burst.
@pytest.mark.timeout(180)
def test_subscriber_killed_mid_burst_changes_nothing(stall_run: StallRun) -> None:
    km, kc = stall_run.km, stall_run.kc
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEPY_SUBSCRIBER, km.connection_file],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "subscribed"
        os.kill(proc.pid, signal.SIGSTOP)  # a frontend whose process is stopped
        msg_id = kc.execute(comm_loop_code(STALL_BURST, pad=1000))
        counts: dict[str, int] = {}
        # About when its queue fills: the kernel is about to wait, or waiting, for it.
        kill_at = stall_run.stats_after["sndhwm"] - 100
        deadline = time.monotonic() + 120
        while True:
            try:
                msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no idle in 120 s; got {counts}; {iopub_stats(kc)}")
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            counts[msg["msg_type"]] = counts.get(msg["msg_type"], 0) + 1
            if counts.get("comm_open") == kill_at:
                proc.kill()
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert counts.get("comm_open") == STALL_BURST
        reply = run_cell(kc, "1 + 1", timeout=30).reply
        assert reply is not None
        assert reply["content"]["status"] == "ok"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# Hang guard: a kernel of its own and a burst against a subscriber that reads nothing.
@pytest.mark.timeout(180)
def test_sndhwm_is_the_queue_each_subscriber_gets() -> None:
    """A subscriber that never reads holds ``--iopub-sndhwm`` messages, not libzmq's 1000.

    SNDHWM set after bind would still read back right through getsockopt while every pipe
    keeps 1000 (docs/UPSTREAM_NOTES.md), so this counts what a stalled subscriber got.
    """
    sndhwm = 5000
    args = [f"--iopub-sndhwm={sndhwm}", "--iopub-send-timeout=200"]
    with (
        running_kernel(EXT_KERNEL, args, client=shell_and_control_client) as (km, kc),
        RawSubscriber(km) as sub,
    ):
        # 2 kB messages: the kernel's TCP send buffer (at most 4 MB by default on Linux) then
        # holds fewer than half a queue, which libzmq does not count against SNDHWM.
        msg_id = kc.execute(comm_loop_code(2 * sndhwm, pad=2000))
        shell_reply(kc, msg_id, timeout=60)  # other replies (the client's own) may come first
        # The cell's reply does not wait for IOPub: the subscriber must be given up (and the
        # backlog sent) before it reads, or its reading would make room and nothing be held.
        stats = wait_stats(
            kc,
            lambda s: s["timeouts"] >= 1 and s["backlog_messages"] == 0,
            "the never-reading subscriber given up",
        )
        held = len(sub.read_to_barrier(kc))
    # What the subscriber read before the cell (RawSubscriber waits for both iopub_welcome,
    # b"" and its own topic, and reads whatever came before them: the idle of the client's
    # kernel_info_request can, once in a while) still takes places in its queue: libzmq tells
    # the sending side of reads only once about half a queue was read. So the cell fills at
    # least sndhwm minus those (with the bound at sndhwm - 2, a quiet run once held 4997).
    assert sndhwm - sub.read_at_start <= held <= 1.5 * sndhwm, (held, sub.read_at_start, stats)


# --- 4. flags, config, bad values ---------------------------------------------------


def settings(stats: dict[str, Any]) -> tuple[int, bool, int]:
    return stats["sndhwm"], stats["nodrop"], stats["send_timeout_ms"]


JUPYTER_CONFIG = "c.ExtKernelApp.iopub_sndhwm = 321\nc.ExtKernelApp.iopub_send_timeout = 1234\n"
#: Stock ipykernel's own config file, in the IPython profile: a drop-in must read it.
IPYTHON_CONFIG = "c.ExtKernelApp.iopub_sndhwm = 222\nc.ExtKernelApp.iopub_nodrop = False\n"
#: name: (arguments, (config file kind, its text) or None, the settings in force)
SETTINGS_CASES = {
    "launcher flags": (
        ["--iopub-sndhwm=123", "--iopub-send-timeout=456", "--no-iopub-nodrop"],
        None,
        (123, False, 456),
    ),
    "traitlets options": (
        [
            "--ExtKernelApp.iopub_sndhwm=0",
            "--ExtKernelApp.iopub_send_timeout=1500",
            "--ExtKernelApp.iopub_nodrop=True",
        ],
        None,
        (0, True, 1500),
    ),
    "jupyter config file": ([], ("jupyter", JUPYTER_CONFIG), (321, True, 1234)),
    "the command line wins": (
        ["--iopub-sndhwm=555"],
        ("jupyter", JUPYTER_CONFIG),
        (555, True, 1234),
    ),
    "ipython kernel config file": (
        [],
        ("ipython", IPYTHON_CONFIG),
        (222, False, DEFAULT_SEND_TIMEOUT_MS),
    ),
}


def config_env(tmp_path: Path, kind: str, text: str) -> dict[str, str]:
    """An environment whose Jupyter (or IPython profile) config file is ``text``."""
    if kind == "jupyter":
        (tmp_path / "jupyter_kernel_config.py").write_text(text)
        return dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path))
    profile = tmp_path / "profile_default"
    profile.mkdir()
    (profile / "ipython_kernel_config.py").write_text(text)
    return dict(os.environ, IPYTHONDIR=str(tmp_path))


# Hang guard, tighter than the default: one kernel start and one query.
@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(SETTINGS_CASES))
def test_options_reach_the_socket(tmp_path: Path, case: str) -> None:
    args, config, expected = SETTINGS_CASES[case]
    env = None if config is None else config_env(tmp_path, *config)
    with running_kernel(EXT_KERNEL, args, env=env) as (_, kc):
        stats = iopub_stats(kc)
    assert stats["status"] == "ok", stats
    assert settings(stats) == expected
    assert stats["sent"] > 0  # at least the client's iopub_welcome


BAD_VALUES = [
    (["--iopub-sndhwm=-1"], "iopub_sndhwm"),
    (["--iopub-sndhwm=lots"], "iopub_sndhwm"),
    (["--iopub-sndhwm=1.5"], "iopub_sndhwm"),
    (["--iopub-send-timeout=0"], "iopub_send_timeout"),
    (["--iopub-send-timeout=-5"], "iopub_send_timeout"),
    (["--iopub-send-timeout=2s"], "iopub_send_timeout"),
    (["--ExtKernelApp.iopub_sndhwm=-3"], "iopub_sndhwm"),
    ([], "iopub_send_timeout"),  # from the config file written below
]


# Hang guard: several kernel processes that must exit at start-up (one that starts hangs).
@pytest.mark.timeout(90)
def test_bad_values_stop_the_kernel_before_it_starts(tmp_path: Path) -> None:
    # The case without an argument of its own takes its bad value from a config file.
    (tmp_path / "none").mkdir()
    (tmp_path / "bad").mkdir()
    no_config = config_env(tmp_path / "none", "jupyter", "")
    bad_config = config_env(tmp_path / "bad", "jupyter", "c.ExtKernelApp.iopub_send_timeout = -1\n")
    procs = []
    for i, (args, _option) in enumerate(BAD_VALUES):
        connection_file = tmp_path / f"kernel-{i}.json"
        argv = [sys.executable, "-m", "ipykernel_ext", *args, "-f", str(connection_file)]
        env = no_config if args else bad_config
        pipe = subprocess.PIPE
        procs.append(
            (connection_file, subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True, env=env))
        )
    for (connection_file, proc), (args, option) in zip(procs, BAD_VALUES, strict=True):
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode != 0, (args, out, err)
        assert option in err, (args, err)
        assert "Traceback" not in err, (args, err)
        # The connection file is written only after every socket is bound.
        assert not connection_file.exists(), args
        assert "To connect another client" not in out + err


# --- 6. the IOPub thread never waits on its own wake-ups ----------------------------

#: Messages sent from one event on the IOPub thread: more than its own wake-up pipe holds
#: (2000, libzmq's default high water marks of the PUSH and the PULL).
SELF_WAKEUPS = 5000

ON_THE_IOPUB_THREAD = f"""
import threading
_done = threading.Event()
def _flush_lines():
    for i in range({SELF_WAKEUPS}):
        print(f"io {{i}}", flush=True)
    _done.set()
get_ipython().kernel.iopub_thread.schedule(_flush_lines)
print("sent", _done.wait(60))
"""


# Hang guard: the cell takes about a second; stock's never ends.
@pytest.mark.timeout(150)
def test_the_iopub_thread_never_waits_on_its_own_wakeups(kernel: BlockingKernelClient) -> None:
    """Flushes on the IOPub thread (where ipykernel runs every flush of a stream and where
    each of them schedules its send) put a wake-up each into that thread's own pipe, read only
    by the thread itself, one a turn. Threads printing flushed lines beside a cell pile such
    wake-ups up on a loaded machine, seen as a thread-beside-cell flood that stopped after
    about 2000 messages and never ended ("IOStream.flush timed out" every 10 s). Here one
    event sends 5000 at once, more than the pipe holds: every line arrives, in order, then
    the cell's own line. On stock ipykernel and on 109f109 (no ``WakeSafeIOPubThread``) the
    IOPub thread blocks for ever on its 2001st wake-up and nothing more leaves the kernel
    (checked)."""
    run = run_cell(kernel, ON_THE_IOPUB_THREAD, timeout=60)
    text = "".join(m["content"]["text"] for m in run.messages if m["msg_type"] == "stream")
    assert text == "".join(f"io {i}\n" for i in range(SELF_WAKEUPS)) + "sent True\n"
