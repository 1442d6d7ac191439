"""A client process that runs one burst on a kernel and reports what it received, as JSON.

For readers that must live in a process of their own: in a network namespace behind a
rate-limited link (``ip netns exec NS python harness/burst_reader.py ...``; the pause tests
and the burst scenario's ``link`` condition; :data:`SCRIPT` is its path). It connects with
the connection file's addresses and CurveZMQ keys, imports ipywidgets in the kernel, runs the
seed's widget grid, collects IOPub up to the cell's idle and prints one JSON line::

    {"counts": {"comm_open": 9002, ...}, "idle": true, "status": "ok", "seconds": 41.2}

A lost idle ends the collection after ``--timeout`` seconds, or ``--quiet`` seconds of
silence once the execute_reply came, with ``"idle": false``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: This file, for ``[sys.executable, str(SCRIPT), connection_file, ...]``.
SCRIPT = Path(__file__).resolve()


def main(argv: list[str] | None = None) -> int:
    from jupyter_client import BlockingKernelClient

    from harness.bursts import widget_grid_code
    from harness.cells import CellTimeout, run_cell

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("connection_file")
    parser.add_argument("--buttons", type=int, default=3000)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument(
        "--quiet",
        type=float,
        default=None,
        help="give up this many seconds after the execute_reply came and IOPub went silent "
        "(a lost idle never comes; default: wait the whole --timeout)",
    )
    args = parser.parse_args(argv)

    kc = BlockingKernelClient(connection_file=args.connection_file)
    kc.load_connection_file()
    # No heartbeat channel: with no manager to ask, jupyter_client would judge the kernel's
    # life from it, and one beat later than 1 s on a loaded machine reads as a dead kernel.
    kc.start_channels(hb=False)
    try:
        kc.wait_for_ready(timeout=120)
        run_cell(kc, "import ipywidgets", timeout=120)
        try:
            run = run_cell(
                kc,
                widget_grid_code(args.buttons),
                args.timeout,
                keep=lambda m: False,
                quiet=args.quiet,
            )
        except CellTimeout as exc:  # reported as a lost idle: the caller judges
            run = exc.run
        result = {
            "counts": run.counts,
            "idle": run.idle,
            "status": run.status,
            "seconds": run.seconds,
        }
        print(json.dumps(result), flush=True)
    finally:
        kc.stop_channels()
    return 0


if __name__ == "__main__":
    # Run as a file, the script's folder comes first on sys.path: the checkout root in its
    # place, so that ``harness`` is a package and its modules are not top-level names.
    sys.path[0] = str(SCRIPT.parents[1])
    sys.exit(main())
