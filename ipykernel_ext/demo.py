"""``python -m ipykernel_ext demo``: the same widget burst on stock ipykernel and ipykernel_ext.

Starts each kernel through ``jupyter_client.KernelManager`` with CurveZMQ transport
encryption (``transport_encryption="required"``), runs one cell that displays a ``GridBox``
of N ipywidgets Buttons (3 N + 2 ``comm_open`` messages, one ``display_data``, then
``status: idle``) and counts what one client receives. Stock ipykernel's IOPub socket drops
messages silently once a client is 1000 behind; ipykernel_ext's waits for room instead.
How often stock loses depends on how fast the machine and the client are, so the demo runs
a few trials of each, alternating kernels, each in a fresh kernel::

    python -m ipykernel_ext demo                   # 3000 Buttons, 3 trials each
    python -m ipykernel_ext demo --buttons=1000 --trials=5

A client-side tool: nothing in the package imports it, and it imports nothing of the kernel.
"""

from __future__ import annotations

import queue
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from traitlets import Float, Integer, Unicode
from traitlets.config import Application
from traitlets.config.loader import KVArgParseConfigLoader

from . import PROG

BURST_CODE = """\
import ipywidgets as widgets
from IPython.display import display
display(widgets.GridBox([widgets.Button(description=str(i)) for i in range({n})]))
"""


@dataclass
class Outcome:
    """What one client saw of one burst."""

    comm_open: int
    display_data: int
    idle: bool
    seconds_to_idle: float | None
    error: str | None = None


