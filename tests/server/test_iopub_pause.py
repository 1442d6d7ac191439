"""A subscriber that pauses or reads slowly, then carries on, loses nothing (PROTOCOL.md s. 1).

The subscriber is jupyter_server (or a reader behind a rate-limited link), paused at a count:
once the client saw ``PAUSE_AFTER_COMM_OPEN`` comm_open of the seed's 3000-Button burst, the
cell waits until the pause began (:func:`harness.bursts.gated_widget_grid_code`), so the rest
is made while it holds. Pauses: the server's event loop blocked (pause_extension), the server
SIGSTOPped, gateway_provisioners' DistributedProvisioner with its default settings (stopped
mid-burst too, so it falls behind on any machine), a tbf-shaped veth link (read slowly all
along: a burst of ``SLOW_READER_BUTTONS``, the seed's under ``--full-size``).
Each time the client gets every comm_open (9002 for the seed) and the idle, the kernel's
``iopub_stats`` show the pause held it up (``stalls``/``waits``) and ``missed == 0``. A
server-side pause lasts ``PAUSE_SECONDS`` and then until the kernel's counters show it held
messages back (:func:`held_up`).

Then a subscriber that never reads: given up, counted, the backlog within its limit, told
what it missed once it reads again; and control answers while the backlog is not empty.
Verdicts are counts, never timings; CurveZMQ everywhere.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client import BlockingKernelClient

from harness.burst_reader import SCRIPT as BURST_READER
from harness.bursts import (
    PAUSE_AFTER_COMM_OPEN,
    SEED_BUTTONS,
    PausedBurst,
    comm_loop_code,
    gated_widget_grid_code,
    run_paused_burst,
)
from harness.kernel_websocket import KernelWebsocket
from harness.kernels import (
    EXT_KERNEL,
    install_ssh_spec,
    iopub_stats,
    running_kernel,
    shell_and_control_client,
)
from harness.messages import is_idle_for, is_status, shell_reply, wait_iopub
from harness.netns import VethNamespace, limit_rate, namespaces_missing, veth_namespace
from harness.raw_subscriber import RawSubscriber
from harness.server import JupyterServer
from ipykernel_ext.kernel.iopub.stats import ADOPTED

# Hang guard per test (default 120 s): a jupyter_server, a kernel, and a burst read through
# a pause or a rate-limited link.
pytestmark = pytest.mark.timeout(300)

#: The server-side pauses' least length: past stock's 2 s send timeout, under our 60 s default.
PAUSE_SECONDS = 5.0


@contextlib.contextmanager
def kernel_counters(server: JupyterServer, kernel_id: str) -> Iterator[Callable[[], bool]]:
    """A pause's end: the kernel held IOPub messages back since this began (:func:`held_up`),
    asked on a control channel straight to the kernel, as a paused server answers nothing."""
    kc = BlockingKernelClient(connection_file=str(server.runtime_dir / f"kernel-{kernel_id}.json"))
    kc.load_connection_file()
    kc.start_channels(shell=False, iopub=False, stdin=False, hb=False, control=True)
    try:
        yield held_up(lambda: iopub_stats(kc))
    finally:
        kc.stop_channels()


def gated_burst(release: Path, buttons: int = SEED_BUTTONS) -> str:
    """The seed's burst (or one of ``buttons``), held at comm_open ``PAUSE_AFTER_COMM_OPEN``
    until ``release`` exists (made once the server is paused: else the server could relay it
    all before its pause)."""
    return gated_widget_grid_code(buttons, PAUSE_AFTER_COMM_OPEN // 3, str(release))


#: The rate-limited link's burst: 1000 Buttons, 3002 comm_open. The reader is slow all along,
#: so the time is the burst's size over the link's rate (the seed's 3000 took 51 s). What the
#: size must do is keep the kernel's queue and the buffers behind it full for longer than a
#: 2 s send timeout; a third of the seed does (the kernel waits, and with
#: ``--iopub-send-timeout=2000`` it gives the reader up, which misses 1010 of 3002).
#: ``--full-size``: the seed's 3000. (gateway_provisioners' reader always runs the seed's: see
#: its test.)
SLOW_READER_BUTTONS = 1000


def slow_reader_buttons(full_size: bool) -> int:
    return SEED_BUTTONS if full_size else SLOW_READER_BUTTONS


def held_up(stats: Callable[[], dict[str, Any]]) -> Callable[[], bool]:
    """True once ``stats()`` shows more waits or stalls than when this was made."""
    before = stats()

    def the_kernel_held_messages_back() -> bool:
        now = stats()
        return now["stalls"] > before["stalls"] or now["waits"] > before["waits"]

    return the_kernel_held_messages_back


def ws_stats(ws: KernelWebsocket) -> dict[str, Any]:
    reply = ws.request("control", "iopub_stats_request", timeout=60)
    assert reply["msg_type"] == "iopub_stats_reply", reply
    return reply["content"]


def given_up(stats: dict[str, Any]) -> int:
    """Subscribers given up so far (their queue stayed full for the whole send timeout)."""
    return int(stats["timeouts"])


def assert_whole_and_stalled(
    burst: PausedBurst,
    before: dict[str, Any],
    after: dict[str, Any],
    buttons: int = SEED_BUTTONS,
) -> None:
    """The verdict of every pause test: nothing lost, and the pause did hold the kernel up."""
    assert burst.paused is not False, "the burst ended before the pause: it proved nothing"
    # Loss first: what fails on a kernel that gives a paused subscriber up after 2 s.
    comm_opens = 3 * buttons + 2  # 3 per Button, 2 for the grid (9002 for the seed's)
    assert burst.counts.get("comm_open", 0) == comm_opens, (burst.counts, after)
    assert burst.idle, (burst.counts, after)
    assert burst.counts.get("display_data", 0) == 1, burst.counts
    assert burst.status == "ok", burst.reply
    assert burst.counts.get("stream", 0) == 0, [m["content"] for m in burst.others]  # no notice
    # Never given up (a 2 s send timeout does give it up); nobody missed anything.
    assert given_up(after) - given_up(before) == 0, (before, after)
    assert after["missed"] - before["missed"] == 0, (before, after)
    # The pause must have made the kernel wait, or the test showed nothing about pauses.
    assert after["stalls"] > before["stalls"] or after["waits"] > before["waits"], (before, after)


# --- a paused jupyter_server --------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[JupyterServer]:
    with JupyterServer(pause_extension=True) as srv:
        yield srv


@pytest.fixture
def ws(server: JupyterServer) -> Iterator[KernelWebsocket]:
    kernel_id = server.start_kernel(EXT_KERNEL)
    try:
        with KernelWebsocket(server, kernel_id) as client:
            client.run("import ipywidgets")  # the import is not part of the burst
            yield client
    finally:
        server.shutdown_kernel(kernel_id)


@pytest.mark.parametrize("how", ["event-loop-block", "sigstop"])
def test_a_paused_server_gets_the_whole_burst(
    server: JupyterServer, ws: KernelWebsocket, how: str, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    with kernel_counters(server, ws.kernel_id) as kernel_waited:

        def pause() -> Any:
            pausing = server.stop_process if how == "sigstop" else server.block_event_loop
            return pausing(PAUSE_SECONDS, until=kernel_waited, on_started=release.touch)

        before = ws_stats(ws)
        burst = run_paused_burst(ws, gated_burst(release), pause)
        after = ws_stats(ws)
    assert_whole_and_stalled(burst, before, after)


# --- a slow reader: gateway_provisioners' launcher with its default settings ----------------

#: The only setting changed (gateway_provisioners refuses root by default; CI may be root):
#: GP_SOCKET_TIMEOUT keeps its 0.01 s default, which blocks the server's loop 10 ms a turn.
GP_ENV = {"GP_UNAUTHORIZED_USERS": "ipykernel-ext-tests-nobody"}
GP_KERNEL = "ssh_python_ext_pause"


@pytest.fixture(scope="module")
def gp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    """A jupyter_server whose kernels start through DistributedProvisioner (a local host)."""
    prefix = tmp_path_factory.mktemp("gp-prefix")
    spec_file, spec = install_ssh_spec(prefix, GP_KERNEL)
    assert spec["metadata"]["kernel_provisioner"]["provisioner_name"] == "distributed-provisioner"
    spec["argv"][0] = sys.executable  # `python` on a host's PATH; here this environment's
    spec_file.write_text(json.dumps(spec, indent=1))
    env = dict(GP_ENV, JUPYTER_PATH=str(prefix / "share" / "jupyter"))
    # test_cluster.py sets GP_SOCKET_TIMEOUT=0 in this process: not for this server.
    with JupyterServer(env=env, drop_env=("GP_SOCKET_TIMEOUT",)) as srv:
        assert "GP_SOCKET_TIMEOUT" not in srv.environment()
        assert srv.proc is not None
        try:
            yield srv
        finally:
            # The provisioner's listener processes outlive their kernels (docs/CLUSTER.md).
            leftovers = psutil.Process(srv.proc.pid).children(recursive=True)
            for kernel in srv.api("GET", "api/kernels"):
                srv.shutdown_kernel(kernel["id"])
            for proc in leftovers:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            psutil.wait_procs(leftovers, timeout=10)


@pytest.mark.timeout(420)  # a kernel through gateway_provisioners, a burst read slowly
def test_a_slow_reader_behind_gateway_provisioners_gets_the_whole_burst(
    gp_server: JupyterServer, tmp_path: Path
) -> None:
    """A burst read through gateway_provisioners' listener, which reads 10 ms a turn:
    stopped until the kernel waits, then slow; whole, and the kernel held up.

    The seed's size (3000 Buttons, 9002 comm_open, about 16 MB), always: the server is
    stopped until the kernel waits, so what follows the pause must be more than the kernel's
    queue and both sockets' buffers hold, on any machine. With 1000 Buttons it was not on
    CI's (the kernel never waited; the pause's condition timed out), though it was here.
    That size also tells our kernel from one that gives a slow reader up: the listener keeps
    up at first, and a kernel with a 2 s send timeout (``iopub_send_timeout = 2000``) gave it
    up only after its 5486th comm_open."""
    buttons = SEED_BUTTONS
    release = tmp_path / "release"
    kernel_id = gp_server.start_kernel(GP_KERNEL)
    try:
        with KernelWebsocket(gp_server, kernel_id) as client:
            client.run("import ipywidgets")
            before = ws_stats(client)
            assert before["socket"] == ADOPTED  # stock IPKernelApp with ExtKernel
            with kernel_counters(gp_server, kernel_id) as kernel_waited:
                # Behind for sure, on any machine: stopped until the kernel waits for it.
                burst = run_paused_burst(
                    client,
                    gated_burst(release, buttons),
                    lambda: gp_server.stop_process(
                        0, until=kernel_waited, on_started=release.touch
                    ),
                    timeout=300,
                )
            after = ws_stats(client)
    finally:
        gp_server.shutdown_kernel(kernel_id)
    assert_whole_and_stalled(burst, before, after, buttons)


# --- a slow reader: behind a rate-limited link --------------------------------------------

#: ~170 Button comm_open (1.75 kB each) a second: under the 250/s a kernel that gives up
#: after 2 s needs to see; the burst takes about 20 s (the seed's about 55 s).
LINK_RATE_BIT = 2_400_000


@pytest.fixture
def slow_link() -> Iterator[VethNamespace]:
    if reason := namespaces_missing(shaping=True):
        pytest.skip(f"the rate-limited link: {reason}")
    with veth_namespace() as net:
        # Shape this side's end: what the kernel (here) sends to the reader (inside).
        limit_rate(net.host_if, LINK_RATE_BIT)
        yield net


@pytest.mark.timeout(420)  # a burst through a rate-limited link (minutes)
def test_a_reader_behind_a_rate_limited_link_gets_the_whole_burst(
    slow_link: VethNamespace, full_size: bool
) -> None:
    """A burst of :data:`SLOW_READER_BUTTONS` (the seed's under ``--full-size``) read through
    a link slower than the kernel sends: whole, and the kernel held up."""
    buttons = slow_reader_buttons(full_size)
    # The reader inside reaches the kernel only through the shaped link; control is here.
    with running_kernel(EXT_KERNEL, client=shell_and_control_client, ip=slow_link.host_ip) as (
        km,
        kc,
    ):
        before = iopub_stats(kc)
        reader = subprocess.run(
            [
                *slow_link.exec_prefix,
                sys.executable,
                str(BURST_READER),
                km.connection_file,
                f"--buttons={buttons}",
                "--timeout=300",
            ],
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert reader.returncode == 0, reader.stderr[-3000:]
        result = json.loads(reader.stdout.splitlines()[-1])
        after = iopub_stats(kc)
    reply = {"content": {"status": result["status"]}} if result["status"] else None
    burst = PausedBurst(result["counts"], result["idle"], reply, [], None)
    assert_whole_and_stalled(burst, before, after, buttons)


# --- a subscriber that never comes back, and then does ---------------------------------------

#: A short give-up time and a small backlog; 20000 comm_open of ~1 kB is ~24 MB, far past it.
GIVE_UP_TIMEOUT_MS = 3000
GIVE_UP_BACKLOG_LIMIT = 2_000_000
GIVE_UP_BURST = 20_000
GIVE_UP_PAD = 1000
#: Room for the frame the client's copy of a message lacks: its topic.
TOPIC_ALLOWANCE = 256


def test_a_subscriber_that_never_reads_is_given_up_counted_and_told(tmp_path: Path) -> None:
    """Each step waits for the one before by a count or a barrier: the cell bursts then waits
    for a file; the healthy reader has it all (the stalled one is given up by then); the
    stalled one reads what it holds, up to a control request's idle (its pipe is live again);
    the file is made, and it reads up to the cell's idle."""
    release = tmp_path / "release"
    code = comm_loop_code(GIVE_UP_BURST, pad=GIVE_UP_PAD) + textwrap.dedent(
        f"""
        import os as _os, time as _time
        while not _os.path.exists({str(release)!r}):
            _time.sleep(0.01)
        """
    )
    args = [
        f"--iopub-send-timeout={GIVE_UP_TIMEOUT_MS}",
        f"--iopub-backlog-limit={GIVE_UP_BACKLOG_LIMIT}",
    ]
    with running_kernel(EXT_KERNEL, args) as (km, kc), RawSubscriber(km) as stalled:
        before = iopub_stats(kc)
        msg_id = kc.execute(code)
        counts: dict[str, int] = {}
        ours: list[dict[str, Any]] = []
        deadline = time.monotonic() + 180
        # The healthy reader gets everything (the loop ends only then).
        while counts.get("comm_open", 0) < GIVE_UP_BURST:
            try:
                msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"the healthy reader got {counts}; {iopub_stats(kc)}"
                ) from None
            if msg["parent_header"].get("msg_id") == msg_id:
                counts[msg["msg_type"]] = counts.get(msg["msg_type"], 0) + 1
                ours.append(msg)  # sized later: a reader slowed down here could be given up too
        given = iopub_stats(kc)
        # Bytes as the kernel sends it: its signed frames, plus room for the topic.
        largest = max(sum(map(len, kc.session.serialize(m))) + TOPIC_ALLOWANCE for m in ours)
        # What it held before it was given up, up to a barrier's idle: one that reaches it
        # proves libzmq has un-parked its pipe, so the notice and idle the release brings are
        # not dropped for it (a quiet period could end while its pipe was still parked).
        stalled.read_to_barrier(kc)
        release.touch()
        resumed = stalled.read_until(lambda m: is_idle_for(m, msg_id), timeout=60)
        wait_iopub(kc, is_status("idle", msg_id), what="the cell's idle", seen=None)
        shell_reply(kc, msg_id)
        after = iopub_stats(kc)
    # The stalled one was given up, and what it missed is counted.
    assert given_up(given) - given_up(before) >= 1, (before, given)
    missed = given["missed"] - before["missed"]
    assert missed > 0, (before, given)
    assert after["missed"] == given["missed"], "nothing was missed after it read again"
    # The backlog never held more than its limit plus the one message that crossed it.
    assert given["backlog_limit_bytes"] == GIVE_UP_BACKLOG_LIMIT
    assert given["backlog_peak_bytes"] <= given["backlog_limit_bytes"] + largest, (given, largest)
    # Once it reads again it is told, on stderr, in the cell's own output, how many it missed.
    streams = [
        json.loads(bytes(m["content"])) for m in resumed if m["header"]["msg_type"] == "stream"
    ]
    notices = [c["text"] for c in streams if c["name"] == "stderr" and str(missed) in c["text"]]
    assert len(notices) == 1, (streams, missed)
    assert resumed and is_idle_for(resumed[-1], msg_id), "no idle after it read"
    assert after["notices"] - before["notices"] >= 1, (before, after)


