"""Every kernel-side feature when ExtKernel is started by an app that is not ExtKernelApp.

Two launchers, the same checks, real kernels over CurveZMQ: ``gateway_provisioners`` (a
kernelspec made by its own ``jupyter-ssh-spec install --ipykernel-subclass-name
ipykernel_ext.kernel.ExtKernel``, started by its DistributedProvisioner; for this machine it
skips SSH and runs the same ``launch_ipykernel.py`` a remote host runs, with its response
socket, listener and CurveZMQ keys) and stock ``IPKernelApp`` with
``--IPKernelApp.kernel_class=ipykernel_ext.kernel.ExtKernel``. Checks: the adopted IOPub
socket, the 3000-Button burst whole, a stalled subscriber (one give-up, counted, logged, the
reader loses nothing), comm_echo, widget_state_request, answers mid-cell.

And one real SSH hop into a network namespace the test makes (sshd on a veth pair's private
address; the namespace shares this machine's files). It needs root and ``/usr/sbin/sshd``, and
is skipped, saying so, without them.

gateway_provisioners reads settings from the environment at import, so they are set before
(docs/CLUSTER.md): ``GP_SOCKET_TIMEOUT=0`` (the default 0.01 s blocks the launching process's
event loop 10 ms each turn, slowing every ``get_iopub_msg``), ``GP_UNAUTHORIZED_USERS`` (its
default refuses ``root``, as which CI may run), ``GP_POLL_INTERVAL`` (quicker teardown).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client import BlockingKernelClient, KernelManager
from jupyter_client.kernelspec import KernelSpecManager

from harness.bursts import (
    STALL_BURST,
    STALL_TIMEOUT_MS,
    STALL_WARNING,
    UNKNOWN_TARGET,
    assert_burst_whole,
    comm_loop_code,
    run_burst,
    widget_grid_code,
)
from harness.cells import busy_cell, run_cell
from harness.kernels import (
    EXT_KERNEL_CLASS,
    install_ssh_spec,
    iopub_stats,
    new_client,
    start_kernel,
)
from harness.messages import control_request, is_status, send, shell_reply, wait_iopub
from harness.netns import namespaces_missing, veth_namespace
from harness.polling import wait_until
from harness.raw_subscriber import RawSubscriber
from harness.widget_control import fetch_update_states
from ipykernel_ext.kernel.iopub.notice import NOTICE_PREFIX
from ipykernel_ext.kernel.iopub.settings import DEFAULT_SEND_TIMEOUT_MS, DEFAULT_SNDHWM
from ipykernel_ext.kernel.iopub.stats import ADOPTED

os.environ["GP_SOCKET_TIMEOUT"] = "0"
os.environ["GP_UNAUTHORIZED_USERS"] = "ipykernel-ext-tests-nobody"
# How often the provisioner polls a kernel it is killing (default 0.5 s, 10 times): its poll
# asks the listener process, which answers "delivered" while it lives, so every kill waits
# for all the polls. Only teardown time depends on it.
os.environ["GP_POLL_INTERVAL"] = "0.1"

try:
    from gateway_provisioners import config_mixin as gp_config
    from gateway_provisioners.response_manager import ResponseManager
except ImportError as exc:  # fail, never skip: CI installs it
    raise ImportError(
        "tests/kernel/test_cluster.py needs gateway_provisioners: pip install -e '.[test]'"
    ) from exc

# Hang guard per test (default 120 s): kernels started through a provisioner, an SSH hop
# into a network namespace, and bursts read through them.
pytestmark = pytest.mark.timeout(240)

BUTTONS = 3000
PROVISIONER = "gateway_provisioners"
SSHD = "/usr/sbin/sshd"
IPKERNELAPP = "IPKernelApp"


def make_kernelspecs(prefix: Path) -> KernelSpecManager:
    """The two kernelspecs, as an operator makes them, in ``prefix``/share/jupyter/kernels."""
    spec_file, spec = install_ssh_spec(
        prefix, "ssh_python_ext", "--display-name=Python SSH (ipykernel_ext)"
    )
    kernels = spec_file.parent.parent
    assert spec["argv"][0] == "python" and spec["argv"][-1] == EXT_KERNEL_CLASS, spec["argv"]
    assert spec["metadata"]["kernel_provisioner"]["provisioner_name"] == "distributed-provisioner"
    # The spec runs `python` from PATH (on a cluster host: the host's); here, this environment's.
    spec["argv"][0] = sys.executable
    spec_file.write_text(json.dumps(spec, indent=1))

    stock_app = kernels / "python3_ext_ipkernelapp"
    stock_app.mkdir()
    argv = [
        sys.executable,
        "-m",
        "ipykernel_launcher",
        f"--IPKernelApp.kernel_class={EXT_KERNEL_CLASS}",
    ]
    stock_spec = {
        "argv": [*argv, "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel_ext under IPKernelApp)",
        "language": "python",
        "metadata": {"supported_encryption": ["curve"], "debugger": True},
    }
    (stock_app / "kernel.json").write_text(json.dumps(stock_spec))
    return KernelSpecManager(kernel_dirs=[str(kernels)])


@pytest.fixture(scope="module", autouse=True)
def provisioner_process_state() -> Iterator[None]:
    """Checks this process's gateway_provisioners settings; cleans up after the module."""
    assert gp_config.socket_timeout == 0, (
        "gateway_provisioners was imported before this module set GP_SOCKET_TIMEOUT=0"
    )
    yield
    # Leave no response socket nor periodic accept behind for the tests that follow.
    if ResponseManager.initialized():
        ResponseManager.instance().stop_response_manager()
        ResponseManager.clear_instance()


