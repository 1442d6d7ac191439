"""Fetching every widget model's state: per-widget request_state, the control comm, and ours.

Three ways a frontend that (re)connects gets the state of every live widget model:

* ``per-widget``: one ``request_state`` comm_msg per model, answered by one ``update``
  comm_msg per model on IOPub (what the widget manager did before the control comm);
* ``control comm``: ipywidgets' ``jupyter.widget.control`` comm, ``request_states`` on shell,
  one ``update_states`` comm_msg back on IOPub (to every client). On an idle ipykernel_ext it
  is answered by the kernel's snapshot on the main shell; the benchmark also times the same
  comm answered by ipywidgets' own handler there (``answer_while_busy`` off for that trial),
  and compares the idle comm path of both kernels in a table of its own;
* ``widget_state``: ipykernel_ext's ``widget_state_request`` on control, one reply to the
  requester (``ipykernel_ext.client.fetch_widget_states``).

Each time is a client round trip: from sending the request to having the states decoded with
their buffers in place. Stock ipykernel (``python3``) and ipykernel_ext (``python3-ext``) run
side by side, with CurveZMQ on every socket; the control comm and ``widget_state`` trials are
interleaved on the same kernel. Another table times the kernel's own work (state, buffers,
JSON packing) in process, without the transport.

Scenarios: a GridBox of 1000 Buttons (3002 models), 200 Image widgets of 100 kB (400 models).

    python benchmarks/widget_fetch.py            # 7 runs (3 for per-widget)
    python benchmarks/widget_fetch.py --quick    # 3 runs (1 for per-widget)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from queue import Empty
from typing import Any

from jupyter_client import BlockingKernelClient, KernelManager

from ipykernel_ext.client import fetch_widget_states

STOCK, EXT = "python3", "python3-ext"
CONTROL_PROTOCOL_VERSION = "1.0.0"
WIDGET_PROTOCOL_VERSION = "2.1.0"


def start(kernel_name: str, plain: bool) -> tuple[KernelManager, BlockingKernelClient]:
    if plain:
        km = KernelManager(kernel_name=kernel_name)
    else:
        km = KernelManager(kernel_name=kernel_name, transport_encryption="required")
    km.start_kernel()
    kc = BlockingKernelClient(connection_file=km.connection_file)
    kc.load_connection_file()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def run_cell(kc: BlockingKernelClient, code: str, timeout: float = 300) -> str:
    """Run ``code``; drain IOPub up to its idle; return its stdout."""
    msg_id = kc.execute(code)
    out: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            raise RuntimeError("\n".join(msg["content"]["traceback"]))
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    reply = kc.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=timeout)
    return "".join(out)


def drain_iopub(kc: BlockingKernelClient, quiet: float = 0.3) -> None:
    while True:
        try:
            kc.get_iopub_msg(timeout=quiet)
        except Empty:
            return


SCENARIOS = {
    "1000 Buttons": (
        "import ipywidgets as _w\n"
        "_w.Widget.close_all()\n"
        "_b = [_w.Button(description=f'button {i}') for i in range({n})]\n"
        "_g = _w.GridBox(_b)\n"
        "print(len(_w.widgets.widget._instances))\n"
    ),
    "200 Images of 100 kB": (
        "import os, ipywidgets as _w\n"
        "_w.Widget.close_all()\n"
        "_b = [_w.Image(value=os.urandom({kb} * 1000), format='png') for i in range({n})]\n"
        "print(len(_w.widgets.widget._instances))\n"
    ),
}


def comm_ids(kc: BlockingKernelClient) -> list[str]:
    msg_id = kc.comm_info(target_name="jupyter.widget")
    reply = kc.get_shell_msg(timeout=60)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=60)
    return list(reply["content"]["comms"])


def put_buffers(states: dict[str, Any], paths: list[list[Any]], buffers: list[Any]) -> None:
    for path, buffer in zip(paths, buffers, strict=True):
        target = states
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = buffer


def send_comm_msg(kc: BlockingKernelClient, comm_id: str, data: dict[str, Any]) -> None:
    kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data}))


def open_control_comm(kc: BlockingKernelClient) -> str:
    comm_id = uuid.uuid4().hex
    msg = kc.session.msg(
        "comm_open",
        {"comm_id": comm_id, "target_name": "jupyter.widget.control", "data": {}},
        metadata={"version": CONTROL_PROTOCOL_VERSION},
    )
    kc.shell_channel.send(msg)
    drain_iopub(kc)
    return comm_id


def fetch_control_comm(
    kc: BlockingKernelClient, comm_id: str, timeout: float = 60
) -> dict[str, Any] | None:
    """``request_states`` on the control comm; the states with buffers in place (None: lost)."""
    send_comm_msg(kc, comm_id, {"method": "request_states"})
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        except Empty:
            return None
        content = msg["content"]
        if (
            msg["msg_type"] == "comm_msg"
            and content.get("comm_id") == comm_id
            and content["data"].get("method") == "update_states"
        ):
            states = content["data"]["states"]
            put_buffers(states, content["data"]["buffer_paths"], msg["buffers"])
            return states


def fetch_per_widget(
    kc: BlockingKernelClient, ids: list[str], window: int = 200, quiet: float = 10
) -> int:
    """One ``request_state`` per model, at most ``window`` in flight; returns the lost count."""
    waiting = set(ids)
    pending = list(ids)
    in_flight = 0
    while waiting:
        while pending and in_flight < window:
            send_comm_msg(kc, pending.pop(), {"method": "request_state"})
            in_flight += 1
        try:
            msg = kc.get_iopub_msg(timeout=quiet)
        except Empty:
            return len(waiting)  # no message for `quiet` seconds: the rest is lost
        content = msg["content"]
        if msg["msg_type"] == "comm_msg" and content["data"].get("method") == "update":
            comm_id = content["comm_id"]
            if comm_id in waiting:
                state = content["data"]["state"]
                put_buffers(state, content["data"].get("buffer_paths", []), msg["buffers"])
                waiting.discard(comm_id)
                in_flight -= 1
    return 0


KERNEL_SIDE = """
import json as _json, time as _time
from ipywidgets.widgets import widget as _wm
from ipykernel_ext.kernel.widget_state import build_widget_state_reply as _build
_pack = get_ipython().kernel.session.pack

