"""A reader that pauses or is slow, then carries on: stock ipykernel vs ipykernel_ext (issue 17).

The seed's burst (a GridBox of 3000 Buttons: 9002 comm_open, one display_data, the idle),
over CurveZMQ (``transport_encryption="required"``), with the reader held up in the ways
users meet, each real:

* ``block N s``: a real jupyter_server (JupyterLab's v1 websocket protocol) whose event loop
  is blocked for N s by harness/server_extensions/pause_extension.py once the client has
  seen 300 comm_open;
* ``SIGSTOP N s``: the same server process stopped, then continued, at the same count;
* ``gateway_provisioners``: the server starts the kernel through DistributedProvisioner with
  its default settings (its response socket slows the server's event loop; docs/CLUSTER.md);
* ``tbf link``: the reader in a network namespace behind a veth pair shaped by tbf
  (harness/burst_reader.py; needs root and iproute2, else the row is skipped);
* ``never-returning co-subscriber``: a 20000-message burst read by a healthy client while a
  second subscriber (a raw SUB) never reads; compared with the same burst without it.

Columns: comm_open lost, idle received, time to idle, and the kernel's RSS growth during the
burst (psutil, sampled every 50 ms). Kernels alternate row by row; each trial has a fresh
kernel. Nothing here is a verdict: the tests (tests/server/test_iopub_pause.py) hold the counts.

    python -m benchmarks iopub_pause                  # every row, 1 trial
    python -m benchmarks iopub_pause --quick          # of the pauses only 4 s block and SIGSTOP
    python -m benchmarks iopub_pause --only link cosub --json out.json --plot /tmp/p.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks.burst import QUIET_S, STALLED_QUIET_S, RssSampler, collect_ws, kernel_pid
from benchmarks.plot import figure
from benchmarks.trials import EXT, RESULTS, STOCK, fmt, kernel, print_table
from harness.burst_reader import SCRIPT as BURST_READER
from harness.bursts import SEED_BUTTONS, SEED_COMM_OPEN, comm_loop_code, widget_grid_code
from harness.kernel_websocket import KernelWebsocket
from harness.kernels import (
    EXT_KERNEL_CLASS,
    install_ssh_spec,
    iopub_stats,
    shell_and_control_client,
)
from harness.netns import can_make_namespaces, limit_rate, veth_namespace
from harness.raw_subscriber import RawSubscriber
from harness.server import JupyterServer, ServerPause
from ipykernel_ext.client import run_cell  # until idle, or until quiet (a lost idle)

TRIALS, QUICK_TRIALS = 1, 1
RESULTS_FILE = RESULTS / "iopub_pause.json"
KERNELS = {STOCK: "stock ipykernel", EXT: "ipykernel_ext"}
#: Where the figure goes unless --plot says otherwise (git-ignored): the one in docs/ is
#: replaced only on purpose, with --plot docs/iopub_pause.png.
PLOT = RESULTS / "iopub_pause.png"

#: As in tests/server/test_iopub_pause.py: ~170 Button comm_open a second.
LINK_RATE_BIT = 2_400_000
COSUB_BURST = 20_000


@dataclass
class Row:
    scenario: str
    kernel: str
    expected: int
    comm_open: int
    idle: bool
    seconds_to_idle: float | None
    rss_growth_mb: float | None
    stats: dict[str, Any] | None
    #: co-subscriber row only: the healthy reader's time to idle without the co-subscriber
    baseline_seconds: float | None = None

    @property
    def lost(self) -> int:
        return self.expected - self.comm_open


# --- through jupyter_server ---------------------------------------------------------------


def ws_stats(ws: KernelWebsocket, kernel: str) -> dict[str, Any] | None:
    """ipykernel_ext's iopub_stats (stock ipykernel does not answer the request)."""
    if kernel == STOCK:
        return None
    try:
        return ws.request("control", "iopub_stats_request", timeout=30)["content"]
    except TimeoutError:
        return None


def server_row(
    server: JupyterServer,
    scenario: str,
    kernel: str,
    spec: str,
    pause: Callable[[JupyterServer], ServerPause] | None,
    timeout: float,
) -> Row:
    kernel_id = server.start_kernel(spec)
    try:
        with server.connect(kernel_id) as ws:
            ws.run("import ipywidgets", timeout=120)
            with RssSampler(kernel_pid(server, kernel_id)) as rss:
                burst = collect_ws(
                    ws,
                    widget_grid_code(SEED_BUTTONS),
                    timeout,
                    (lambda: pause(server)) if pause is not None else None,
                )
            stats = ws_stats(ws, kernel)
    finally:
        with contextlib.suppress(Exception):
            server.shutdown_kernel(kernel_id)
    return Row(
        scenario,
        kernel,
        SEED_COMM_OPEN,
        burst.counts.get("comm_open", 0),
        burst.idle,
        burst.seconds,
        rss.growth_mb,
        stats,
    )


