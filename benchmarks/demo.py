"""The README's demo: the same widget burst on stock ipykernel and ipykernel_ext, side by side.

Starts each kernel through ``jupyter_client.KernelManager`` with CurveZMQ transport
encryption (``transport_encryption="required"``), runs one cell that displays a ``GridBox``
of N ipywidgets Buttons (3 N + 2 ``comm_open`` messages, one ``display_data``, then
``status: idle``) and counts what one client receives. Stock ipykernel's IOPub socket drops
messages silently once a client is 1000 behind; ipykernel_ext's waits for room instead.
How often stock loses a burst its reader keeps up with depends on how fast the machine and the
client are. So each kernel runs the burst twice: first with the reader paused mid-burst, as a
busy server pauses it (once it has seen 300 ``comm_open`` it reads nothing on IOPub for
``--pause`` seconds, 2, and until the cell's reply has come, so the kernel has sent the whole
burst whatever the machine's speed), then read as fast as the client can. Stock loses the
paused burst; ipykernel_ext loses nothing. A few trials of each, alternating kernels, each in
a fresh kernel; each cell runs through :func:`harness.cells.run_cell`. From a checkout::

    python -m benchmarks demo                      # 3000 Buttons, 2 trials each
    python -m benchmarks demo --buttons=1000 --trials=5 --pause=0   # no paused burst
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Any

from harness.cells import CellRun, CellTimeout, ReaderPause, run_cell

TRIALS, QUICK_TRIALS = 2, 1

#: Seconds of IOPub silence, once the cell's reply came, after which its idle counts as lost.
QUIET = 3.0

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

    @classmethod
    def of(cls, run: CellRun) -> Outcome:
        return cls(
            run.counts.get("comm_open", 0),
            run.counts.get("display_data", 0),
            run.idle,
            run.seconds,
            run.error,
        )


def at_least(minimum: float, kind: type[int] | type[float] = int) -> Any:
    """An argparse type: a number of ``kind`` no smaller than ``minimum``."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum:g}, not {text}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--buttons",
        type=at_least(1),
        default=3000,
        help="Buttons in the GridBox (3 comm_open messages each, plus 2; default 3000).",
    )
    parser.add_argument(
        "--stock-kernel", default="python3", help="Kernelspec of stock ipykernel (python3)."
    )
    parser.add_argument(
        "--ext-kernel", default="python3-ext", help="Kernelspec of ipykernel_ext (python3-ext)."
    )
    parser.add_argument(
        "--timeout",
        type=at_least(0, float),
        default=120.0,
        help="Seconds to wait for one cell (default 120).",
    )
    parser.add_argument(
        "--pause",
        type=at_least(0, float),
        default=2.0,
        help="Seconds, at least, the reader stops reading IOPub mid-burst in the second case; "
        "it also waits for the cell's reply, so the kernel has sent the whole burst "
        "(0: no paused burst; default 2).",
    )
    parser.add_argument(
        "--pause-after",
        type=at_least(1),
        default=300,
        help="comm_open messages the reader sees before it pauses (default 300).",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    return Demo(args).start()


class Demo:
    """Run the same widget burst on stock ipykernel and ipykernel_ext, side by side."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.buttons: int = args.buttons
        self.trials: int = args.trials
        self.stock_kernel: str = args.stock_kernel
        self.ext_kernel: str = args.ext_kernel
        self.timeout: float = args.timeout
        self.pause: float = args.pause
        self.pause_after: int = args.pause_after

    @property
    def cases(self) -> dict[str, float]:
        """The reader's cases, by label: the seconds it pauses mid-burst (0: it does not).

        The paused burst runs first, on the kernel's fresh connection: a burst read straight
        lets TCP grow the connection's buffers (the receive buffer up to ``tcp_rmem``'s
        maximum, 32 MiB here), enough to hold a whole later burst for a paused reader.
        """
        cases = {"paused mid-burst": self.pause} if self.pause > 0 else {}
        cases["keeps up"] = 0.0
        return cases

    def start(self) -> dict[str, Any]:
        kernels = {"stock ipykernel": self.stock_kernel, "ipykernel_ext": self.ext_kernel}
        expected = 3 * self.buttons + 2
        paused = (
            f"First the reader pauses mid-burst (as a busy server pauses it): after "
            f"{self.pause_after} comm_open it reads nothing on IOPub for {self.pause:g} s and "
            "until the cell's reply. Then the same cell again, read as fast as it can.\n"
            if self.pause > 0
            else "The reader reads as fast as it can.\n"
        )
        print(
            f"One cell displays a GridBox of {self.buttons} Buttons over CurveZMQ: "
            f"{expected} comm_open, 1 display_data and the idle status expected.\n"
            f"{paused}"
            f"{self.trials} trial(s) per kernel, a fresh kernel each time.\n",
            flush=True,
        )
        results: dict[tuple[str, str], list[Outcome]] = {
            (case, label): [] for case in reversed(self.cases) for label in kernels
        }
        for trial in range(1, self.trials + 1):
            for label, kernel_name in kernels.items():
                outcomes = self.run_trial(kernel_name)
                for case, outcome in outcomes.items():
                    if outcome.error:
                        print(f"\n{outcome.error}", file=sys.stderr)
                        sys.exit(1)
                    results[case, label].append(outcome)
                    print(
                        f"  trial {trial}, {label:<15} {case:<22} {describe(outcome, expected)}",
                        flush=True,
                    )
        print()
        print_table(results, expected)
        return {
            "buttons": self.buttons,
            "expected_comm_open": expected,
            "results": [
                {"reader": case, "kernel": label, "trials": [asdict(o) for o in outcomes]}
                for (case, label), outcomes in results.items()
            ],
        }

    def run_trial(self, kernel_name: str) -> dict[str, Outcome]:
        """Each case's burst, one after the other, in one fresh kernel."""
        from jupyter_client import BlockingKernelClient, KernelManager
        from jupyter_client.kernelspec import NoSuchKernel

        km = KernelManager(kernel_name=kernel_name, transport_encryption="required")
        try:
            km.start_kernel()
        except NoSuchKernel:
            return {"": Outcome(0, 0, False, None, f"No kernelspec named {kernel_name!r}.")}
        # A client with a session of its own, as a frontend has. parent=km: the client asks the
        # manager whether the kernel lives; alone it judges by the heartbeat, which under load
        # can take a starting kernel for dead ("Kernel died before replying to kernel_info").
        kc = BlockingKernelClient(parent=km, connection_file=km.connection_file)
        outcomes: dict[str, Outcome] = {}
        try:
            kc.load_connection_file()
            kc.start_channels()
            kc.wait_for_ready(timeout=60)
            warm = self.run_cell(kc, "import ipywidgets")  # not what we measure
            if warm.error:
                error = f"{kernel_name}: {warm.error} (pip install ipywidgets)"
                return {"": Outcome(0, 0, False, None, error)}
            for case, pause in self.cases.items():
                outcomes[case] = self.run_cell(kc, BURST_CODE.format(n=self.buttons), pause)
            return outcomes
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)

    def run_cell(self, kc: Any, code: str, pause: float = 0.0) -> Outcome:
        """Run ``code``; count its messages until idle, or until quiet if the idle was lost.

        With ``pause``, the reader stops reading IOPub once it has seen ``pause_after``
        comm_open, for that many seconds and until the cell's execute_reply has come.
        """
        reader_pause = ReaderPause(pause, after=self.pause_after) if pause else None
        try:
            run = run_cell(
                kc, code, self.timeout, keep=lambda m: False, quiet=QUIET, pause=reader_pause
            )
        except CellTimeout as exc:  # an idle lost, and no reply either: shown as lost
            run = exc.run
        return Outcome.of(run)