# --- control answers while a subscriber is stalled ----------------------------------------------


def test_control_answers_while_the_backlog_is_not_empty() -> None:
    """A subscriber stalled for longer than the test: control still answers (the IOPub
    thread keeps what it has no room for in its backlog and does not block on it)."""
    with (
        running_kernel(
            EXT_KERNEL, ["--iopub-send-timeout=600000"], client=shell_and_control_client
        ) as (km, kc),
        RawSubscriber(km),  # the only subscriber: kc does not subscribe to IOPub
    ):
        cell = kc.execute(comm_loop_code(GIVE_UP_BURST, pad=GIVE_UP_PAD))
        # The cell is not held back either; its reply comes with the backlog still there.
        assert shell_reply(kc, cell, timeout=120)["content"]["status"] == "ok"
        first = iopub_stats(kc)
        assert first["backlog_messages"] > 0, first
        # Nobody reads, so the backlog cannot shrink: both control requests (handled in
        # order) are answered with it still there.
        stats_msg = kc.session.msg("iopub_stats_request", {})
        shutdown_msg = kc.session.msg("shutdown_request", {"restart": False})
        kc.control_channel.send(stats_msg)
        kc.control_channel.send(shutdown_msg)
        replies: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 60
        while len(replies) < 2 and time.monotonic() < deadline:
            msg = kc.control_channel.get_msg(timeout=max(0.01, deadline - time.monotonic()))
            replies[msg["parent_header"].get("msg_id")] = msg
        stats = replies[stats_msg["header"]["msg_id"]]["content"]
        assert stats["status"] == "ok", stats
        assert stats["backlog_messages"] > 0 and stats["backlog_bytes"] > 0, stats
        assert stats["missed"] == 0 and given_up(stats) == 0, stats
        shutdown = replies[shutdown_msg["header"]["msg_id"]]
        assert shutdown["msg_type"] == "shutdown_reply"
        assert shutdown["content"]["status"] == "ok", shutdown["content"]
