"""A lasting kernel's state file, the process identity it keeps, and the orphan time-out's
environment variable (ipykernel_ext.server.lasting.records, ipykernel_ext.kernel.orphan)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ipykernel_ext.kernel.orphan import ENV, orphan_timeout
from ipykernel_ext.server.lasting.records import (
    KernelRecord,
    ProcessId,
    RecordFiles,
    json_connection_info,
)


def a_record(kernel_id: str = "k1") -> KernelRecord:
    return KernelRecord(
        kernel_id=kernel_id,
        kernel_name="python3-ext",
        connection_info=json_connection_info({"key": b"secret", "shell_port": 5}),
        process=ProcessId.of(os.getpid()),
        pgid=None,
        cwd="/somewhere",
        session_name="a.ipynb",
        server=ProcessId.of(os.getpid()),
        sessions=[{"id": "s1", "path": "a.ipynb", "name": "a.ipynb", "type": "notebook"}],
    )


def test_a_record_reads_back_as_written_owner_only(tmp_path: Path) -> None:
    files = RecordFiles(tmp_path)
    files.write(a_record())
    back = files.read("k1")
    assert back == a_record()
    assert back is not None and back.connection_info["key"] == "secret"
    assert stat.S_IMODE(files.path("k1").stat().st_mode) == 0o600  # keys inside
    assert [p for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []
    files.remove("k1")
    files.remove("k1")  # twice: no error
    assert files.read("k1") is None


def test_every_file_is_listed_and_a_bad_one_is_reported_not_raised(tmp_path: Path) -> None:
    files = RecordFiles(tmp_path)
    files.write(a_record("k1"))
    files.path("bad").write_text("{not json")
    files.path("short").write_text('{"kernel_id": "short"}')
    found = {path.name: value for path, value in files.all()}
    assert isinstance(found[files.path("k1").name], KernelRecord)
    assert isinstance(found[files.path("bad").name], ValueError)
    assert isinstance(found[files.path("short").name], KeyError)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc: no start times")
def test_a_process_is_its_pid_and_its_start_time() -> None:
    this = ProcessId.of(os.getpid())
    assert this.started is not None and this.alive()
    # The same pid with another start time: a later process under a reused pid.
    assert not ProcessId(this.pid, this.started + 1).alive()
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert not ProcessId(int(ended.stdout), None).alive()


@pytest.mark.parametrize(
    ("value", "expected"), [(None, None), ("", None), ("2", 2.0), ("0.5", 0.5)]
)
def test_the_orphan_time_out_comes_from_the_environment(
    value: str | None, expected: float | None
) -> None:
    environ = {} if value is None else {ENV: value}
    assert orphan_timeout(environ) == expected


@pytest.mark.parametrize("value", ["soon", "0", "-3", "nan"])
def test_a_bad_orphan_time_out_is_a_clear_error(value: str) -> None:
    with pytest.raises(ValueError, match=ENV):
        orphan_timeout({ENV: value})


def test_a_record_is_claimed_under_an_exclusive_lock(tmp_path: Path) -> None:
    """Two servers starting at once take turns: while one holds the claim, another's fails
    (here asked without waiting), and it is free again after."""
    fcntl = pytest.importorskip("fcntl", reason="no fcntl (Windows): records are not locked")
    files = RecordFiles(tmp_path)
    files.write(a_record("k1"))
    lock = files.path("k1").with_name(files.path("k1").name + ".lock")
    with files.claimed("k1") as record:
        assert record == a_record("k1")
        fd = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
    finally:
        os.close(fd)
    files.remove("k1")
    assert not lock.exists()