def _straightforward():
    # get_state per widget, _remove_buffers, pack: what a plain handler would do.
    full = {{}}
    for w in _wm._instances.values():
        full[w.model_id] = {{'model_name': w._model_name, 'model_module': w._model_module,
            'model_module_version': w._model_module_version, 'state': w.get_state()}}
    states, paths, buffers = _wm._remove_buffers(full)
    _pack(dict(status='ok', states=states, buffer_paths=paths, missing=[]))

def _comm_handler_work():
    # The body of Widget._handle_control_comm_msg (ipywidgets 8.1.9), without the send.
    _wm.Widget.get_manager_state()
    full = {{}}
    for w in _wm._instances.values():
        full[w.model_id] = {{'model_name': w._model_name, 'model_module': w._model_module,
            'model_module_version': w._model_module_version, 'state': w.get_state()}}
    states, paths, buffers = _wm._remove_buffers(full)
    _pack(dict(method='update_states', states=states, buffer_paths=paths))

def _ours():
    content, buffers = _build({{}})
    _pack(content)

_t = {{'comm': [], 'plain': [], 'ours': []}}
for _i in range({runs}):
    for _name, _f in (('comm', _comm_handler_work), ('plain', _straightforward), ('ours', _ours)):
        _s = _time.perf_counter(); _f(); _t[_name].append(_time.perf_counter() - _s)
