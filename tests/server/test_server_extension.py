"""On once installed: the server extension the install enables.

Real ``jupyter_server`` subprocesses of this venv (``pip install -e .`` put the extension's
config.d file there), started as a user would (``ipykernel_ext=None``): no flag gives our
class and says so; a configured class wins; both off switches give stock; in gateway mode
(a real Enterprise Gateway) our gateway class is used, replacing ours for local kernels with
the reason logged, and jupyter_server's own gateway class configured explicitly wins.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.gateway import EG_EXT, EnterpriseGateway, gateway_command
from harness.kernel_websocket import KernelWebsocket
from harness.polling import WaitTimeout, wait_until
from harness.server import JupyterServer
from ipykernel_ext import KERNEL_NAME, __version__

# Hang guard per test: up to three server starts (a few seconds each on 2 busy cores).
pytestmark = pytest.mark.timeout(180)

OURS = "ipykernel_ext.server.SharedChannelsConnection"
STOCK = "jupyter_server.services.kernels.connection.channels.ZMQChannelsWebsocketConnection"
GATEWAY = "jupyter_server.gateway.connections.GatewayWebSocketConnection"
CONFIG_FILE = Path(sys.prefix, "etc/jupyter/jupyter_server_config.d/ipykernel_ext.json")
#: The start line saying what is on (ipykernel_ext/server/extension.py, describe()).
ON = "ipykernel_ext: every tab of a kernel on one set of channels"
OFF = "ipykernel_ext: outputs that survive the tab are off"
GATEWAY_ON = "ipykernel_ext: kernels behind the gateway"
OURS_GATEWAY = "ipykernel_ext.server.GatewayOutputsConnection"


def wait_for_log(server: JupyterServer, text: str, timeout: float = 60) -> str:
    """The server's log once it has ``text`` (a hang guard, not a verdict on speed)."""
    try:
        return wait_until(
            server.log_text, timeout, f"{text!r} in the log", done=lambda log: text in log
        )
    except WaitTimeout:
        raise AssertionError(f"{text!r} not in the server's log:\n{server.log_tail()}") from None


def test_the_install_enables_the_extension() -> None:
    assert CONFIG_FILE.is_file(), f"{CONFIG_FILE} missing: pip install -e . puts it there"
    assert json.loads(CONFIG_FILE.read_text()) == {
        "ServerApp": {"jpserver_extensions": {"ipykernel_ext": True}}
    }
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", "server", "extension", "list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)  # its colours
    assert re.search(r"^\s*ipykernel_ext enabled$", out, re.M), out
    assert re.search(rf"^\s*ipykernel_ext {re.escape(__version__)} OK$", out, re.M), out


def test_no_flag_gives_shared_channels_and_says_so() -> None:
    with JupyterServer(ipykernel_ext=None) as server:
        log = wait_for_log(server, ON)
        assert f"({OURS}); outputs survive the tab: on" in log
        kernel_id = server.start_kernel(KERNEL_NAME)
        with KernelWebsocket(server, kernel_id) as ws:
            reply, _ = ws.collect_execution(ws.execute("1 + 1"))
            assert reply["content"]["status"] == "ok"
            session = ws.session_id
        # SharedChannelsConnection logs what a websocket's outbox did when it closes.
        wait_for_log(server, f"Websocket {session} of kernel {kernel_id} closed:")


def test_keep_outputs_off_is_reported() -> None:
    args = ["--SharedChannelsConnection.keep_outputs=False"]
    with JupyterServer(ipykernel_ext=None, extra_args=args) as server:
        log = wait_for_log(server, ON)
        assert "outputs survive the tab: off (KeepOutputs.keep_outputs=False)" in log