def pause_rows(blocks: list[float], stops: list[float], timeout: float) -> Iterator[Row]:
    pauses: list[tuple[str, Callable[[JupyterServer], ServerPause]]] = [
        *((f"block {s:g} s", lambda srv, s=s: srv.block_event_loop(s)) for s in blocks),
        *((f"SIGSTOP {s:g} s", lambda srv, s=s: srv.stop_process(s)) for s in stops),
    ]
    with JupyterServer(pause_extension=True) as server:
        for scenario, pause in pauses:
            for name in KERNELS:
                yield server_row(server, scenario, name, name, pause, timeout)


def gateway_rows(timeout: float) -> Iterator[Row]:
    """Both kernels through DistributedProvisioner with its default settings."""
    prefix = Path(tempfile.mkdtemp(prefix="iopub-pause-gp-"))
    specs = {STOCK: "ssh_pause_stock", EXT: "ssh_pause_ext"}
    try:
        for kernel, name in specs.items():
            spec_file, spec = install_ssh_spec(
                prefix,
                name,
                kernel_class=None if kernel == STOCK else EXT_KERNEL_CLASS,
            )
            spec["argv"][0] = sys.executable
            spec_file.write_text(json.dumps(spec, indent=1))
        env = {
            # Only the root refusal is lifted; GP_SOCKET_TIMEOUT keeps its default.
            "GP_UNAUTHORIZED_USERS": "ipykernel-ext-bench-nobody",
            "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
        }
        with JupyterServer(env=env) as server:
            assert server.proc is not None
            try:
                for kernel, name in specs.items():
                    yield server_row(server, "gateway_provisioners", kernel, name, None, timeout)
            finally:
                leftovers = psutil.Process(server.proc.pid).children(recursive=True)
                for proc in leftovers:  # listeners outlive their kernels (docs/CLUSTER.md)
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


# --- without a server ------------------------------------------------------------------


def link_rows(timeout: float) -> Iterator[Row]:
    """The reader in a namespace behind a tbf-shaped veth; the kernel on this side."""
    if not can_make_namespaces() or shutil.which("tc") is None:
        print("   (tbf link rows skipped: need root, ip and tc)", flush=True)
        return
    with veth_namespace() as net:
        limit_rate(net.host_if, LINK_RATE_BIT)
        for name in KERNELS:
            # The reader in the namespace is the only IOPub subscriber.
            with kernel(name, client=shell_and_control_client, ip=net.host_ip) as (km, kc):
                with RssSampler(process_pid(km)) as rss:
                    out = subprocess.run(
                        [
                            *net.exec_prefix,
                            sys.executable,
                            str(BURST_READER),
                            km.connection_file,
                            f"--buttons={SEED_BUTTONS}",
                            f"--timeout={timeout}",
                            f"--quiet={QUIET_S}",
                        ],
                        capture_output=True,
                        text=True,
                        timeout=timeout + 120,
                    )
                result = json.loads(out.stdout.splitlines()[-1])
                stats = control_stats(kc) if name == EXT else None
            yield Row(
                "tbf link",
                name,
                SEED_COMM_OPEN,
                result["counts"].get("comm_open", 0),
                result["idle"],
                result["seconds"] if result["idle"] else None,
                rss.growth_mb,
                stats,
            )


def control_stats(kc: Any) -> dict[str, Any] | None:
    """The kernel's iopub_stats_reply content (the tests' request), None if none came."""
    try:
        return iopub_stats(kc)
    except queue.Empty:
        return None


def process_pid(km: Any) -> int:
    """The pid of a kernel this process started."""
    return km.provisioner.process.pid


def cosubscriber_rows(timeout: float) -> Iterator[Row]:
    """A healthy reader with and without a co-subscriber that never reads."""
    code = comm_loop_code(COSUB_BURST)
    for name in KERNELS:
        baseline: float | None = None
        for with_cosub in (False, True):
            with kernel(name) as (km, kc):
                run_cell(kc, comm_loop_code(10), timeout, quiet=QUIET_S)  # warm up
                with RawSubscriber(km) if with_cosub else contextlib.nullcontext():
                    with RssSampler(process_pid(km)) as rss:
                        quiet = STALLED_QUIET_S if with_cosub else QUIET_S
                        burst = run_cell(kc, code, timeout, keep=lambda m: False, quiet=quiet)
                    stats = control_stats(kc) if name == EXT else None
            if not with_cosub:
                baseline = burst.seconds
                continue
            yield Row(
                "never-returning co-subscriber",
                name,
                COSUB_BURST,
                burst.counts.get("comm_open", 0),
                burst.idle,
                burst.seconds,
                rss.growth_mb,
                stats,
                baseline_seconds=baseline,
            )


