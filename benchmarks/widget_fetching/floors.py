"""What a widget-state reply costs without the client round trip: the ``widget_fetch`` floors.

* :data:`KERNEL_SIDE`: a cell that times, in the kernel's own process, the work behind each
  answer (ipywidgets' control comm handler, a straightforward ``get_state`` per widget, and
  ipykernel_ext's ``build_widget_state_reply``), each up to JSON packing, no transport;
* :func:`transport_floor`: the same bytes as a reply (:func:`frame_sizes`) moved once over a
  bare ROUTER/DEALER pair, with CurveZMQ unless plain: the least any reply of that size
  costs on this machine.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import zmq

from benchmarks.trials import median

#: The kernel-side timings: ``.format(runs=N)``; the cell prints one JSON line,
#: ``{"comm": [s, ...], "plain": [...], "ours": [...]}``.
KERNEL_SIDE = """
import json as _json, time as _time
from ipywidgets.widgets import widget as _wm
from ipykernel_ext.kernel.widgets.snapshot import build_widget_state_reply as _build
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


def transport_floor(frames: list[int], runs: int, plain: bool) -> float | None:
    """Median time to move frames of these sizes once over ROUTER/DEALER, no kernel involved.

    The least any reply of that size can cost on this machine (with CurveZMQ unless plain).
    """
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
    return median(times)


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
