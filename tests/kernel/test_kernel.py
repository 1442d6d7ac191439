"""ExtKernel's wiring: advertised features, the control queries and what stays stock.

Real kernels over CurveZMQ. Each test compares against stock ipykernel where "unchanged"
is the claim, so a change in what stock sends is caught.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.provisioning import LocalProvisioner

from harness.cells import run_cell
from harness.kernels import EXT_KERNEL, STOCK_KERNEL, running_kernel
from harness.messages import control_request, iopub_until_barrier

# Hang guard per test (default 120 s): kernel starts plus waits of up to 60 s each.
pytestmark = pytest.mark.timeout(180)


def test_kernel_info_adds_features_and_keeps_the_rest(ext_kernel: Any, stock_kernel: Any) -> None:
    ours = ext_kernel[1].kernel_info(reply=True, timeout=30)["content"]
    theirs = stock_kernel[1].kernel_info(reply=True, timeout=30)["content"]
    extra = set(ours.pop("supported_features")) - set(theirs["supported_features"])
    assert extra == {"comm_echo", "widget_state", "iopub_stats"}
    theirs.pop("supported_features")
    # IPython's banner ends with a random tip
    ours["banner"] = ours["banner"].split("Tip:")[0]
    theirs["banner"] = theirs["banner"].split("Tip:")[0]
    assert ours == theirs


def test_execute_publishes_what_stock_publishes(ext_kernel: Any, stock_kernel: Any) -> None:
    code = "print('out'); from IPython.display import display; display({'a': 1}, raw=True); 7"

    def shape(kc: Any) -> list[tuple[str, Any]]:
        messages = run_cell(kc, code).messages
        return [(m["msg_type"], sorted(m["content"])) for m in messages]

    assert shape(ext_kernel[1]) == shape(stock_kernel[1])


def test_iopub_stats_reply_fields(ext_kernel: Any) -> None:
    stats = control_request(ext_kernel[1], "iopub_stats_request")
    assert stats["msg_type"] == "iopub_stats_reply"
    content = stats["content"]
    assert content["status"] == "ok"
    assert {"sndhwm", "nodrop", "send_timeout_ms", "sent", "timeouts", "missed"} <= set(content)
    before = content["sent"]
    run_cell(ext_kernel[1], "print('x')")
    # busy, execute_input, stream, idle at least
    assert control_request(ext_kernel[1], "iopub_stats_request")["content"]["sent"] >= before + 4


@pytest.mark.parametrize(
    ("msg_type", "content", "named"),
    [
        ("iopub_stats_request", {"bogus": 1}, "bogus"),
        ("widget_state_request", {"model_ids": "not-a-list"}, "model_ids"),
    ],
)
def test_bad_query_gets_error_reply(
    ext_kernel: Any, msg_type: str, content: dict[str, Any], named: str
) -> None:
    reply = control_request(ext_kernel[1], msg_type, content)
    assert reply["msg_type"] == msg_type.replace("_request", "_reply")
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"]
    assert named in reply["content"]["evalue"]
    # and the kernel still answers
    assert control_request(ext_kernel[1], "iopub_stats_request")["content"]["status"] == "ok"


@pytest.mark.parametrize(
    ("msg_type", "states"),
    [
        ("iopub_stats_request", []),
        ("widget_state_request", []),
        ("usage_request", ["busy", "idle"]),
    ],
)
def test_queries_publish_no_status_and_stock_requests_keep_theirs(
    ext_kernel: Any, msg_type: str, states: list[str]
) -> None:
    """Our queries publish nothing, no busy/idle (jupyter_server would think the kernel
    idle); stock's usage_request keeps its busy/idle."""
    kc = ext_kernel[1]
    iopub_until_barrier(kc)
    reply = control_request(kc, msg_type)
    parent_id = reply["parent_header"]["msg_id"]
    about_it = [m for m in iopub_until_barrier(kc) if m["parent_header"].get("msg_id") == parent_id]
    statuses = [m["content"]["execution_state"] for m in about_it if m["msg_type"] == "status"]
    assert statuses == states
    if not states:
        assert reply["content"]["status"] == "ok"
        assert about_it == []


def test_help_all_lists_every_flag() -> None:
    out = _launcher("--help-all").stdout
    for flag in (
        "--iopub-sndhwm",
        "--iopub-send-timeout",
        "--no-iopub-nodrop",
        "--no-comm-echo",
        "--router-identity",
        "ExtKernel.comm_echo_exclude_targets",
        "ExtKernel.echo_enabled",
        "--ExtKernel.echo_enabled=False",  # what --no-comm-echo stands for
    ):
        assert flag in out, flag


def _launcher(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ipykernel_ext", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_names_the_program_as_typed() -> None:
    """--help tells users to run ``python -m ipykernel_ext cmd``, not stock's app name."""
    done = _launcher("--help")
    assert done.returncode == 0, done.stderr
    assert "Subcommands are launched as `python -m ipykernel_ext cmd [args]`" in done.stdout
    assert "ipython-kernel" not in done.stdout
    assert "python -m ipykernel_ext install --user --as-default" in done.stdout  # examples


@pytest.mark.parametrize("subcommand", [[], ["install"]])
def test_bad_flag_fails_naming_the_program(subcommand: list[str]) -> None:
    """An unknown flag stops at once, with usage naming the program (argparse's ``prog``),
    not ``__main__.py``. (An unknown ``--name=value`` is stock's "Unrecognized alias"
    warning and the kernel starts, as with stock ipykernel, so it is not tried here.)"""
    prog = " ".join(["python -m ipykernel_ext", *subcommand])
    done = _launcher(*subcommand, "--no-such-flag")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"usage: {prog} [-h]"), done.stderr
    assert f"{prog}: error: unrecognized arguments: --no-such-flag" in done.stderr
    assert "__main__.py" not in done.stderr