# --- output -------------------------------------------------------------------------------


HEADER = (
    "scenario",
    "kernel",
    "comm_open lost",
    "idle",
    "time to idle",
    "extra wait",
    "kernel RSS growth",
    "stalls / given up / missed",
)


def table_rows(rows: list[Row]) -> Iterator[list[str]]:
    for r in rows:
        extra = (
            fmt(r.seconds_to_idle - r.baseline_seconds, 1, " s")
            if r.seconds_to_idle is not None and r.baseline_seconds is not None
            else ""
        )
        s = r.stats or {}
        given_up = s.get("timeouts", 0)
        counters = (
            f"{s.get('stalls', '?')} / {given_up} / {s.get('missed', '?')}" if r.stats else "n/a"
        )
        yield [
            r.scenario,
            KERNELS[r.kernel],
            f"{r.lost} of {r.expected}",
            "yes" if r.idle else "**lost**",
            fmt(r.seconds_to_idle, 1, " s"),
            extra,
            fmt(r.rss_growth_mb, 1, " MB"),
            counters,
        ]


def plot(rows: list[Row], path: Path) -> None:
    with figure(path, 2, size=(12, 4.5)) as (fig, axes):
        draw(fig, axes, rows)


def draw(fig: Any, axes: list[Any], rows: list[Row]) -> None:
    scenarios = list(dict.fromkeys(r.scenario for r in rows))
    width = 0.38
    for i, name in enumerate(KERNELS):
        mine = {r.scenario: r for r in rows if r.kernel == name}
        xs = [j + (i - 0.5) * width for j in range(len(scenarios))]
        lost = [100 * mine[s].lost / mine[s].expected if s in mine else 0 for s in scenarios]
        took = [
            mine[s].seconds_to_idle if s in mine and mine[s].seconds_to_idle else 0
            for s in scenarios
        ]
        axes[0].bar(xs, lost, width, label=KERNELS[name])
        axes[1].bar(xs, took, width, label=KERNELS[name])
        for x, s in zip(xs, scenarios, strict=True):
            if s in mine and not mine[s].idle:
                axes[1].text(x, 0.5, "idle\nlost", ha="center", fontsize=7, color="red")
    for ax, title in zip(
        axes, ("comm_open lost (% of the burst)", "time to idle (s)"), strict=True
    ):
        ax.set_title(title)
        ax.set_xticks(range(len(scenarios)))
        ax.set_xticklabels(scenarios, rotation=30, ha="right", fontsize=8)
        ax.legend()
    fig.suptitle("A paused or slow IOPub reader, CurveZMQ (benchmarks/iopub_pause.py)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=float, default=300, help="seconds per burst at most")
    parser.add_argument("--plot", type=Path, default=PLOT, help=f"the figure (default {PLOT})")
    parser.add_argument(
        "--only",
        nargs="+",
        default=list(GROUPS),
        choices=list(GROUPS),
        help="row groups to run (default: all)",
    )


#: The row groups, in the order they run.
GROUPS = ("pause", "gateway", "link", "cosub")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every row of ``--only``, ``--trials`` times; the table, the plot, the JSON."""
    blocks = [4.0] if args.quick else [1.0, 4.0, 10.0, 30.0]
    stops = [4.0] if args.quick else [4.0, 10.0]
    groups: dict[str, Callable[[], Iterator[Row]]] = {
        "pause": lambda: pause_rows(blocks, stops, args.timeout),
        "gateway": lambda: gateway_rows(args.timeout),
        "link": lambda: link_rows(args.timeout),
        "cosub": lambda: cosubscriber_rows(args.timeout),
    }
    rows: list[Row] = []
    errors: list[str] = []
    start = time.monotonic()
    for _trial in range(args.trials):
        for name in args.only:
            # One group failing (a kernel that did not start) must not lose the others' rows.
            try:
                for row in groups[name]():
                    rows.append(row)
                    print(
                        f"   {row.scenario:<30} {KERNELS[row.kernel]:<16} lost {row.lost:>5}/"
                        f"{row.expected}  idle {row.idle!s:<5}  "
                        f"{fmt(row.seconds_to_idle, 1, ' s')}",
                        flush=True,
                    )
            except Exception as exc:  # reported, and kept in the JSON
                errors.append(f"{name}: {exc!r}")
                print(f"   {name}: failed: {exc!r}", file=sys.stderr, flush=True)
    took = time.monotonic() - start
    print(f"\n{len(rows)} rows in {took:.0f} s, CurveZMQ, 2 shared cores\n")
    print_table(HEADER, table_rows(rows), align="llrlrrrr", markdown=True)
    if rows:
        plot(rows, args.plot)
        print(f"\nplot: {args.plot}")
    return {"rows": [dict(asdict(r), lost=r.lost) for r in rows], "errors": errors}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