@pytest.mark.parametrize("where", ["command line", "config file"])
def test_a_configured_class_wins(where: str, tmp_path: Path) -> None:
    args: list[str] = []
    env: dict[str, str] = {}
    if where == "command line":
        args = [f"--ServerApp.kernel_websocket_connection_class={STOCK}"]
    else:
        (tmp_path / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"kernel_websocket_connection_class": STOCK}})
        )
        env = {"JUPYTER_CONFIG_DIR": str(tmp_path)}
    with JupyterServer(ipykernel_ext=None, extra_args=args, env=env) as server:
        log = wait_for_log(server, OFF)
        assert f"(kernel websockets: {STOCK}, configured)" in log
        assert ON not in log


def test_off_for_one_run_is_stock() -> None:
    args = ["--ServerApp.jpserver_extensions={'ipykernel_ext': False}"]
    with JupyterServer(ipykernel_ext=None, extra_args=args) as server:
        # Not loaded, and nothing configures a class: jupyter_server's default, stock's.
        assert "ipykernel_ext" not in server.log_text(), server.log_text()


def test_off_in_a_config_file_is_stock(tmp_path: Path) -> None:
    # README's off switch as a user's config: it outranks the environment's config.d files
    # (``jupyter server extension disable`` would rewrite this whole venv's file instead).
    (tmp_path / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"ipykernel_ext": False}}})
    )
    with JupyterServer(ipykernel_ext=None, env={"JUPYTER_CONFIG_DIR": str(tmp_path)}) as server:
        assert "ipykernel_ext" not in server.log_text(), server.log_text()


# --- gateway mode ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway() -> Iterator[EnterpriseGateway]:
    """A real Enterprise Gateway 3.3 (its own venv, harness/gateway.py)."""
    command = gateway_command()
    if isinstance(command, str):
        pytest.skip(command)
    with EnterpriseGateway() as gw:
        yield gw


def gateway_server(gateway: EnterpriseGateway, *args: str) -> JupyterServer:
    # Enterprise Gateway 3.3 launches kernels with jupyter_client 6: no CurveZMQ there.
    return JupyterServer(
        ipykernel_ext=None, encryption=False, extra_args=[f"--gateway-url={gateway.url}", *args]
    )


def test_gateway_mode_uses_our_gateway_class(gateway: EnterpriseGateway) -> None:
    """Our gateway class, and lasting kernels off (PROTOCOL section 9): the gateway keeps its
    own kernels. A server killed with ``kill -9`` leaves its gateway kernel running at the
    gateway, with no state file of ours; the next server works, but does not list that
    kernel (jupyter_server's gateway kernel manager lists the kernels it started), as
    with stock."""
    with gateway_server(gateway) as server:
        log = wait_for_log(server, GATEWAY_ON)
        assert f"({OURS_GATEWAY}); outputs survive the tab: on" in log
        assert "outlive a server that dies: off (kernels run behind the gateway" in log
        kernel_id = server.start_kernel(EG_EXT)
        try:
            assert not list(server.runtime_dir.glob("ipykernel-ext-lasting-*")), kernel_id
            server.kill()
            assert gateway.kernel_model(kernel_id)["execution_state"] != "dead"
            server.start()
            assert kernel_id not in [k["id"] for k in server.api("GET", "api/kernels")]
            server.shutdown_kernel(server.start_kernel(EG_EXT))
            assert gateway.kernel_model(kernel_id)["execution_state"] != "dead"
        finally:
            gateway.shutdown_kernel(kernel_id)


def test_gateway_mode_replaces_our_local_class_and_says_why(gateway: EnterpriseGateway) -> None:
    with gateway_server(gateway, f"--ServerApp.kernel_websocket_connection_class={OURS}") as server:
        log = wait_for_log(server, GATEWAY_ON)
        assert "cannot serve kernels behind a gateway" in log
        assert f"using {OURS_GATEWAY}, its gateway counterpart, instead" in log


def test_gateway_mode_a_configured_stock_class_wins(gateway: EnterpriseGateway) -> None:
    args = f"--ServerApp.kernel_websocket_connection_class={GATEWAY}"
    with gateway_server(gateway, args) as server:
        log = wait_for_log(server, OFF)
        assert f"(kernel websockets: {GATEWAY}, configured)" in log