class DemoApp(Application):
    """Run the same widget burst on stock ipykernel and ipykernel_ext, side by side."""

    name = "ipykernel-ext-demo"
    description = __doc__

    buttons = Integer(
        3000, min=1, help="Buttons in the GridBox (3 comm_open messages each, plus 2)."
    ).tag(config=True)
    trials = Integer(3, min=1, help="Trials per kernel, each in a fresh kernel.").tag(config=True)
    stock_kernel = Unicode("python3", help="Kernelspec of stock ipykernel.").tag(config=True)
    ext_kernel = Unicode("python3-ext", help="Kernelspec of ipykernel_ext.").tag(config=True)
    timeout = Float(120.0, help="Seconds to wait for one cell.").tag(config=True)

    def _create_loader(
        self, argv: list[str] | None, aliases: Any, flags: Any, classes: Any
    ) -> KVArgParseConfigLoader:
        """Traitlets' own loader, with argparse's ``prog`` naming the command users type
        (otherwise usage errors say ``__main__.py``)."""
        return KVArgParseConfigLoader(
            argv, aliases, flags, classes=classes, log=self.log, prog=f"{PROG} demo"
        )

    aliases = {  # type: ignore[assignment]
        "buttons": "DemoApp.buttons",
        "trials": "DemoApp.trials",
        "stock-kernel": "DemoApp.stock_kernel",
        "ext-kernel": "DemoApp.ext_kernel",
        "timeout": "DemoApp.timeout",
    }

    def start(self) -> None:
        kernels = {"stock ipykernel": self.stock_kernel, "ipykernel_ext": self.ext_kernel}
        expected = 3 * self.buttons + 2
        print(
            f"One cell displays a GridBox of {self.buttons} Buttons over CurveZMQ: "
            f"{expected} comm_open, 1 display_data and the idle status expected.\n"
            f"{self.trials} trial(s) per kernel, a fresh kernel each time.\n",
            flush=True,
        )
        results: dict[str, list[Outcome]] = {label: [] for label in kernels}
        for trial in range(1, self.trials + 1):
            for label, kernel_name in kernels.items():
                outcome = self.run_trial(kernel_name)
                results[label].append(outcome)
                print(f"  trial {trial}, {label:<15} {describe(outcome, expected)}", flush=True)
                if outcome.error:
                    print(f"\n{outcome.error}", file=sys.stderr)
                    self.exit(1)
        print()
        print_table(results, expected)

    def run_trial(self, kernel_name: str) -> Outcome:
        from jupyter_client import BlockingKernelClient, KernelManager
        from jupyter_client.kernelspec import NoSuchKernel

        km = KernelManager(kernel_name=kernel_name, transport_encryption="required")
        try:
            km.start_kernel()
        except NoSuchKernel:
            return Outcome(0, 0, False, None, f"No kernelspec named {kernel_name!r}.")
        # A client with a session of its own, as a frontend has.
        kc = BlockingKernelClient(connection_file=km.connection_file)
        try:
            kc.load_connection_file()
            kc.start_channels()
            kc.wait_for_ready(timeout=60)
            warm = run_cell(kc, "import ipywidgets", self.timeout)  # not what we measure
            if warm.error:
                return Outcome(
                    0, 0, False, None, f"{kernel_name}: {warm.error} (pip install ipywidgets)"
                )
            return run_cell(kc, BURST_CODE.format(n=self.buttons), self.timeout)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def run_cell(kc: Any, code: str, timeout: float, grace: float = 3.0) -> Outcome:
    """Run ``code``; count its messages until idle, or until quiet if the idle was lost."""
    start = time.perf_counter()
    msg_id = kc.execute(code)
    counts: dict[str, int] = {}
    error: str | None = None
    replied_at: float | None = None
    last_seen = start
    while time.perf_counter() - start < timeout:
        try:
            msg = kc.get_iopub_msg(timeout=0.1)
        except queue.Empty:
            if replied_at is None:
                try:
                    reply = kc.get_shell_msg(timeout=0)
                    if reply["parent_header"].get("msg_id") == msg_id:
                        replied_at = time.perf_counter()
                except queue.Empty:
                    pass
            if replied_at is not None and time.perf_counter() - max(last_seen, replied_at) > grace:
                break  # the reply is in and IOPub stayed quiet: the idle was lost
            continue
        last_seen = time.perf_counter()
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        msg_type = msg["msg_type"]
        counts[msg_type] = counts.get(msg_type, 0) + 1
        if msg_type == "error":
            error = f"{msg['content']['ename']}: {msg['content']['evalue']}"
        if msg_type == "status" and msg["content"]["execution_state"] == "idle":
            return Outcome(
                counts.get("comm_open", 0),
                counts.get("display_data", 0),
                True,
                last_seen - start,
                error,
            )
    return Outcome(counts.get("comm_open", 0), counts.get("display_data", 0), False, None, error)


def describe(outcome: Outcome, expected: int) -> str:
    time_text = "-" if outcome.seconds_to_idle is None else f"{outcome.seconds_to_idle:.2f} s"
    return (
        f"{outcome.comm_open}/{expected} comm_open, "
        f"display_data {'yes' if outcome.display_data else 'LOST'}, "
        f"idle {'yes' if outcome.idle else 'LOST'}, {time_text}"
    )


def print_table(results: dict[str, list[Outcome]], expected: int) -> None:
    header = (
        f"{'kernel':<16} {'comm_open expected':>18} {'received (worst)':>16} "
        f"{'trials lost':>11} {'display_data':>12} {'idle':>6} {'median time to idle':>19}"
    )
    print(header)
    print("-" * len(header))
    for label, outcomes in results.items():
        n = len(outcomes)
        worst = min(o.comm_open for o in outcomes)
        lossy = sum(o.comm_open < expected or not o.display_data or not o.idle for o in outcomes)
        times = [o.seconds_to_idle for o in outcomes if o.seconds_to_idle is not None]
        median = f"{statistics.median(times):.2f} s" if times else "-"
        print(
            f"{label:<16} {expected:>18} {worst:>16} {f'{lossy}/{n}':>11} "
            f"{f'{sum(o.display_data > 0 for o in outcomes)}/{n}':>12} "
            f"{f'{sum(o.idle for o in outcomes)}/{n}':>6} {median:>19}"
        )
