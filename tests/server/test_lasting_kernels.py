"""A running cell survives its server: the kernel goes on, the next server takes it back.

A real ``jupyter_server`` as installed, the package's extension on (so its provisioner and
``SharedChannelsConnection``), CurveZMQ required, a ``python3-ext`` kernel for a notebook
session made through ``/api/sessions``, and websocket clients that send what JupyterLab
sends. The cell prints ``line i`` once the test touches the barrier ``go-i``
(:mod:`harness.outputs_notebook`): every step is paced by the test. A server is killed for
real (``kill -9``: nothing of its own runs) and started again on the same runtime and root
dirs. Verdicts are the REST API, the state file, the websockets and the kernel's process;
time bounds are hang guards.

What is not kept yet: the lines the cell printed while no server was up, and the cell's
``execute_reply`` (sent to the dead server's socket); docs/PROTOCOL.md, section 9.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from typing import Any

import psutil
import pytest

from harness.kernel_websocket import KernelWebsocket
from harness.outputs_notebook import HANG, K, N, Notebook, execution_count_of, lines, until_line
from harness.polling import wait_until
from harness.server import JupyterServer
from ipykernel_ext.server.lasting.records import KernelRecord, ProcessId, RecordFiles

pytestmark = pytest.mark.timeout(300)


def lasting_server(*args: str) -> JupyterServer:
    return JupyterServer(ipykernel_ext=True, extra_args=args, stop_timeout=30)


def record_of(server: JupyterServer, kernel_id: str) -> KernelRecord:
    record = RecordFiles(server.runtime_dir).read(kernel_id)
    assert record is not None, f"no state file for {kernel_id}"
    return record


def sessions_of(server: JupyterServer) -> list[tuple[str, str, str]]:
    return sorted(
        (s["id"], s["path"], s["kernel"]["id"]) for s in server.api("GET", "api/sessions")
    )


def wait_session_kept(server: JupyterServer, kernel_id: str) -> None:
    """Until the kernel's state file holds its session (written within a second)."""
    wait_until(lambda: record_of(server, kernel_id).sessions, HANG, "the session in the state file")


def wait_gone(pid: int, what: str) -> None:
    wait_until(lambda: not psutil.pid_exists(pid), HANG, f"{what} (pid {pid}) gone")


def idle_of(msg_id: str) -> Any:
    return lambda m: (
        m["msg_type"] == "status"
        and m["content"]["execution_state"] == "idle"
        and m["parent_header"].get("msg_id") == msg_id
    )


def test_a_running_cell_goes_on_after_kill_9_and_the_next_server_takes_its_kernel_back() -> None:
    """Then, left without a server again, the kernel ends itself once its cell ended
    (``LastingKernels.orphan_timeout`` shortened to 1 s), never while the cell runs."""
    server = lasting_server("--LastingKernels.orphan_timeout=1")
    with server:
        nb = Notebook(server, "lasting.ipynb")
        sessions = sessions_of(server)
        wait_session_kept(server, nb.kernel_id)
        ws = KernelWebsocket(server, nb.kernel_id)
        msg_id, count = nb.run_to_line_k(ws)
        record = record_of(server, nb.kernel_id)
        path = RecordFiles(server.runtime_dir).path(nb.kernel_id)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600  # keys inside, as a connection file
        assert server.proc is not None
        assert record.process.alive() and record.server.pid == server.proc.pid

        server.kill()
        ws.close()
        nb.release(K + 3)  # printed while no server is up (not kept yet: module docstring)
        server.start()

        # Known under the same id, with the same session, before anyone asked.
        assert [k["id"] for k in server.api("GET", "api/kernels")] == [nb.kernel_id]
        assert sessions_of(server) == sessions
        again = record_of(server, nb.kernel_id)
        assert again.process == record.process  # the same process, not a new kernel
        assert again.server.pid == server.proc.pid

        # A tab of the session (its shell waits behind the cell: ready on control).
        back = KernelWebsocket(server, nb.kernel_id, ready_on="control")
        nb.release(N)
        read = until_line(back, msg_id, N - 1)
        read += [*back.backlog, back.recv_until(idle_of(msg_id), timeout=HANG)]
        text = "".join(
            m["content"]["text"]
            for m in read
            if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == msg_id
        )
        # What came after the return is the cell's own tail, in order, each line once.
        assert lines(N).endswith(text) and f"line {N - 1}\n" in text, text
        back.backlog = []

        # The kernel goes on as before: the next cell has the next count.
        reply, iopub = back.run("print(6 * 7)")
        assert reply["content"]["status"] == "ok"
        assert execution_count_of(iopub, reply["parent_header"]["msg_id"]) == count + 1

        # A restart through the API ends it and starts a new process, recorded in its place.
        back.close()
        server.api("POST", f"api/kernels/{nb.kernel_id}/restart", timeout=HANG)
        wait_gone(record.process.pid, "the taken-back kernel, restarted")
        record = record_of(server, nb.kernel_id)
        assert record.process != again.process and record.process.alive()
        back = KernelWebsocket(server, nb.kernel_id)

        # Left without a server while a cell runs: three time-outs later it still runs (a
        # lower bound on the wait, so a slower machine only makes the check stricter).
        go = server.root_dir / "orphan-go"
        cell = back.execute(
            f"import time, pathlib\nwhile not pathlib.Path({str(go)!r}).exists():\n"
            "    time.sleep(0.01)\n"
        )
        back.recv_until(
            lambda m: m["msg_type"] == "execute_input" and m["parent_header"]["msg_id"] == cell,
            timeout=HANG,
        )
        server.kill()
        back.close()
        kernel = psutil.Process(record.process.pid)
        with pytest.raises(psutil.TimeoutExpired):
            kernel.wait(timeout=3)
        go.touch()  # the cell ends: now the time-out runs, and the kernel ends itself
        wait_gone(record.process.pid, "the orphaned kernel once its cell ended")
        assert "shutting down" in server.log_text()


