"""Kernels behind Enterprise Gateway: page to kernel, burst to idle; stock class against ours.

One real Enterprise Gateway 3.3 (``.venv-eg``, ``harness/gateway.py``), kernels ``eg_ext`` by
its ``DistributedProcessProxy`` on localhost, and two notebook servers with ``--gateway-url``
in front of it: jupyter_server's own ``GatewayWebSocketConnection`` (our extension off) and
``GatewayOutputsConnection`` (the extension as installed). The trials take turns, server by
server. Two figures, medians:

* ``page connected``: a new notebook opened in JupyterLab (headless Chromium), from
  ``page.goto`` until the page's kernel answered its ``kernel_info_request`` (the first
  ``kernel_info_reply`` on the page's websocket). Stock's first websocket fails its handshake
  and the browser retries with the same session; the gateway may take the retry for a stale
  connection and stall (about a minute, on most loads here), or stock's server gives up on
  the gateway meanwhile and drops the page's request (never connected). Ours opens nothing
  for the failed one. The median is over the loads that connected; also counted: loads over
  10 s, and loads not connected after 90 s.
* ``burst to idle``: an open legacy websocket runs a cell printing ``--lines`` lines, one
  flush each; the time from the request to its idle. Ours keeps a second websocket to the
  gateway (the feed that hears every cell's IOPub for a tab that may leave): the gateway
  sends each IOPub message twice, and the server reads it twice. This is its price.

    python -m benchmarks gateway_tab            # 5 page loads, 5 bursts per server
    python -m benchmarks gateway_tab --quick    # 2 each
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.trials import fmt, median, print_table, ratio
from harness.browser import LAB_ARGS, chromium, quiet_lab_settings
from harness.browser_outputs import new_notebook
from harness.gateway import EG_EXT, EnterpriseGateway, gateway_command
from harness.kernel_websocket import KernelWebsocket
from harness.page_websocket import WebsocketLog
from harness.server import JupyterServer

TRIALS, QUICK_TRIALS = 5, 2
SLOW = 10.0  # a page load over this many seconds is counted as stalled
NEVER = 90.0  # a page not connected after this long is counted as never connected
HANG = 180.0

STOCK, OURS = "stock GatewayWebSocketConnection", "GatewayOutputsConnection"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lines", type=int, default=2000, help="lines the burst cell prints")


def page_connected(browser: Any, lab: JupyterServer) -> float | None:
    """Seconds until the page's kernel answered; None: not in ``NEVER`` s (stock's server
    can give up on the gateway meanwhile and drop the page's request: it never connects)."""
    nb = new_notebook(lab, "bench", kernel=EG_EXT)
    nb.write(["1"])
    page = browser.new_page()
    try:
        log = WebsocketLog(page)
        start = time.perf_counter()
        page.goto(lab.url + nb.url())
        while not any(f.msg_type == "kernel_info_reply" for f in log.frames()):
            if time.perf_counter() - start > NEVER:
                return None
            page.wait_for_timeout(50)
        return time.perf_counter() - start
    finally:
        page.close()
        for kernel in lab.api("GET", "api/kernels"):
            lab.shutdown_kernel(kernel["id"])


def burst_to_idle(ws: KernelWebsocket, lines: int) -> float:
    start = time.perf_counter()
    msg_id = ws.execute(f"for i in range({lines}):\n    print(i, flush=True)")
    ws.recv_until(
        lambda m: (
            m["msg_type"] == "status"
            and m["content"].get("execution_state") == "idle"
            and m["parent_header"].get("msg_id") == msg_id
        ),
        timeout=HANG,
    )
    elapsed = time.perf_counter() - start
    ws.backlog.clear()
    return elapsed


def run(args: argparse.Namespace) -> dict[str, Any]:
    command = gateway_command()
    if isinstance(command, str):
        raise SystemExit(command)
    results: dict[str, dict[str, list[float | None]]] = {STOCK: {}, OURS: {}}
    with EnterpriseGateway() as gateway:
        servers: dict[str, JupyterServer] = {}
        try:
            for name, extension in ((STOCK, False), (OURS, None)):
                servers[name] = JupyterServer(
                    app="lab",
                    encryption=False,
                    extra_args=[*LAB_ARGS, f"--gateway-url={gateway.url}"],
                    ipykernel_ext=extension,
                ).start()
                quiet_lab_settings(servers[name])
            with chromium() as browser:
                for _ in range(args.trials):
                    for name, lab in servers.items():
                        results[name].setdefault("page connected", []).append(
                            page_connected(browser, lab)
                        )
            for name, lab in servers.items():
                kernel_id = lab.start_kernel(EG_EXT)
                with KernelWebsocket(lab, kernel_id, legacy=True) as ws:
                    burst_to_idle(ws, 10)  # warm
                    results[name]["burst to idle"] = [
                        burst_to_idle(ws, args.lines) for _ in range(args.trials)
                    ]
                lab.shutdown_kernel(kernel_id)
        finally:
            for lab in servers.values():
                lab.stop()
    table = []
    for figure in ("page connected", "burst to idle"):
        theirs, ours = median(results[STOCK][figure]), median(results[OURS][figure])
        table.append([figure, fmt(theirs, 2, " s"), fmt(ours, 2, " s"),
                      fmt(ratio(ours, theirs), 2, "x")])  # fmt: skip
    loads = {n: results[n]["page connected"] for n in results}
    stalled = {n: sum(t is None or t > SLOW for t in loads[n]) for n in loads}
    never = {n: sum(t is None for t in loads[n]) for n in loads}
    table.append([f"page loads over {SLOW:g} s", f"{stalled[STOCK]}/{args.trials}",
                  f"{stalled[OURS]}/{args.trials}", ""])  # fmt: skip
    table.append([f"never connected ({NEVER:g} s)", f"{never[STOCK]}/{args.trials}",
                  f"{never[OURS]}/{args.trials}", ""])  # fmt: skip
    print(f"kernels behind Enterprise Gateway 3.3, {args.trials} trials, medians "
          f"(burst: {args.lines} lines)")  # fmt: skip
    print_table(["figure", STOCK, OURS, "ratio"], table)
    return {"trials": args.trials, "lines": args.lines, "results": results}