def test_working_directory_does_not_shadow_the_kernel(tmp_path: Any) -> None:
    """A notebook folder holding a ``zmq.py`` must not break start-up (as with stock)."""
    (tmp_path / "zmq.py").write_text("raise SystemExit('shadowed the real zmq')\n")
    with running_kernel(EXT_KERNEL, launch={"cwd": str(tmp_path)}) as (_km, kc):
        messages = run_cell(kc, "import os; print(os.getcwd())").messages
    printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert printed.strip() == str(tmp_path)


# --- what the kernel prints: stock's lines --------------------------------------------------


def _startup_stderr(kernel_name: str, tmp_path: Path) -> list[str]:
    """The kernel's stderr at --log-level=INFO once it answered kernel_info, without
    CurveZMQ (so stock warns that TCP is not encrypted); its pid and connection file
    replaced by placeholders."""
    log_path = tmp_path / f"{kernel_name}.stderr"
    # No transport encryption: stock's warning.
    with (
        log_path.open("wb") as log,
        running_kernel(
            kernel_name, ["--log-level=INFO"], encryption=False, launch={"stderr": log}
        ) as (km, _kc),
    ):
        # Every start-up line is logged (and flushed, by logging's handler) before the kernel
        # starts answering: once it has (running_kernel's client is ready), the file has them.
        assert isinstance(km.provisioner, LocalProvisioner)  # a local kernel: it has a pid
        pid = str(km.provisioner.pid)
        text = log_path.read_text()
    return text.replace(km.connection_file, "CONNECTION_FILE").replace(pid, "PID").splitlines()


def test_stderr_is_stocks_line_for_line(tmp_path: Path) -> None:
    """Tools that run notebooks filter a kernel's stderr for stock's lines: the same lines,
    with stock's ``[IPKernelApp]`` prefix (the app's class name would be ExtKernelApp)."""
    ours = _startup_stderr(EXT_KERNEL, tmp_path)
    theirs = _startup_stderr(STOCK_KERNEL, tmp_path)
    assert any(
        line.startswith("[IPKernelApp] WARNING | Kernel is running over TCP without encryption.")
        for line in theirs
    ), theirs
    assert ours == theirs


def test_terminal_banner_is_stocks(tmp_path: Path) -> None:
    """Started from a terminal (no parent process), the kernel prints stock's note and
    ``--existing`` line on stdout. Read up to that line (the barrier), then stopped."""

    def banner(module: str) -> list[str]:
        connection_file = tmp_path / f"{module}.json"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("JPY_PARENT_PID", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "-f", str(connection_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.replace(str(connection_file), "CONNECTION_FILE"))
                if line.startswith("    --existing"):
                    break
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        return lines

    ours = banner("ipykernel_ext")
    theirs = banner("ipykernel_launcher")
    assert theirs[-1] == "    --existing CONNECTION_FILE\n", theirs
    assert ours == theirs


def test_demo_moved_out_of_the_package() -> None:
    """``python -m ipykernel_ext demo`` (once a subcommand) fails at once with one line saying
    where the demo is now, instead of starting a kernel that runs a file named "demo"."""
    done = _launcher("demo", "--buttons=10")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.splitlines() == [
        "python -m ipykernel_ext: error: 'demo' is no longer part of the package; "
        "run `python -m benchmarks demo` from a checkout of ipykernel_ext"
    ]


def test_demo_prints_both_readers_and_ours_loses_nothing() -> None:
    """``python -m benchmarks demo`` (the README's first command), small: a row per reader and
    kernel; ipykernel_ext receives the whole burst read straight and paused mid-burst. (What
    stock loses is what the demo shows, not a verdict: it depends on libzmq's and TCP's
    buffers.)"""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "demo", "--buttons=1000", "--trials=1"],
        capture_output=True,
        text=True,
        timeout=170,
        cwd=Path(__file__).resolve().parents[2],  # the checkout root, as the README runs it
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    rows = {
        (m["reader"], m["kernel"]): (int(m["received"]), int(m["lost"]))
        for m in re.finditer(
            r"^(?P<reader>keeps up|paused mid-burst) +(?P<kernel>stock ipykernel|ipykernel_ext)"
            r" +(?P<received>\d+)/3002 +(?P<lost>\d+) ",
            done.stdout,
            re.MULTILINE,
        )
    }
    assert set(rows) == {
        (reader, kernel)
        for reader in ("keeps up", "paused mid-burst")
        for kernel in ("stock ipykernel", "ipykernel_ext")
    }, done.stdout
    assert rows["keeps up", "ipykernel_ext"] == (3002, 0), done.stdout
    assert rows["paused mid-burst", "ipykernel_ext"] == (3002, 0), done.stdout