@pytest.fixture(scope="module")
def kernelspecs(tmp_path_factory: pytest.TempPathFactory) -> KernelSpecManager:
    return make_kernelspecs(tmp_path_factory.mktemp("cluster-kernelspecs"))


@dataclass
class Launched:
    """A kernel started through one launcher, a reading client, and where its log goes."""

    launcher: str
    km: KernelManager
    kc: BlockingKernelClient
    log_path: Path
    #: processes the launcher forked (gateway_provisioners' listener) that may outlive it
    helpers: list[psutil.Process] = field(default_factory=list)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def launch(launcher: str, ksm: KernelSpecManager, log_dir: Path) -> Launched:
    if launcher == PROVISIONER:
        km = start_kernel("ssh_python_ext", kernel_spec_manager=ksm)
        # The provisioner sends the kernel's output to a log file of its own.
        log_path = Path(km.provisioner.kernel_log)  # type: ignore[union-attr]  # gateway_provisioners' DistributedProvisioner, typed as jupyter_client's Optional base
        helpers = psutil.Process(km.provisioner.pid).children()  # type: ignore[union-attr]  # gateway_provisioners' DistributedProvisioner, typed as jupyter_client's Optional base
    else:
        log_path = log_dir / "kernel.log"
        with log_path.open("wb") as log:
            launch = {"stdout": log, "stderr": subprocess.STDOUT}
            km = start_kernel("python3_ext_ipkernelapp", kernel_spec_manager=ksm, launch=launch)
        helpers = []
    return Launched(launcher, km, new_client(km), log_path, helpers)


def stop(launched: Launched) -> None:
    try:
        launched.kc.stop_channels()
        launched.km.shutdown_kernel(now=True)
    finally:
        # shutdown_kernel(now=True) never tells gateway_provisioners' listener to exit, and the
        # listener does not notice that its kernel is gone (docs/CLUSTER.md): end it here.
        # (SIGTERM would take it up to 5 s: it checks for it between 5 s accept timeouts.)
        for proc in launched.helpers:
            if proc.is_running():
                proc.kill()
        psutil.wait_procs(launched.helpers, timeout=10)
        if launched.launcher == PROVISIONER:
            launched.log_path.unlink(missing_ok=True)


@pytest.fixture(scope="module", params=[PROVISIONER, IPKERNELAPP])
def launched(
    request: pytest.FixtureRequest,
    kernelspecs: KernelSpecManager,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Launched]:
    kernel = launch(request.param, kernelspecs, tmp_path_factory.mktemp("kernel-log"))
    try:
        yield kernel
    finally:
        stop(kernel)


# --- which IOPub path, with which settings ------------------------------------------------


def test_iopub_socket_is_adopted_with_the_defaults(launched: Launched) -> None:
    stats = iopub_stats(launched.kc)
    assert stats["status"] == "ok", stats
    assert stats["socket"] == ADOPTED
    settings = (stats["sndhwm"], stats["nodrop"], stats["send_timeout_ms"])
    assert settings == (DEFAULT_SNDHWM, True, DEFAULT_SEND_TIMEOUT_MS)
    # Sent through the adopted socket: at least the client's iopub_welcome.
    assert stats["sent"] >= 1


