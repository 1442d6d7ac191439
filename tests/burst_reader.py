"""A client process that runs one burst on a kernel and reports what it received, as JSON.

For readers that must live in a process of their own: in a network namespace behind a
rate-limited link (``ip netns exec NS python tests/burst_reader.py ...``; test_iopub_pause and
benchmarks/iopub_pause.py). It connects with the connection file's addresses and CurveZMQ
keys, imports ipywidgets in the kernel, runs the seed's widget grid, collects IOPub up to the
cell's idle and prints one JSON line::

    {"counts": {"comm_open": 9002, ...}, "idle": true, "status": "ok", "seconds": 41.2}

A lost idle ends the collection after ``--timeout`` seconds, or ``--quiet`` seconds of
silence once the execute_reply came, with ``"idle": false``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jupyter_client import BlockingKernelClient

from tests.bursts import widget_grid_code
from tests.helpers import execute_and_collect


def main(argv: list[str] | None = None) -> int:
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
        execute_and_collect(kc, "import ipywidgets", timeout=120)
        counts: dict[str, int] = {}

        def keep(msg: dict[str, Any]) -> bool:
            counts[msg["msg_type"]] = counts.get(msg["msg_type"], 0) + 1
            return False

        start = time.monotonic()
        status = None
        try:
            reply, _ = execute_and_collect(
                kc, widget_grid_code(args.buttons), args.timeout, keep=keep, quiet=args.quiet
            )
            idle, status = True, reply["content"]["status"]
        except TimeoutError:
            idle = False
        seconds = time.monotonic() - start
        result = {"counts": counts, "idle": idle, "status": status, "seconds": seconds}
        print(json.dumps(result), flush=True)
    finally:
        kc.stop_channels()
    return 0


if __name__ == "__main__":
    sys.exit(main())