print(_json.dumps(_t))
"""


def transport_floor(frames: list[int], runs: int, plain: bool) -> float:
    """Median time to move frames of these sizes once over ROUTER/DEALER, no kernel involved.

    The least any reply of that size can cost on this machine (with CurveZMQ unless plain).
    """
    import os

    import zmq

    ctx = zmq.Context()
    server, client = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    if not plain:
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        server.curve_server = True
        server.curve_secretkey, server.curve_publickey = server_secret, server_public
        client.curve_serverkey = server_public
        client.curve_publickey, client.curve_secretkey = client_public, client_secret
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    payload = [os.urandom(size) for size in frames]
    times = []
    try:
        for _ in range(runs):
            start = time.perf_counter()
            client.send(b"request")
            identity, _ = server.recv_multipart()
            server.send_multipart([identity, *payload], copy=False)
            client.recv_multipart()
            times.append(time.perf_counter() - start)
    finally:
        server.close(linger=0)
        client.close(linger=0)
        ctx.term()
    return statistics.median(times)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:9.1f}" if values else "      n/a"


def bench_kernel(kernel: str, args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    km, kc = start(kernel, args.plain)
    try:
        for scenario, template in SCENARIOS.items():
            if args.only and args.only not in scenario:
                continue
            n = args.buttons if scenario.startswith("1000") else args.images
            code = template.replace("{n}", str(n)).replace("{kb}", str(args.image_kb))
            models = int(run_cell(kc, code).strip())
            drain_iopub(kc)
            ids = comm_ids(kc)
            label = scenario.replace("1000", str(args.buttons)).replace("200", str(args.images))
            label = label.replace("100 kB", f"{args.image_kb} kB")
            row: dict[str, Any] = {"kernel": kernel, "scenario": label, "models": models}

            per_widget: list[float] = []
            lost = 0
            for _ in range(args.per_widget_runs):
                seconds, missed = timed(lambda ids=ids: fetch_per_widget(kc, ids, args.window))
                lost += missed
                if not missed:
                    per_widget.append(seconds)
                drain_iopub(kc)
            row["per_widget"], row["per_widget_lost"] = per_widget, lost

            control_id = open_control_comm(kc)
            comm: list[float] = []
            theirs: list[float] = []
            ours: list[float] = []
            comm_lost = 0
            equal: bool | None = None
            comm_equal: bool | None = None
            # On ipykernel_ext, "comm" is the idle kernel's control comm answered by our
            # snapshot; "theirs" the same comm answered by ipywidgets' handler (the switch
            # turned off for that trial only, outside the timing).
            methods = ["comm", "ours", "theirs"] if kernel == EXT else ["comm"]
            for trial in range(args.runs):
                shift = trial % len(methods)
                for method in methods[shift:] + methods[:shift]:
                    if method in ("comm", "theirs"):
                        if method == "theirs":
                            run_cell(kc, "get_ipython().kernel.answer_while_busy = False")
                            drain_iopub(kc, quiet=0.05)
                        seconds, states = timed(lambda cid=control_id: fetch_control_comm(kc, cid))
                        if method == "theirs":
                            run_cell(kc, "get_ipython().kernel.answer_while_busy = True")
                        if states is None:
                            comm_lost += 1
                        elif method == "comm":
                            comm.append(seconds)
                            comm_states = states
                        else:
                            theirs.append(seconds)
                            theirs_states = states
                        drain_iopub(kc, quiet=0.05)
                    else:
                        seconds, reply = timed(lambda: fetch_widget_states(kc, timeout=60))
                        ours.append(seconds)
                        ours_states = reply["states"]
            if kernel == EXT and comm and theirs:
                equal = _same_states(theirs_states, ours_states)
                comm_equal = _same_states(theirs_states, comm_states)
            row.update(
                comm=comm,
                comm_lost=comm_lost,
                ours=ours,
                theirs=theirs,
                equal=equal,
                comm_equal=comm_equal,
            )

            if kernel == EXT:
                out = run_cell(kc, KERNEL_SIDE.format(runs=args.runs))
                row["kernel_side"] = json.loads(out.strip().splitlines()[-1])
                row["reply_frames"] = frame_sizes(reply)
            rows.append(row)
            print(f"  {kernel:12} {label}: done", file=sys.stderr, flush=True)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def frame_sizes(reply: dict[str, Any]) -> list[int]:
    """Sizes of a reply's content frame and buffers, for the transport floor."""
    return [len(json.dumps(reply, default=lambda _: None).encode())] + [
        memoryview(b).nbytes for b in _buffers_of(reply["states"])
    ]


