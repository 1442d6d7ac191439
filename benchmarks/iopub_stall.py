"""A stalled IOPub subscriber: what it costs, stock ipykernel vs ipykernel_ext (CurveZMQ on).

Three measurements, each against real kernels started by ``jupyter_client.KernelManager``
with ``transport_encryption="required"``:

1. Added time. One client reads a burst of ``comm_open`` messages (``create_comm`` in a
   loop) as fast as it can, once alone and once with a second subscriber that connects and
   never reads (a bare ``zmq.SUB`` with the curve keys). Reported: median time to idle with
   and without the stalled one, the difference, comm_open lost by the reading client, and
   ipykernel_ext's ``iopub_stats`` (timeouts: one per stall, not one per message).
2. Peak memory. The same, with bursts of 10000, 50000 and 100000 messages of about 1 kB, sent with
   ``session.send`` so that the kernel keeps no Python object per message: the kernel's RSS
   before the burst and its peak (``VmHWM``) after. The queue held for the stalled
   subscriber is bounded by ``--iopub-sndhwm`` (stock: 1000), so the peak levels off once
   the queues are full instead of growing with the burst; ``--iopub-sndhwm=0`` (unbounded)
   shows what happens otherwise.
3. Slow readers (``--slow-reader``, on by default, off with ``--quick``). One subscriber that
   reads at a fixed rate. With NODROP the kernel waits for it, but libzmq only tells the
   kernel that room came back each time the reader has taken about half a queue (the pipe's
   low-water mark): a reader slower than ~(sndhwm / 2) per send timeout is treated as stalled
   and loses a whole queue's worth. This is what ``--iopub-sndhwm`` trades against memory.

    python benchmarks/iopub_stall.py            # 3 trials
    python benchmarks/iopub_stall.py --quick    # 1 trial, no slow-reader table
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jupyter_client import BlockingKernelClient, KernelManager

from tests.helpers import RawSubscriber  # the tests' own (the checkout is on sys.path)

STOCK, EXT = "python3", "python3-ext"
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"

COMM_BURST = """\
import comm
for _i in range({n}):
    comm.create_comm(target_name="nobody", data={{"i": _i}})
"""

# No Python object survives a message: what the kernel holds is the IOPub queues.
SESSION_BURST = """\
_k = get_ipython().kernel
_parent = _k.get_parent()
_pad = "x" * 1000
for _i in range({n}):
    _k.session.send(_k.iopub_socket, "comm_open",
                    {{"comm_id": str(_i), "target_name": "nobody", "data": {{"pad": _pad}}}},
                    parent=_parent)
"""


def start(kernel: str, extra: list[str], iopub: bool = True) -> tuple[KernelManager, Any]:
    km = KernelManager(kernel_name=kernel, transport_encryption="required")
    km.start_kernel(extra_arguments=extra)
    kc = BlockingKernelClient(connection_file=km.connection_file)
    kc.load_connection_file()
    kc.start_channels(iopub=iopub, stdin=False, hb=False)
    deadline = time.monotonic() + 60
    while True:  # kernel_info until answered (wait_for_ready needs an IOPub channel)
        msg_id = kc.kernel_info()
        try:
            if kc.get_shell_msg(timeout=1)["parent_header"].get("msg_id") == msg_id:
                break
        except queue.Empty:
            if time.monotonic() > deadline:
                raise
    if iopub:
        kc.wait_for_ready(timeout=60)
    return km, kc


def stop(km: KernelManager, kc: Any) -> None:
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def memory(km: KernelManager) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of the kernel process, in kB."""
    pid = km.provisioner.process.pid  # type: ignore[union-attr]
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def iopub_stats(kc: Any) -> dict[str, Any] | None:
    msg = kc.session.msg("iopub_stats_request", {})
    kc.control_channel.send(msg)
    try:
        while True:
            reply = kc.control_channel.get_msg(timeout=5)
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return reply["content"] if reply["msg_type"] == "iopub_stats_reply" else None
    except queue.Empty:
        return None  # stock ipykernel ignores the request