def describe(outcome: Outcome, expected: int) -> str:
    time_text = "-" if outcome.seconds_to_idle is None else f"{outcome.seconds_to_idle:.2f} s"
    return (
        f"{outcome.comm_open}/{expected} comm_open, "
        f"display_data {'yes' if outcome.display_data else 'LOST'}, "
        f"idle {'yes' if outcome.idle else 'LOST'}, {time_text}"
    )


def print_table(results: dict[tuple[str, str], list[Outcome]], expected: int) -> None:
    """One row per (reader's case, kernel): the worst trial's comm_open and how many lost."""
    header = (
        f"{'reader':<22} {'kernel':<16} {'comm_open (worst)':>17} {'lost (worst)':>12} "
        f"{'trials lost':>11} {'display_data':>12} {'idle':>5} {'median to idle':>14}"
    )
    print(header)
    print("-" * len(header))
    for (case, label), outcomes in results.items():
        n = len(outcomes)
        worst = min(o.comm_open for o in outcomes)
        lossy = sum(o.comm_open < expected or not o.display_data or not o.idle for o in outcomes)
        times = [o.seconds_to_idle for o in outcomes if o.seconds_to_idle is not None]
        median = f"{statistics.median(times):.2f} s" if times else "-"
        print(
            f"{case:<22} {label:<16} {f'{worst}/{expected}':>17} {expected - worst:>12} "
            f"{f'{lossy}/{n}':>11} "
            f"{f'{sum(o.display_data > 0 for o in outcomes)}/{n}':>12} "
            f"{f'{sum(o.idle for o in outcomes)}/{n}':>5} {median:>14}"
        )


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