def test_the_grid_burst_arrives_whole_and_its_state_is_answered(
    launched: Launched, tmp_path: Path
) -> None:
    """The seed's grid reaches the reader whole, without a give-up; widget_state_request has
    it; a reconnecting frontend gets kernel_info and ipywidgets' update_states mid-cell."""
    before = iopub_stats(launched.kc)
    assert_burst_whole(run_burst(launched.kc, widget_grid_code(BUTTONS)), 3 * BUTTONS + 2)
    after = iopub_stats(launched.kc)
    assert after["sent"] - before["sent"] >= 3 * BUTTONS + 2
    assert after["timeouts"] == before["timeouts"]
    reply = control_request(launched.kc, "widget_state_request", timeout=60)
    assert reply["msg_type"] == "widget_state_reply"
    assert reply["content"]["status"] == "ok", reply["content"]
    assert buttons_in(reply["content"]["states"]) == BUTTONS
    frontend = new_client(launched.km)
    try:
        with busy_cell(launched.kc, tmp_path):
            info = shell_reply(frontend, frontend.kernel_info())
            states = fetch_update_states(frontend)
        assert info["content"]["status"] == "ok"
        assert buttons_in(states["states"]) == BUTTONS
    finally:
        frontend.stop_channels()


def buttons_in(states: dict[str, Any]) -> int:
    return sum(s["model_name"] == "ButtonModel" for s in states.values())


def test_comm_echo_reaches_another_client(launched: Launched) -> None:
    sender = new_client(launched.km)
    try:
        comm_id = uuid.uuid4().hex
        content = {"comm_id": comm_id, "target_name": UNKNOWN_TARGET, "data": {"x": 1}}
        opened = send(sender, "comm_open", content)
        # A barrier on the same shell socket, handled by the main thread after the comm_open:
        # its idle comes after everything the kernel published for the comm_open.
        seen: list[dict[str, Any]] = []
        barrier = sender.execute("pass")
        wait_iopub(launched.kc, is_status("idle", barrier), what="the barrier's idle", seen=seen)
        echoes = [m for m in seen if m["msg_type"] == "comm_echo"]
        assert [e["parent_header"]["msg_id"] for e in echoes] == [opened]
        assert echoes[0]["content"]["comm_id"] == comm_id
        assert echoes[0]["parent_header"]["session"] == sender.session.session
    finally:
        sender.stop_channels()


# --- a stalled subscriber -----------------------------------------------------------------


def test_a_stalled_subscriber_costs_one_give_up_and_the_cell_is_told(launched: Launched) -> None:
    """A SUB socket that never reads: one give-up (not one per message), the reader loses
    nothing, the cell is told on its stderr. The send timeout is shortened at run time."""
    kc = launched.kc
    code = comm_loop_code(STALL_BURST, pad=1000)
    set_timeout = "get_ipython().kernel.iopub_send_timeout = {}"
    reply = run_cell(kc, set_timeout.format(STALL_TIMEOUT_MS), timeout=30).reply
    assert reply is not None
    assert reply["content"]["status"] == "ok"
    before = iopub_stats(kc)
    assert before["send_timeout_ms"] == STALL_TIMEOUT_MS
    stalled_sub = RawSubscriber(launched.km)
    try:
        stalled = run_burst(kc, code)
        after = iopub_stats(kc)
    finally:
        stalled_sub.close()
        run_cell(kc, set_timeout.format(DEFAULT_SEND_TIMEOUT_MS), timeout=30)
    assert stalled.counts.get("comm_open") == STALL_BURST
    assert after["timeouts"] - before["timeouts"] == 1, (before, after)
    missed = after["missed"] - before["missed"]
    assert missed >= 1
    reply = run_cell(kc, "1 + 1", timeout=30).reply
    assert reply is not None
    assert reply["content"]["status"] == "ok"
    # Logged on the kernel's stderr (the provisioner's kernel log); the cell gets one notice.
    assert STALL_WARNING in launched.log_text()
    notices = [m for m in stalled.others if m["msg_type"] == "stream"]
    assert len(notices) == 1, notices
    assert notices[0]["content"]["text"].startswith(NOTICE_PREFIX)
    assert f"at least {missed} " in notices[0]["content"]["text"]


