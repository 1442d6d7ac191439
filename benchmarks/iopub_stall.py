"""A stalled IOPub subscriber: the kernel's memory and slow readers, stock vs ipykernel_ext.

Two measurements, each against real kernels started by ``jupyter_client.KernelManager``
with ``transport_encryption="required"``. (The time a subscriber that never reads adds to a
healthy reader's burst is the burst scenario's ``cosub`` condition: ``python -m benchmarks
iopub_pause`` has that row, or ``python -m benchmarks burst --conditions curve cosub
--loads comms:20000``.)

1. Peak memory. A reading client and a stalled subscriber (a bare ``zmq.SUB`` with the curve
   keys that never reads), bursts of 10000, 50000 and 100000 messages of about 1 kB, sent with
   ``session.send`` so that the kernel keeps no Python object per message: the kernel's RSS
   before the burst and its peak (``VmHWM``) after. The queue held for the stalled
   subscriber is bounded by ``--iopub-sndhwm`` (stock: 1000), so the peak levels off once
   the queues are full instead of growing with the burst; ``--iopub-sndhwm=0`` (unbounded)
   shows what happens otherwise.
2. Slow readers (``--slow-reader``, on by default, off with ``--quick``). One subscriber that
   reads at a fixed rate. With NODROP the kernel waits for it, but libzmq only tells the
   kernel that room came back each time the reader has taken about half a queue (the pipe's
   low-water mark): a reader slower than ~(sndhwm / 2) per send timeout is treated as stalled
   and loses a whole queue's worth. This is what ``--iopub-sndhwm`` trades against memory.

    python -m benchmarks iopub_stall            # both tables
    python -m benchmarks iopub_stall --quick    # no slow-reader table
    python -m benchmarks iopub_stall --quick --memory-messages 10000
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jupyter_client import KernelManager

from benchmarks.burst.readers import QUIET_S, STALLED_QUIET_S
from benchmarks.trials import (
    EXT,
    RESULTS,
    STOCK,
    cells,
    kernel,
    print_table,
)
from harness.bursts import comm_loop_code
from harness.cells import CellRun, run_cell
from harness.kernels import iopub_stats, shell_and_control_client
from harness.raw_subscriber import RawSubscriber

TRIALS, QUICK_TRIALS = 1, 1  # the tables vary little between runs
RESULTS_FILE = RESULTS / "iopub_stall.json"

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


def memory(km: KernelManager) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of the kernel process, in kB."""
    pid = km.provisioner.process.pid  # type: ignore[union-attr]  # a started LocalProvisioner's; the base has no process
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def read_burst(kc: Any, code: str, stalled: bool = False) -> CellRun:
    """Run ``code``; its comm_open counted until idle, or until quiet after the reply (a
    lost idle): QUIET_S, or STALLED_QUIET_S while a ``stalled`` subscriber is connected."""
    quiet = STALLED_QUIET_S if stalled else QUIET_S
    return run_cell(kc, code, 600, keep=lambda m: False, quiet=quiet)


# --- 1. peak memory --------------------------------------------------------------------


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

    @property
    def lost(self) -> int:
        return self.messages - self.received


def peak_memory(name: str, sndhwm: int | None, messages: int) -> PeakMemory:
    extra = [] if sndhwm is None else [f"--iopub-sndhwm={sndhwm}"]
    with kernel(name, extra) as (km, kc):
        read_burst(kc, SESSION_BURST.format(n=100))  # warm up the code path
        with RawSubscriber(km):
            before = memory(km)
            burst = read_burst(kc, SESSION_BURST.format(n=messages), stalled=True)
            after = memory(km)
        label = "1000 (libzmq)" if name == STOCK else str(sndhwm if sndhwm is not None else "")
        return PeakMemory(
            name,
            label,
            messages,
            before["VmRSS"] / 1024,
            after["VmHWM"] / 1024,
            (after["VmHWM"] - before["VmRSS"]) / 1024,
            burst.counts.get("comm_open", 0),
            burst.seconds,
        )


# --- 2. slow readers -------------------------------------------------------------------


@dataclass
class SlowReader:
    sndhwm: int
    send_timeout_ms: int
    rate: int
    messages: int
    received: int
    timeouts: int
    seconds: float

    @property
    def lost(self) -> int:
        return self.messages - self.received


def slow_reader(sndhwm: int, timeout_ms: int, rate: int, messages: int) -> SlowReader:
    extra = [f"--iopub-sndhwm={sndhwm}", f"--iopub-send-timeout={timeout_ms}"]
    with (
        kernel(EXT, extra, client=shell_and_control_client) as (km, kc),
        RawSubscriber(km, rcvhwm=1000, rcvbuf=0) as sub,  # the one IOPub reader
    ):
        msg_id = kc.execute(comm_loop_code(messages))
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
        stats = iopub_stats(kc)
        return SlowReader(
            sndhwm,
            timeout_ms,
            rate,
            messages,
            received,
            stats.get("timeouts", -1),
            time.perf_counter() - start_time,
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--memory-messages", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    parser.add_argument(
        "--slow-reader",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the slow-reader table (default: on, off with --quick)",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    slow = (not args.quick) if args.slow_reader is None else args.slow_reader
    out: dict[str, Any] = {}

    print("1. Peak RSS of the kernel, a stalled subscriber and a reading client", flush=True)
    mem: list[PeakMemory] = []
    configs: list[tuple[str, int | None]] = [(STOCK, None), (EXT, 1000), (EXT, 10_000), (EXT, 0)]
    for name, sndhwm in configs:
        for messages in args.memory_messages:
            mem.append(peak_memory(name, sndhwm, messages))
            print(f"   {mem[-1]}", flush=True)
    print()
    header = ["kernel", "sndhwm", "messages", "RSS before MB", "peak MB", "growth MB"]
    fields = ("kernel", "sndhwm", "messages", "rss_before_mb", "peak_mb", "growth_mb", "lost")
    print_table([*header, "lost (reader)"], [cells(m, fields) for m in mem])
    out["peak_memory"] = [asdict(m) for m in mem]

    if slow:
        print("\n2. One subscriber reading at a fixed rate (ipykernel_ext, send timeout 2 s)")
        slow_rows: list[SlowReader] = []
        for sndhwm in (1000, 10_000):
            for rate in (1000, 4000):
                messages = 2 * sndhwm + 5000
                slow_rows.append(slow_reader(sndhwm, 2000, rate, messages))
                print(f"   {slow_rows[-1]}", flush=True)
        print()
        header = ["sndhwm", "reads/s", "messages", "received", "lost", "timeouts", "seconds"]
        fields = ("sndhwm", "rate", "messages", "received", "lost", "timeouts", "seconds")
        print_table(header, [cells(r, fields) for r in slow_rows], align="r" * 7)
        out["slow_reader"] = [asdict(r) for r in slow_rows]
    return out


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