def test_sigterm_stops_the_kernels_by_default() -> None:
    server = lasting_server()
    with server:
        nb = Notebook(server, "sigterm.ipynb")
        record = record_of(server, nb.kernel_id)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=HANG)
        wait_gone(record.process.pid, "the kernel")
        assert not RecordFiles(server.runtime_dir).path(nb.kernel_id).exists()


def test_sigusr2_and_sigterm_when_set_keep_the_kernels_for_the_next_server() -> None:
    """And an interrupt and a shutdown through the API work on the kernel taken back."""
    server = lasting_server("--LastingKernels.on_sigterm=keep")
    with server:
        nb = Notebook(server, "signals.ipynb")
        wait_session_kept(server, nb.kernel_id)
        record = record_of(server, nb.kernel_id)
        for sig in (signal.SIGTERM, signal.SIGUSR2):
            assert server.proc is not None
            server.proc.send_signal(sig)
            server.proc.wait(timeout=HANG)
            assert record.process.alive(), sig
            server.start()
            assert [k["id"] for k in server.api("GET", "api/kernels")] == [nb.kernel_id]
            assert [s["kernel"]["id"] for s in server.api("GET", "api/sessions")] == [nb.kernel_id]
            assert record_of(server, nb.kernel_id).process == record.process
        kid = nb.kernel_id
        # An interrupt reaches the taken-back kernel (a signal to its recorded process).
        with KernelWebsocket(server, kid) as ws:
            msg_id = ws.execute("import time\ntime.sleep(600)")
            ws.recv_until(
                lambda m: (
                    m["msg_type"] == "execute_input" and m["parent_header"]["msg_id"] == msg_id
                ),
                timeout=HANG,
            )
            server.api("POST", f"api/kernels/{kid}/interrupt")
            reply, _ = ws.collect_execution(msg_id)
            assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        # A shutdown through the API ends it (its recorded process) and removes its file.
        server.shutdown_kernel(kid)
        wait_gone(record.process.pid, "the taken-back kernel, shut down")
        assert not RecordFiles(server.runtime_dir).path(kid).exists()


def test_gone_reused_or_unreadable_records_are_refused_and_a_clean_stop_stops_kernels() -> None:
    """File > Shut Down and a confirmed Ctrl-C come to ``POST /api/shutdown``'s stop."""
    server = lasting_server()
    files = RecordFiles(server.runtime_dir)
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    gone_pid = int(done.stdout)  # a process that ran and ended
    this = ProcessId.of(os.getpid())
    records = {"gone": ProcessId(gone_pid, None)}
    if this.started is not None:  # no /proc: a start time is not known here
        records["reused"] = ProcessId(this.pid, this.started + 1)  # this pid, a later process
    for kernel_id, process in records.items():
        files.write(
            KernelRecord(
                kernel_id=kernel_id,
                kernel_name="python3-ext",
                connection_info={},
                process=process,
                pgid=None,
                cwd=None,
                session_name=None,
                server=ProcessId(gone_pid, None),
            )
        )
    (files.dir / "ipykernel-ext-lasting-broken.json").write_text("{not json")
    with server:
        assert server.api("GET", "api/kernels") == []
        log = server.log_text()
        for kernel_id in records:
            assert f"Kernel {kernel_id} not taken back: its process" in log, log
            assert not files.path(kernel_id).exists()
        assert "Unreadable kernel state file" in log
        # The server serves, and a clean stop stops its kernels.
        nb = Notebook(server, "clean.ipynb")
        record = record_of(server, nb.kernel_id)
        server.api("POST", "api/shutdown")
        assert server.proc is not None
        server.proc.wait(timeout=HANG)
        wait_gone(record.process.pid, "the kernel of a cleanly stopped server")
        assert not files.path(nb.kernel_id).exists()