# --- a real SSH hop: the "remote host" is a network namespace this test makes ----------------


@dataclass
class SshHost:
    """sshd in a network namespace, reachable over a veth pair on private addresses."""

    namespace: str
    address: str
    home: Path  # a HOME whose ~/.ssh has the client key and the host's key

    def pids(self) -> set[int]:
        out = subprocess.run(
            ["ip", "netns", "pids", self.namespace], capture_output=True, text=True, check=True
        ).stdout
        return {int(pid) for pid in out.split()}


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@pytest.fixture(scope="module")
def ssh_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHost]:
    if reason := namespaces_missing():
        pytest.skip(f"the SSH hop: {reason}")
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        pytest.skip(f"the SSH hop needs {SSHD} and ssh-keygen (apt-get install openssh-server)")
    tmp = tmp_path_factory.mktemp("ssh-host")
    # Everything left in the namespace at the end was started by this test (sshd, kernels,
    # listeners): veth_namespace kills it.
    with veth_namespace() as net:
        home = tmp / "home"
        (home / ".ssh").mkdir(parents=True)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "host_key"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / ".ssh/id_ed25519"))
        (tmp / "authorized_keys").write_text((home / ".ssh/id_ed25519.pub").read_text())
        key_type, key = (tmp / "host_key.pub").read_text().split()[:2]
        (home / ".ssh/known_hosts").write_text(f"{net.remote_ip} {key_type} {key}\n")
        (tmp / "sshd_config").write_text(
            textwrap.dedent(
                f"""\
                ListenAddress {net.remote_ip}
                Port 22
                HostKey {tmp}/host_key
                AuthorizedKeysFile {tmp}/authorized_keys
                PermitRootLogin prohibit-password
                PasswordAuthentication no
                KbdInteractiveAuthentication no
                UsePAM no
                StrictModes no
                PidFile {tmp}/sshd.pid
                """
            )
        )
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        with (tmp / "sshd.log").open("wb") as log:
            sshd = subprocess.Popen(
                [*net.exec_prefix, SSHD, "-D", "-e", "-f", str(tmp / "sshd_config")], stderr=log
            )
        try:
            host = SshHost(net.namespace, net.remote_ip, home)

            def listening() -> bool:
                log = (tmp / "sshd.log").read_text()
                assert sshd.poll() is None, log  # sshd exited: its log says why
                return "Server listening" in log

            wait_until(listening, 30, "sshd listening")
            yield host
        finally:
            sshd.kill()
            sshd.wait(timeout=10)


def test_over_a_real_ssh_hop(
    ssh_host: SshHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gateway_provisioners starts ExtKernel over SSH on the "remote host"; the burst is whole."""
    prefix = tmp_path / "prefix"
    spec_file, spec = install_ssh_spec(
        prefix, "ssh_remote_ext", f"--remote-hosts={ssh_host.address}"
    )
    kernels = spec_file.parent.parent
    spec["argv"][0] = sys.executable  # the "remote host" shares this machine's files
    spec_file.write_text(json.dumps(spec))
    # paramiko finds the client key and the host key in ~/.ssh.
    monkeypatch.setenv("HOME", str(ssh_host.home))
    ksm = KernelSpecManager(kernel_dirs=[str(kernels)])
    km = start_kernel("ssh_remote_ext", kernel_spec_manager=ksm)
    kc = None
    try:
        assert km.provisioner.pid in ssh_host.pids()  # type: ignore[union-attr]  # gateway_provisioners' DistributedProvisioner, typed as jupyter_client's Optional base
        assert km.ip == ssh_host.address
        kc = new_client(km)
        assert iopub_stats(kc)["socket"] == ADOPTED
        assert_burst_whole(run_burst(kc, widget_grid_code(BUTTONS)), 3 * BUTTONS + 2)
    finally:
        if kc is not None:
            kc.stop_channels()
        km.shutdown_kernel(now=True)
        # The "remote host" wrote the kernel's log into this machine's /tmp.
        Path(km.provisioner.kernel_log).unlink(missing_ok=True)  # type: ignore[union-attr]  # gateway_provisioners' DistributedProvisioner, typed as jupyter_client's Optional base
