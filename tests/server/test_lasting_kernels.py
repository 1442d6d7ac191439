"""A running cell survives its server: the kernel goes on, the next server takes it back.

A real ``jupyter_server`` as installed, the package's extension on (so its provisioner and
``SharedChannelsConnection``), CurveZMQ required, a ``python3-ext`` kernel for a notebook
session made through ``/api/sessions``, and websocket clients that send what JupyterLab
sends. The cell prints ``line i`` once the test touches the barrier ``go-i``
(:mod:`harness.outputs_notebook`): every step is paced by the test. A server is killed for
real (``kill -9``: nothing of its own runs) and started again on the same runtime and root
dirs. Verdicts are the REST API, the state file, the websockets and the kernel's process;
time bounds are hang guards.

What the cell did while no server was up is the kernel's journal's (docs/PROTOCOL.md section 9,
"The cell journal"): a tab of the session that comes back ends with the cell whole, once (the
kernel sends it again after a ``clear_output``), with its ``execute_reply`` and an ``input()``
asked meanwhile. A tab's view is folded as JupyterLab folds it (:class:`harness.tab_view.TabView`).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from functools import partial
from typing import Any

import psutil
import pytest

from harness.journal import journal_of
from harness.kernel_websocket import KernelWebsocket
from harness.outputs_notebook import HANG, K, N, Notebook, execution_count_of, lines, stream
from harness.polling import wait_until
from harness.server import JupyterServer
from harness.tab_view import TabView
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


def view_of(messages: list[dict[str, Any]], msg_id: str) -> list[dict[str, Any]]:
    """The outputs a tab shows for request ``msg_id`` after ``messages`` (folded as the page
    folds them: a ``clear_output`` clears)."""
    return TabView(
        [
            m
            for m in messages
            if m["channel"] == "iopub" and m["parent_header"].get("msg_id") == msg_id
        ]
    ).outputs


def read_until(ws: KernelWebsocket, match: Any) -> list[dict[str, Any]]:
    """Everything ``ws`` read up to the message ``match`` accepts, in order."""
    last = ws.recv_until(match, timeout=HANG)
    read, ws.backlog = [*ws.backlog, last], []
    return read


def reply_of(msg_id: str) -> Any:
    return lambda m: m["msg_type"] == "execute_reply" and m["parent_header"]["msg_id"] == msg_id


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

        # The tab of the session comes back (its shell waits behind the cell: ready on
        # control) once the kernel kept what it printed meanwhile.
        wait_until(
            lambda: (
                [c["nbytes"] for c in journal_of(record.connection_info)] == [len(lines(K + 3))]
            ),
            HANG,
            "the lines printed meanwhile, journaled",
        )
        back = KernelWebsocket(server, nb.kernel_id, ws.session_id, ready_on="control")
        nb.release(N)
        read = read_until(back, reply_of(msg_id))
        if not any(idle_of(msg_id)(m) for m in read):
            read += read_until(back, idle_of(msg_id))
        (reply,) = [m for m in read if reply_of(msg_id)(m)]
        # The tab ends with the whole cell, each line once, in order (the lines it had before
        # the kill are cleared with the rest), and the cell's reply with its count.
        assert view_of(read, msg_id) == [stream(lines(N))], read
        assert any(m["msg_type"] == "clear_output" for m in read)
        assert reply["content"]["execution_count"] == count, reply
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


ASKING_CODE = """\
import time
from pathlib import Path
while not Path(r"{go}").exists():
    time.sleep(0.005)
print("asking", flush=True)
name = input("who? ")
print(f"hello {{name}}")
"""


def test_a_cell_that_ended_and_an_input_asked_while_no_server_was_up_reach_the_tab() -> None:
    """Three notebooks, one server killed: a cell ends while no server is up (its tab gets
    its whole output, its reply from the journal, and its idle); another asks ``input()``
    meanwhile (its tab is asked again, and the answer reaches the cell); a third ends while no
    server is up and its tab never comes back (the file gets it whole, with its count)."""
    server = lasting_server()
    with server:
        ended, asking = Notebook(server, "ended.ipynb"), Notebook(server, "asking.ipynb")
        unattended = Notebook(server, "unattended.ipynb")
        for nb in (ended, asking, unattended):
            wait_session_kept(server, nb.kernel_id)
        ws_ended = KernelWebsocket(server, ended.kernel_id)
        first, count = ended.run_to_line_k(ws_ended)
        ws_unattended = KernelWebsocket(server, unattended.kernel_id)
        _, unattended_count = unattended.run_to_line_k(ws_unattended)
        ws_asking = KernelWebsocket(server, asking.kernel_id)
        go = asking.barriers / "ask"
        second = ws_asking.execute(
            ASKING_CODE.format(go=go), metadata={"cellId": "cell-b"}, allow_stdin=True
        )
        ws_asking.recv_until(
            lambda m: m["msg_type"] == "execute_input" and m["parent_header"]["msg_id"] == second,
            timeout=HANG,
        )
        records = {
            nb.kernel_id: record_of(server, nb.kernel_id) for nb in (ended, asking, unattended)
        }
        server.kill()
        for ws in (ws_ended, ws_asking, ws_unattended):
            ws.close()
        for nb in (ended, unattended):
            nb.release(N)
            info = records[nb.kernel_id].connection_info
            wait_until(
                partial(journal_of, info),
                HANG,
                f"the cell of {nb.name} ended, journaled",
                done=lambda cells: [c["state"] for c in cells] == ["ended"],
            )
        go.touch()
        wait_until(
            lambda: (
                [c["input_request"] for c in journal_of(records[asking.kernel_id].connection_info)]
                == [{"prompt": "who? ", "password": False}]
            ),
            HANG,
            "the second cell asking, journaled",
        )
        server.start()

        back = KernelWebsocket(server, ended.kernel_id, ws_ended.session_id)
        read = read_until(back, reply_of(first))
        if not any(idle_of(first)(m) for m in read):
            read += read_until(back, idle_of(first))
        assert view_of(read, first) == [stream(lines(N))], read
        replies = [m["content"] for m in read if reply_of(first)(m)]
        assert [(r["status"], r["execution_count"]) for r in replies] == [("ok", count)]
        # The reply comes after the whole (a page closes the request at its reply and idle).
        at = [i for i, m in enumerate(read) if m["parent_header"].get("msg_id") == first]
        assert reply_of(first)(read[at[-1]]) or idle_of(first)(read[at[-1]]), read
        back.close()

        tab = KernelWebsocket(server, asking.kernel_id, ws_asking.session_id, ready_on="control")
        read = read_until(
            tab,
            lambda m: m["msg_type"] == "input_request" and m["parent_header"]["msg_id"] == second,
        )
        assert read[-1]["content"]["prompt"] == "who? "
        tab.send("stdin", "input_reply", {"value": "Ada"}, parent=read[-1]["header"])
        read += read_until(tab, reply_of(second))
        if not any(idle_of(second)(m) for m in read):
            read += read_until(tab, idle_of(second))
        assert view_of(read, second) == [stream("asking\nhello Ada\n")], read
        assert [m["content"]["status"] for m in read if reply_of(second)(m)] == ["ok"]
        tab.close()
        # The kernel let go of what reached its tab (acknowledged).
        assert journal_of(records[ended.kernel_id].connection_info) == []
        # Nobody came back for the third: the server wrote it, whole, with its count.
        unattended.whole_on_disk(unattended_count, "the unattended cell, written")