def _buffers_of(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [b for v in x.values() for b in _buffers_of(v)]
    if isinstance(x, list | tuple):
        return [b for v in x for b in _buffers_of(v)]
    return [x] if isinstance(x, memoryview | bytes | bytearray) else []


def _same_states(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def plain(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [plain(v) for v in x]
        if isinstance(x, memoryview | bytearray):
            return bytes(x)
        return x

    return plain(a) == plain(b)


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print()
    transport = "plain TCP" if args.plain else "CurveZMQ"
    print(f"Client round trip, request sent to states usable (median ms; {transport})")
    print(
        f"{'kernel':12} {'scenario':22} {'models':>6} {'per-widget':>10} {'lost':>5} "
        f"{'ctrl comm':>9} {'lost':>5} {'widget_state':>12} {'ours/comm':>9} "
        f"{'per-widget/ours':>15} {'same':>5}"
    )
    for row in rows:
        ours, comm, per_widget = row["ours"], row["comm"], row["per_widget"]
        # ours/comm: widget_state against ipywidgets' own handler, on the same kernel.
        theirs = row["theirs"]
        ratio = (
            f"{statistics.median(ours) / statistics.median(theirs):9.2f}" if ours and theirs else ""
        )
        speedup = (
            f"{statistics.median(per_widget) / statistics.median(ours):.1f}x"
            if ours and per_widget
            else ""
        )
        print(
            f"{row['kernel']:12} {row['scenario']:22} {row['models']:6} "
            f"{median_ms(row['per_widget']):>10} {row['per_widget_lost']:5} "
            f"{median_ms(row['comm']):>9} {row['comm_lost']:5} "
            f"{median_ms(ours) if ours else 'n/a':>12} {ratio:>9} {speedup:>15} "
            f"{ {True: 'yes', False: 'NO', None: '-'}[row['equal']]:>5}"
        )
    print(
        f"\nruns: {args.runs} (control comm, widget_state, interleaved), "
        f"{args.per_widget_runs} (per-widget); ctrl comm on ipykernel_ext: our idle snapshot; "
        "ours/comm and 'same': widget_state against ipywidgets' own handler on that kernel; "
        "'lost' counts replies that never came "
        "(per-widget: models; control comm: trials); "
        f"per-widget keeps {args.window} requests in flight"
    )
    print(f"\nControl comm on an idle kernel, client round trip (median ms; {transport})")
    print("(ipykernel_ext answers it with its snapshot on the main shell; stock and the")
    print(" ext kernel with answer_while_busy off, with ipywidgets' own handler)")
    print(
        f"{'scenario':22} {'stock':>9} {'ext':>9} {'stock/ext':>9} "
        f"{'ext, ipywidgets':>15} {'same':>5}"
    )
    stock_rows = {row["scenario"]: row for row in rows if row["kernel"] == STOCK}
    for row in rows:
        if row["kernel"] != EXT:
            continue
        stock_row = stock_rows.get(row["scenario"])
        stock_comm = stock_row["comm"] if stock_row else []
        ratio = (
            f"{statistics.median(stock_comm) / statistics.median(row['comm']):9.2f}"
            if stock_comm and row["comm"]
            else ""
        )
        print(
            f"{row['scenario']:22} {median_ms(stock_comm):>9} {median_ms(row['comm']):>9} "
            f"{ratio:>9} {median_ms(row['theirs']):>15} "
            f"{ {True: 'yes', False: 'NO', None: '-'}[row['comm_equal']]:>5}"
        )
    print("('same': the ext kernel's two control comm answers carry the same states)")
    print("\nTransport floor: the same bytes once over a bare ROUTER/DEALER pair (median ms)")
    for row in rows:
        if row.get("reply_frames"):
            floor = transport_floor(row["reply_frames"], args.runs, args.plain)
            size = sum(row["reply_frames"]) / 1e6
            print(f"{row['scenario']:22} {size:6.1f} MB {floor * 1000:9.1f}")
    print("\nIn the kernel, same process (median ms): state + buffers + JSON packing")
    print("(straightforward: get_state per widget, ipywidgets' _remove_buffers, pack)")
    print(
        f"{'scenario':22} {'comm handler':>12} {'straightforward':>15} {'widget_state':>12} "
        f"{'ours/comm':>9} {'ours/straightforward':>20}"
    )
    for row in rows:
        side = row.get("kernel_side")
        if side:
            comm, plain, ours = (statistics.median(side[k]) for k in ("comm", "plain", "ours"))
            print(
                f"{row['scenario']:22} {comm * 1000:12.1f} {plain * 1000:15.1f} "
                f"{ours * 1000:12.1f} {ours / comm:9.2f} {ours / plain:20.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 runs, 1 per-widget run")
    parser.add_argument("--runs", type=int, default=7, help="control comm / widget_state runs")
    parser.add_argument("--per-widget-runs", type=int, default=3)
    parser.add_argument(
        "--window", type=int, default=200, help="per-widget: request_state messages in flight"
    )
    parser.add_argument("--buttons", type=int, default=1000)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--image-kb", type=int, default=100)
    parser.add_argument("--only", default="", help="run the scenarios whose name has this")
    parser.add_argument("--plain", action="store_true", help="no CurveZMQ (default: required)")
    parser.add_argument(
        "--kernels", default=f"{STOCK},{EXT}", help="comma-separated kernelspec names"
    )
    args = parser.parse_args()
    if args.quick:
        args.runs, args.per_widget_runs = 3, 1
    rows: list[dict[str, Any]] = []
    for kernel in args.kernels.split(","):
        bench_kernel(kernel, args, rows)
    report(rows, args)


if __name__ == "__main__":
    main()