def read_burst(kc: Any, code: str, timeout: float = 600) -> tuple[float | None, int]:
    """Run ``code``; (seconds to idle or None if the idle was lost, comm_open received)."""
    start_time = time.perf_counter()
    msg_id = kc.execute(code)
    comm_open, replied = 0, False
    quiet_since = time.perf_counter()
    while time.perf_counter() - start_time < timeout:
        try:
            msg = kc.get_iopub_msg(timeout=0.1)
        except queue.Empty:
            if not replied:
                with contextlib.suppress(queue.Empty):
                    replied = kc.get_shell_msg(timeout=0)["parent_header"]["msg_id"] == msg_id
            if replied and time.perf_counter() - quiet_since > 5:
                return None, comm_open
            continue
        quiet_since = time.perf_counter()
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "comm_open":
            comm_open += 1
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return time.perf_counter() - start_time, comm_open
    return None, comm_open


# --- 1. added time ---------------------------------------------------------------------


@dataclass
class AddedTime:
    kernel: str
    stalled: bool
    messages: int
    seconds: float | None
    received: int
    timeouts: int | None


def added_time(kernel: str, messages: int, stalled: bool) -> AddedTime:
    km, kc = start(kernel, [])
    sub = None
    try:
        read_burst(kc, COMM_BURST.format(n=10))  # warm up
        before = iopub_stats(kc) if kernel == EXT else None
        if stalled:
            sub = RawSubscriber(km)
        seconds, received = read_burst(kc, COMM_BURST.format(n=messages))
        after = iopub_stats(kc) if kernel == EXT else None
        timeouts = after["timeouts"] - before["timeouts"] if after and before else None
        return AddedTime(kernel, stalled, messages, seconds, received, timeouts)
    finally:
        if sub is not None:
            sub.close()
        stop(km, kc)


# --- 2. peak memory --------------------------------------------------------------------


@dataclass
class PeakMemory:
    kernel: str
    sndhwm: str
    messages: int
    rss_before_mb: float
    peak_mb: float
    growth_mb: float
    received: int
    seconds: float | None


def peak_memory(kernel: str, sndhwm: int | None, messages: int) -> PeakMemory:
    extra = [] if sndhwm is None else [f"--iopub-sndhwm={sndhwm}"]
    km, kc = start(kernel, extra)
    sub = None
    try:
        read_burst(kc, SESSION_BURST.format(n=100))  # warm up the code path
        sub = RawSubscriber(km)
        before = memory(km)
        seconds, received = read_burst(kc, SESSION_BURST.format(n=messages))
        after = memory(km)
        label = "1000 (libzmq)" if kernel == STOCK else str(sndhwm if sndhwm is not None else "")
        return PeakMemory(
            kernel,
            label,
            messages,
            before["VmRSS"] / 1024,
            after["VmHWM"] / 1024,
            (after["VmHWM"] - before["VmRSS"]) / 1024,
            received,
            seconds,
        )
    finally:
        if sub is not None:
            sub.close()
        stop(km, kc)


# --- 3. slow readers -------------------------------------------------------------------


@dataclass
class SlowReader:
    sndhwm: int
    send_timeout_ms: int
    rate: int
    messages: int
    received: int
    timeouts: int
    seconds: float


def slow_reader(sndhwm: int, timeout_ms: int, rate: int, messages: int) -> SlowReader:
    extra = [f"--iopub-sndhwm={sndhwm}", f"--iopub-send-timeout={timeout_ms}"]
    km, kc = start(EXT, extra, iopub=False)
    sub = RawSubscriber(km, rcvhwm=1000, rcvbuf=0)
    try:
        msg_id = kc.execute(COMM_BURST.format(n=messages))
        start_time = time.perf_counter()
        received = 0
        while True:
            msg = sub.recv(timeout=10)
            if msg is None:
                break
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "comm_open":
                received += 1
                lag = start_time + received / rate - time.perf_counter()
                if lag > 0:
                    time.sleep(lag)
            elif kind == "status" and b"idle" in bytes(msg["content"]):
                break
        stats = iopub_stats(kc) or {}
        return SlowReader(
            sndhwm,
            timeout_ms,
            rate,
            messages,
            received,
            stats.get("timeouts", -1),
            time.perf_counter() - start_time,
        )
    finally:
        sub.close()
        stop(km, kc)


