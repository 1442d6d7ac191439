"""--router-identity=endpoint and RouterClient: one client ROUTER per channel, many kernels.

Real kernels through jupyter_client.KernelManager, CurveZMQ on unless a test says otherwise.
"Reached the right kernel" is checked by the kernel's own pid (``os.getpid()`` on shell,
``usage_request`` on control) against the pid KernelManager launched, and by a variable set
in each kernel; every reply is verified with the key of the kernel it is filed under.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from jupyter_client import KernelManager
from jupyter_client.provisioning import LocalProvisioner

from harness.kernels import EXT_KERNEL, new_client, running_kernel, start_kernel
from harness.polling import wait_until
from ipykernel_ext.client.router import (
    ROUTER_CLIENT_CHANNELS,
    KernelUnreachable,
    RouterClient,
)

FLAG = "--router-identity=endpoint"


def kernel_pid(km: KernelManager) -> int | None:
    """The kernel's process id, as its provisioner keeps it (a local kernel's)."""
    assert isinstance(km.provisioner, LocalProvisioner)
    return km.provisioner.pid


def _pid_and_name(reply: dict[str, Any]) -> tuple[int, str]:
    expressions = reply["content"]["user_expressions"]
    return (
        int(expressions["pid"]["data"]["text/plain"]),
        expressions["name"]["data"]["text/plain"].strip("'"),
    )


@pytest.fixture(scope="module")
def flagged() -> Iterator[list[KernelManager]]:
    """Three kernels with the flag and CurveZMQ; one listens on 0.0.0.0."""
    kms = [
        start_kernel(extra_arguments=[FLAG]),
        start_kernel(extra_arguments=[FLAG]),
        start_kernel(extra_arguments=[FLAG], ip="0.0.0.0"),
    ]
    try:
        yield kms
    finally:
        for km in kms:
            km.shutdown_kernel(now=True)


@pytest.fixture()
def client() -> Iterator[RouterClient]:
    with RouterClient(connect_timeout=60) as c:
        yield c


# What the routing id is (jupyter_client's URL for the channel) is checked in-process by
# tests/unit/test_endpoints.py; here, the kernels.


# --- three kernels, one ROUTER per channel ---------------------------------------------------


# Hang guard: the module's three kernels start here if it runs first, then requests to each.
@pytest.mark.timeout(180)
def test_each_kernel_is_addressed_and_reached_by_its_endpoints(
    flagged: list[KernelManager], client: RouterClient
) -> None:
    """Added by connection file, each kernel is filed under its endpoints and answers shell
    and control requests itself (its own pid, its own name)."""
    ids = [client.add_kernel(km.connection_file) for km in flagged]
    for km, kernel_id in zip(flagged, ids, strict=True):
        info = json.loads(Path(km.connection_file).read_text())
        assert "curve_publickey" in info, "a kernel without CurveZMQ"
        for channel in ROUTER_CLIENT_CHANNELS:
            endpoint = f"tcp://{info['ip']}:{info[f'{channel}_port']}".encode()
            assert client.routing_id(kernel_id, channel) == endpoint, (channel, info)
    assert json.loads(Path(flagged[2].connection_file).read_text())["ip"] == "0.0.0.0"
    # Shell.
    infos = client.gather(ids, "shell", "kernel_info_request")
    assert set(infos) == set(ids), "a kernel_info_reply missing"
    for reply in infos.values():
        assert reply["msg_type"] == "kernel_info_reply", reply
        assert "router_identity_endpoint" in reply["content"]["supported_features"], reply
    for i, kernel_id in enumerate(ids):
        reply = client.request(kernel_id, "shell", "execute_request", {"code": f"name = 'k{i}'"})
        assert reply["content"]["status"] == "ok", reply
    replies = client.gather(
        ids,
        "shell",
        "execute_request",
        {"code": "import os", "user_expressions": {"pid": "os.getpid()", "name": "name"}},
    )
    for i, (km, kernel_id) in enumerate(zip(flagged, ids, strict=True)):
        assert _pid_and_name(replies[kernel_id]) == (kernel_pid(km), f"k{i}"), i
    # Control.
    usage = client.gather(ids, "control", "usage_request")
    for km, kernel_id in zip(flagged, ids, strict=True):
        assert usage[kernel_id]["msg_type"] == "usage_reply", usage[kernel_id]
        assert usage[kernel_id]["content"]["pid"] == kernel_pid(km), "another kernel answered"
    control_infos = client.gather(ids, "control", "kernel_info_request")
    assert {k: r["msg_type"] for k, r in control_infos.items()} == dict.fromkeys(
        ids, "kernel_info_reply"
    )


def test_connect_ip_keeps_the_connection_file_identity(flagged: list[KernelManager]) -> None:
    """A kernel bound to 0.0.0.0, reached at another address: still addressed as 0.0.0.0."""
    with RouterClient(connect_timeout=60) as client:
        kernel_id = client.add_kernel(flagged[2].connection_file, connect_ip="127.0.0.1")
        assert client.routing_id(kernel_id, "control").startswith(b"tcp://0.0.0.0:")
        usage = client.request(kernel_id, "control", "usage_request")
        assert usage["content"]["pid"] == kernel_pid(flagged[2])


def test_send_then_recv_files_replies_by_kernel(
    flagged: list[KernelManager], client: RouterClient
) -> None:
    ids = [client.add_kernel(km.get_connection_info()) for km in flagged]
    sent = {client.send(k, "control", "usage_request"): k for k in reversed(ids)}
    got: dict[str, int] = {}
    while len(got) < len(ids):
        kernel_id, msg = client.recv("control", timeout=60)
        assert sent[msg["parent_header"]["msg_id"]] == kernel_id
        got[kernel_id] = msg["content"]["pid"]
    assert got == {k: kernel_pid(km) for k, km in zip(ids, flagged, strict=True)}
    # Nothing else came (no duplicate, no stray reply): a barrier request per kernel, whose
    # reply must be the next message from that kernel (its control thread answers in order).
    barrier = {client.send(k, "control", "kernel_info_request"): k for k in ids}
    for _ in ids:
        kernel_id, msg = client.recv("control", timeout=60)
        assert barrier.pop(msg["parent_header"]["msg_id"]) == kernel_id


def test_stock_clients_still_work_with_the_flag(flagged: list[KernelManager]) -> None:
    kc = new_client(flagged[0])
    try:
        assert kc.kernel_info(reply=True, timeout=60)["content"]["status"] == "ok"
        assert kc.execute("1 + 1", reply=True, timeout=60)["content"]["status"] == "ok"
    finally:
        kc.stop_channels()


def test_adding_removing_and_misuse(flagged: list[KernelManager], client: RouterClient) -> None:
    kernel_id = client.add_kernel(flagged[0].connection_file)
    with pytest.raises(ValueError, match="already"):
        client.add_kernel(flagged[0].connection_file)
    with pytest.raises(ValueError, match="already the shell"):
        client.add_kernel(flagged[0].connection_file, kernel_id="again")
    with pytest.raises(ValueError, match="channel"):
        client.send(kernel_id, "stdin", "input_reply")
    with pytest.raises(KeyError, match="add_kernel"):
        client.request("nobody", "shell", "kernel_info_request")

    client.remove_kernel(kernel_id)
    assert client.kernel_ids == []
    again = client.add_kernel(flagged[0].connection_file, kernel_id="again")
    reply = client.request(again, "control", "usage_request")
    assert reply["content"]["pid"] == kernel_pid(flagged[0])


# --- CurveZMQ and the stock behaviour ---------------------------------------------------------


def test_curve_still_guards_the_endpoint_sockets(flagged: list[KernelManager]) -> None:
    info = flagged[0].get_connection_info()
    del info["curve_publickey"], info["curve_secretkey"]
    with RouterClient(connect_timeout=2) as plain:
        kernel_id = plain.add_kernel(info)
        with pytest.raises(KernelUnreachable) as caught:
            plain.request(kernel_id, "shell", "kernel_info_request", timeout=30)
    assert caught.value.reason == "handshake-failed"
    assert caught.value.errno == zmq.EHOSTUNREACH


def test_without_the_flag_the_identity_is_not_the_endpoint() -> None:
    with running_kernel() as (km, kc):  # the stock DEALER path works as ever
        features = kc.kernel_info(reply=True, timeout=60)["content"]["supported_features"]
        assert "router_identity_endpoint" not in features
        with RouterClient(connect_timeout=3) as client:
            kernel_id = client.add_kernel(km.connection_file)
            # The request's own timeout is past this test's hang guard: only the diagnosis,
            # once the connect timeout is over, can end it (whatever the machine's speed).
            with pytest.raises(KernelUnreachable, match="--router-identity=endpoint") as caught:
                client.request(kernel_id, "control", "kernel_info_request", timeout=600)
    assert caught.value.reason == "identity-mismatch"
    assert isinstance(caught.value, TimeoutError)


# --- waiting for a kernel ---------------------------------------------------------------------


def _unstarted_kernel() -> KernelManager:
    """A manager whose connection file (ports, key, CurveZMQ keys) exists before the kernel."""
    km = KernelManager(kernel_name=EXT_KERNEL, transport_encryption="required", cache_ports=False)
    km.curve_publickey, km.curve_secretkey = zmq.curve_keypair()
    km.write_connection_file()
    return km


# Hang guard: a kernel started late, then restarted, with the client waiting across both.
@pytest.mark.timeout(180)
def test_client_waits_for_a_kernel_that_starts_later_and_survives_its_restart() -> None:
    km = _unstarted_kernel()
    result: dict[str, Any] = {}
    try:
        with RouterClient(connect_timeout=90) as client:
            kernel_id = client.add_kernel(km.connection_file)

            def ask() -> None:
                try:
                    result["reply"] = client.request(kernel_id, "shell", "kernel_info_request")
                except Exception as e:
                    result["error"] = e

            asker = threading.Thread(target=ask)
            asker.start()
            asker.join(1.0)
            assert asker.is_alive(), f"answered with no kernel running: {result}"
            km.start_kernel(extra_arguments=[FLAG])
            asker.join(90)
            assert not asker.is_alive()
            assert "error" not in result, result
            assert result["reply"]["content"]["status"] == "ok"

            # Same ports, same keys, same routing id: the client carries on after a restart.
            km.restart_kernel(now=True)
            code = {"code": "import os", "user_expressions": {"pid": "os.getpid()"}}
            reply = client.request(kernel_id, "shell", "execute_request", code)
            pid = int(reply["content"]["user_expressions"]["pid"]["data"]["text/plain"])
            assert pid == kernel_pid(km)
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
        km.cleanup_connection_file()


# Hang guard, tighter than the default: the client's own timeout must end this test first.
@pytest.mark.timeout(60)
def test_a_kernel_that_never_appears_is_a_clear_timeout() -> None:
    km = _unstarted_kernel()
    try:
        with RouterClient(connect_timeout=1.5) as client:
            kernel_id = client.add_kernel(km.connection_file)
            # The gather's own timeout is past the hang guard above: only the diagnosis can end it.
            with pytest.raises(KernelUnreachable, match="nothing answers") as caught:
                client.gather([kernel_id], "shell", "kernel_info_request", timeout=600)
    finally:
        km.cleanup_connection_file()
    assert caught.value.reason == "not-listening"
    assert caught.value.kernel_id == kernel_id


# --- other transports and ports the kernel picks ---------------------------------------------


def test_ipc_and_plain_kernels_share_the_sockets_with_curve_ones(
    flagged: list[KernelManager], client: RouterClient, tmp_path: Path
) -> None:
    ipc = start_kernel(
        extra_arguments=[FLAG], encryption=False, transport="ipc", ip=str(tmp_path / "kernel-ipc")
    )
    try:
        curve_id = client.add_kernel(flagged[0].connection_file)
        # Added after a CurveZMQ kernel: the socket must go back to the NULL mechanism.
        ipc_id = client.add_kernel(ipc.connection_file)
        assert client.routing_id(ipc_id, "shell") == (
            f"ipc://{tmp_path / 'kernel-ipc'}-{ipc.shell_port}".encode()
        )
        code = {"code": "import os", "user_expressions": {"pid": "os.getpid()", "name": "0"}}
        replies = client.gather([curve_id, ipc_id], "shell", "execute_request", code)
        assert _pid_and_name(replies[ipc_id])[0] == kernel_pid(ipc)
        assert _pid_and_name(replies[curve_id])[0] == kernel_pid(flagged[0])
        usage = client.request(ipc_id, "control", "usage_request")
        assert usage["content"]["pid"] == kernel_pid(ipc)
    finally:
        ipc.shutdown_kernel(now=True)


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_ports_the_kernel_picks_itself(transport: str, tmp_path: Path) -> None:
    """No ports in the connection file: the kernel picks them, then binds with the identity."""
    cf = tmp_path / "kernel.json"
    args = [sys.executable, "-m", "ipykernel_ext", "-f", str(cf), FLAG]
    if transport == "ipc":
        args += ["--transport=ipc", f"--ip={tmp_path / 'k'}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:

        def written() -> bool:
            assert proc.poll() is None, proc.communicate()  # the kernel exited: why
            return cf.exists() and cf.read_text().strip().endswith("}")

        wait_until(written, 60, "the connection file written", 0.1)
        info = json.loads(cf.read_text())
        assert all(info[f"{c}_port"] > 0 for c in ROUTER_CLIENT_CHANNELS)
        with RouterClient(connect_timeout=60) as client:
            kernel_id = client.add_kernel(cf)
            for channel in ROUTER_CLIENT_CHANNELS:
                reply = client.request(kernel_id, channel, "kernel_info_request")
                assert "router_identity_endpoint" in reply["content"]["supported_features"]
            usage = client.request(kernel_id, "control", "usage_request")
            assert usage["content"]["pid"] == proc.pid
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


# --- configuration --------------------------------------------------------------------------


# Hang guard: a kernel process that must exit at start-up (one that starts hangs).
@pytest.mark.timeout(90)
def test_a_bad_value_fails_at_start_up_naming_the_option(tmp_path: Path) -> None:
    cf = tmp_path / "kernel.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ipykernel_ext", "--router-identity=bogus", "-f", str(cf)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "router_identity" in proc.stderr
    assert "bogus" in proc.stderr
    assert "endpoint" in proc.stderr  # what would have been accepted
    assert not cf.exists()
