"""The state file of a kernel that outlives its server: one owner-only JSON file per kernel.

It is what the next server needs to take the kernel back (:mod:`.taking_back`), written where
the kernel's connection file is (the server's runtime dir, ``jupyter --runtime-dir``):

* ``kernel_id``, ``kernel_name``, ``connection_info`` (ports, ``key``, CurveZMQ keys: hence
  owner-only, like a connection file: ``jupyter_core.paths.secure_write``);
* the kernel's process: ``pid``, its process group and its **start time**, so that a pid that
  now belongs to another process is never taken for the kernel (a reused pid would be sent
  the kernel's interrupts and its kill);
* ``cwd`` and ``session_name`` (``JPY_SESSION_NAME``), so a restart of the taken-back kernel
  runs where and as the first one did;
* the server process that owns it (pid and start time): a second server started beside a
  running one must not take that one's kernels;
* ``sessions``: jupyter_server's sessions of the kernel (id, path, name, type), kept by
  :mod:`.sessions`, so every tab finds its session again.

The start time is Linux's (``/proc/<pid>/stat``, clock ticks since boot); where there is no
``/proc`` it is None, and a pid is then taken for its process only if the kernel also
answers a signed ``kernel_info`` (which adoption asks anyway).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jupyter_core.paths import secure_write

#: The state file of kernel ``<id>``: beside ``kernel-<id>.json`` (jupyter_server's
#: ``kernel-*.json`` and ``jpserver-*.json`` globs never match it).
PREFIX = "ipykernel-ext-lasting-"
SUFFIX = ".json"


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None (no ``/proc``, or
    no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # field 22, "starttime"


@dataclass(frozen=True)
class ProcessId:
    """A process as a pid and its start time (None where the system does not tell)."""

    pid: int
    started: int | None

    @classmethod
    def of(cls, pid: int) -> ProcessId:
        return cls(pid, process_start(pid))

    def alive(self) -> bool:
        """Whether this very process still runs (not a later one under the same pid)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return False  # another user's process: not the kernel we launched
        if self.started is None:
            return True
        return process_start(self.pid) == self.started


@dataclass
class KernelRecord:
    kernel_id: str
    kernel_name: str
    connection_info: dict[str, Any]
    process: ProcessId
    pgid: int | None
    cwd: str | None
    session_name: str | None
    server: ProcessId
    sessions: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelRecord:
        return cls(
            kernel_id=str(data["kernel_id"]),
            kernel_name=str(data["kernel_name"]),
            connection_info=dict(data["connection_info"]),
            process=ProcessId(**data["process"]),
            pgid=data.get("pgid"),
            cwd=data.get("cwd"),
            session_name=data.get("session_name"),
            server=ProcessId(**data["server"]),
            sessions=list(data.get("sessions") or []),
        )


def json_connection_info(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with its bytes (``key``, CurveZMQ keys: ASCII) as text, for JSON."""
    return {
        name: value.decode("ascii") if isinstance(value, bytes) else value
        for name, value in info.items()
    }


class RecordFiles:
    """The state files of one runtime dir."""

    def __init__(self, runtime_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(runtime_dir)

    def path(self, kernel_id: str) -> Path:
        return self.dir / f"{PREFIX}{kernel_id}{SUFFIX}"

    def write(self, record: KernelRecord) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.path(record.kernel_id)
        partial = path.with_name(path.name + ".partial")
        # Written whole, then renamed: a server killed mid-write leaves the old file whole.
        with secure_write(str(partial)) as f:
            json.dump(record.to_json(), f, indent=1)
        partial.replace(path)

    def read(self, kernel_id: str) -> KernelRecord | None:
        return self._read(self.path(kernel_id))

    def _read(self, path: Path) -> KernelRecord | None:
        try:
            return KernelRecord.from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            return None

    def remove(self, kernel_id: str) -> None:
        for path in (self.path(kernel_id), self._lock_path(kernel_id)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _lock_path(self, kernel_id: str) -> Path:
        path = self.path(kernel_id)
        return path.with_name(path.name + ".lock")

    @contextlib.contextmanager
    def claimed(self, kernel_id: str) -> Iterator[KernelRecord | None]:
        """The kernel's record, read under an exclusive lock held until the block ends.

        Two servers started at once in one runtime dir must not both take a kernel back: the
        second waits for the first's lock, then reads the record the first rewrote (its own
        pid as the owner, alive) and leaves the kernel to it. Without ``fcntl`` (Windows): no
        lock.
        """
        try:
            import fcntl
        except ImportError:
            yield self.read(kernel_id)
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_path(kernel_id), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self.read(kernel_id)
        finally:
            os.close(fd)  # and with it the lock

    def all(self) -> list[tuple[Path, KernelRecord | Exception]]:
        """Every state file of the dir, read (or what reading it raised: a bad file is
        reported by the caller, never a crash)."""
        found: list[tuple[Path, KernelRecord | Exception]] = []
        for path in sorted(self.dir.glob(f"{PREFIX}*{SUFFIX}")):
            try:
                record = self._read(path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                found.append((path, exc))
                continue
            if record is not None:
                found.append((path, record))
        return found