def median(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 trial, no slow-reader table")
    parser.add_argument("--messages", type=int, default=20_000, help="burst for added time")
    parser.add_argument("--memory-messages", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    parser.add_argument("--slow-reader", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--json", type=Path, default=RESULTS / "iopub_stall.json")
    args = parser.parse_args()
    trials = 1 if args.quick else args.trials
    slow = (not args.quick) if args.slow_reader is None else args.slow_reader
    out: dict[str, Any] = {}

    print(f"1. Added time: one client reads a {args.messages}-message burst", flush=True)
    added: list[AddedTime] = []
    for _ in range(trials):
        for kernel in (STOCK, EXT):
            for stalled in (False, True):
                added.append(added_time(kernel, args.messages, stalled))
                print(f"   {added[-1]}", flush=True)
    print(
        f"\n{'kernel':<12} {'alone s':>8} {'+stalled s':>10} {'added s':>8} "
        f"{'lost (reader)':>13} {'timeouts':>8}"
    )
    for kernel in (STOCK, EXT):
        alone = median([a.seconds for a in added if a.kernel == kernel and not a.stalled])
        with_stall = median([a.seconds for a in added if a.kernel == kernel and a.stalled])
        lost = max(args.messages - a.received for a in added if a.kernel == kernel)
        timeouts = [a.timeouts for a in added if a.kernel == kernel and a.stalled]
        diff = None if alone is None or with_stall is None else with_stall - alone
        print(
            f"{kernel:<12} {fmt(alone):>8} {fmt(with_stall):>10} {fmt(diff):>8} "
            f"{lost:>13} {timeouts!s:>8}"
        )
    out["added_time"] = [asdict(a) for a in added]

    print("\n2. Peak RSS of the kernel, a stalled subscriber and a reading client", flush=True)
    mem: list[PeakMemory] = []
    configs: list[tuple[str, int | None]] = [(STOCK, None), (EXT, 1000), (EXT, 10_000), (EXT, 0)]
    for kernel, sndhwm in configs:
        for messages in args.memory_messages:
            mem.append(peak_memory(kernel, sndhwm, messages))
            print(f"   {mem[-1]}", flush=True)
    print(
        f"\n{'kernel':<12} {'sndhwm':>13} {'messages':>8} {'RSS before MB':>13} "
        f"{'peak MB':>8} {'growth MB':>9} {'lost (reader)':>13}"
    )
    for m in mem:
        print(
            f"{m.kernel:<12} {m.sndhwm:>13} {m.messages:>8} {m.rss_before_mb:>13.1f} "
            f"{m.peak_mb:>8.1f} {m.growth_mb:>9.1f} {m.messages - m.received:>13}"
        )
    out["peak_memory"] = [asdict(m) for m in mem]

    if slow:
        print("\n3. One subscriber reading at a fixed rate (ipykernel_ext, send timeout 2 s)")
        rows: list[SlowReader] = []
        for sndhwm in (1000, 10_000):
            for rate in (1000, 4000):
                messages = 2 * sndhwm + 5000
                rows.append(slow_reader(sndhwm, 2000, rate, messages))
                print(f"   {rows[-1]}", flush=True)
        print(
            f"\n{'sndhwm':>7} {'reads/s':>7} {'messages':>8} {'received':>8} {'lost':>6} "
            f"{'timeouts':>8} {'seconds':>7}"
        )
        for r in rows:
            print(
                f"{r.sndhwm:>7} {r.rate:>7} {r.messages:>8} {r.received:>8} "
                f"{r.messages - r.received:>6} {r.timeouts:>8} {r.seconds:>7.1f}"
            )
        out["slow_reader"] = [asdict(r) for r in rows]

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1))
    print(f"\nraw results: {args.json}")


if __name__ == "__main__":
    main()
