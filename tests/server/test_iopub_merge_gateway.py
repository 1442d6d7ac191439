"""Nothing dropped by rate in gateway mode either, and the page shielded there too.

A notebook server with ``--gateway-url`` and the extension as installed
(``GatewayOutputsConnection``), a real Enterprise Gateway 3.3 launching ours (``eg_ext``) and
stock (``eg_stock``), a legacy-protocol websocket as JupyterLab's in gateway mode. Neither
jupyter_server's gateway websocket nor Enterprise Gateway's handler drops by rate, so every
message reaches our server, which merges and paces what a tab cannot take. Verdicts as in
test_iopub_merge.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.gateway import EG_EXT, EG_STOCK, EnterpriseGateway, gateway_command
from harness.kernel_websocket import KernelWebsocket
from harness.server import JupyterServer

from .test_iopub_merge import (
    WINDOW,
    cell_size,
    comm_id_of,
    image_ends_with_its_last_bytes,
    is_ours,
    merged_report,
    print_flood_arrives_whole_and_paced,
    run,
)

pytestmark = pytest.mark.timeout(400)

#: The message rate of this module's server (messages a second a tab may get).
GATEWAY_RATE = 100

_COMMAND = gateway_command()
if isinstance(_COMMAND, str):
    pytest.skip(_COMMAND, allow_module_level=True)


@pytest.fixture(scope="module")
def server() -> Iterator[JupyterServer]:
    with EnterpriseGateway() as gateway:
        srv = JupyterServer(
            ipykernel_ext=None,  # as installed: GatewayOutputsConnection
            encryption=False,  # Enterprise Gateway 3.3 launches with jupyter_client 6: no curve
            extra_args=[
                f"--gateway-url={gateway.url}",
                '--ServerApp.jpserver_extensions={"jupyter_server_ydoc": False}',
                # A tenth of the default: the gateway's extra hop delivers some floods under
                # 1000 messages a second, and these tests must see them over the rate.
                f"--ZMQChannelsWebsocketConnection.iopub_msg_rate_limit={GATEWAY_RATE}",
            ],
            stop_timeout=20,
        ).start()
        try:
            yield srv
        finally:
            srv.stop()


@pytest.fixture(scope="module", params=[EG_EXT, EG_STOCK])
def tab(request: pytest.FixtureRequest, server: JupyterServer) -> Iterator[KernelWebsocket]:
    kernel_id = server.start_kernel(request.param)
    with KernelWebsocket(server, kernel_id, legacy=True) as ws:
        ws.run("import ipywidgets as w\nfrom IPython.display import display, clear_output")
        yield ws
    server.shutdown_kernel(kernel_id)


def test_a_print_flood_arrives_whole_and_paced(server: JupyterServer, tab: KernelWebsocket) -> None:
    print_flood_arrives_whole_and_paced(server, tab, 100_000, GATEWAY_RATE)


def test_a_slider_ends_on_the_kernels_last_value(tab: KernelWebsocket) -> None:
    run(tab, "s = w.IntSlider(max=30000); display(s)")
    comm_id = comm_id_of(tab, "s.comm")
    n = cell_size(tab, 5001)
    _, view = run(tab, f"for i in range({n}): s.value = i")
    assert view.widgets[comm_id]["value"] == n - 1


def test_an_animation_ends_on_its_last_frame(tab: KernelWebsocket) -> None:
    n = cell_size(tab, 3000) // 2  # two messages a frame
    code = f"for i in range({n}):\n    clear_output(wait=True)\n    display(f'frame {{i}}')\n"
    _, view = run(tab, code)
    assert [o["data"]["text/plain"] for o in view.outputs] == [f"'frame {n - 1}'"]


def test_an_image_widget_ends_with_its_last_bytes(
    server: JupyterServer, tab: KernelWebsocket
) -> None:
    """A widget state with buffers comes from the gateway in jupyter_server's binary form: it
    reaches the tab, counted and merged as any other. On the old main (and stock
    jupyter_server) the first one ended the server's reading loop (it decoded every frame as
    UTF-8): the cell that displays the Image never ended at the tab, ours or stock's."""
    msg_id, view, n = image_ends_with_its_last_bytes(tab, 10000)
    if is_ours(tab):  # over the rate unless the gateway delivered under 100 a second
        updates = [m for m in view.messages if m["msg_type"] == "comm_msg"]
        assert len(updates) < n
        merged, peak = merged_report(server, msg_id)
        assert merged > 0 and peak <= GATEWAY_RATE * WINDOW
