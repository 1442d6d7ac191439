"""The conditions a burst is read under, each real, and :class:`Condition`, what each is.

A condition is how the kernel is started and who reads, written on the command line as
``NAME`` or ``NAME:ARG``:

* ``tcp``, ``curve``: one ``jupyter_client`` client reads a fresh kernel, plain TCP
  (``transport_encryption="disabled"``) or CurveZMQ (``"required"``);
* ``sndhwm:N``: ipykernel_ext over CurveZMQ with ``--iopub-sndhwm=N`` (to choose the default);
* ``cosub``: as ``curve``, with a second subscriber (a raw SUB) that never reads;
* ``server``: a real jupyter_server (CurveZMQ required), the cell sent and read over the
  kernel websocket with JupyterLab's binary v1 protocol;
* ``block:S``, ``sigstop:S``: the same, with the server's event loop blocked
  (``harness/server_extensions/pause_extension.py``) or its process stopped for S seconds
  once the client has seen 300 comm_open;
* ``link``: the reader in a network namespace behind a veth pair shaped by tbf (needs root
  and iproute2; skipped with the reason otherwise);
* ``gateway`` and ``cluster:SETTING[:SEND_TIMEOUT_MS]``: through gateway_provisioners'
  launcher (:mod:`benchmarks.burst.provisioners`).

Each condition's :meth:`Condition.opened` sets up what its trials share (a server, a
namespace, kernelspecs) and yields the trial: ``trial(kernel, load) -> Outcome``.
:mod:`benchmarks.burst.catalog` makes one from its name.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.burst.outcome import Load, Outcome
from benchmarks.burst.readers import (
    QUIET_S,
    STALLED_QUIET_S,
    Read,
    RssSampler,
    client_stats,
    read_client,
    read_websocket,
    server_kernel_pid,
    websocket_stats,
)
from benchmarks.trials import EXT, kernel
from harness.burst_reader import SCRIPT as BURST_READER
from harness.kernel_websocket import KernelWebsocket
from harness.kernels import shell_and_control_client
from harness.netns import limit_rate, namespaces_missing, veth_namespace
from harness.raw_subscriber import RawSubscriber
from harness.server import JupyterServer, ServerPause

Trial = Callable[[str, Load], Outcome]
#: As in tests/server/test_iopub_pause.py: ~170 Button comm_open a second.
LINK_RATE_BIT = 2_400_000
RATE_LIMIT_TEXT = "IOPub message rate exceeded"


class Skipped(Exception):
    """This machine cannot make the condition; the message says why."""


@dataclass(frozen=True)
class Settings:
    """What every condition's trials are given: the hang guard and whether to sample RSS."""

    timeout: float
    rss: bool


class Condition:
    """How a burst is read. ``name`` is the spec it was parsed from."""

    name: str = ""

    def applies_to(self, kernel_name: str) -> bool:
        """Whether this condition means anything for ``kernel_name`` (all, by default)."""
        return True

    def opened(self, settings: Settings) -> contextlib.AbstractContextManager[Trial]:
        raise NotImplementedError

    def outcome(
        self, kernel_name: str, load: Load, read: Read, stats: dict[str, Any] | None
    ) -> Outcome:
        return outcome(self.name, kernel_name, load, read, stats)


def outcome(
    condition: str, kernel_name: str, load: Load, read: Read, stats: dict[str, Any] | None
) -> Outcome:
    """What the trial's reader saw, as an :class:`Outcome` of ``condition``."""
    return Outcome(
        condition,
        kernel_name,
        load.label,
        load.expected,
        read.counts.get("comm_open", 0),
        read.counts.get("display_data", 0),
        read.idle,
        read.seconds,
        read.rss_growth_mb,
        stats,
        [RATE_LIMIT_TEXT] if RATE_LIMIT_TEXT in read.stderr else [],
    )


@dataclass
class Direct(Condition):
    """One client in this process reads a fresh kernel; optionally a co-subscriber stalls."""

    name: str
    curve: bool = True
    sndhwm: int | None = None
    co_subscriber: bool = False

    def applies_to(self, kernel_name: str) -> bool:
        return self.sndhwm is None or kernel_name == EXT  # stock has no --iopub-sndhwm

    @contextlib.contextmanager
    def opened(self, settings: Settings) -> Iterator[Trial]:
        def trial(kernel_name: str, load: Load) -> Outcome:
            extra = [] if self.sndhwm is None else [f"--iopub-sndhwm={self.sndhwm}"]
            with kernel(kernel_name, extra, curve=self.curve) as (km, kc):
                stalled = RawSubscriber(km) if self.co_subscriber else contextlib.nullcontext()
                with stalled:
                    read = read_client(
                        kc,
                        load,
                        settings.timeout,
                        STALLED_QUIET_S if self.co_subscriber else QUIET_S,
                        km.provisioner.process.pid if settings.rss else None,  # type: ignore[union-attr]  # a started LocalProvisioner's; the base has no process
                    )
                    # Asked before the stalled subscriber goes, so every give-up is counted.
                    stats = client_stats(kc, kernel_name == EXT)
            return self.outcome(kernel_name, load, read, stats)

        yield trial


@dataclass
class ThroughServer(Condition):
    """A real jupyter_server between kernel and reader; optionally paused mid-burst."""

    name: str
    pause: str | None = None  # "block" or "sigstop"
    seconds: float = 0.0
    env: dict[str, str] | None = None

    def start_pause(self, server: JupyterServer) -> ServerPause:
        if self.pause == "block":
            return server.block_event_loop(self.seconds)
        return server.stop_process(self.seconds)

    @contextlib.contextmanager
    def opened(self, settings: Settings) -> Iterator[Trial]:
        with JupyterServer(pause_extension=self.pause == "block", env=self.env) as server:
            yield lambda kernel_name, load: self.trial(server, settings, kernel_name, load)

    def spec(self, kernel_name: str) -> str:
        """The kernelspec the server starts for ``kernel_name``."""
        return kernel_name

    def trial(
        self, server: JupyterServer, settings: Settings, kernel_name: str, load: Load
    ) -> Outcome:
        kernel_id = server.start_kernel(self.spec(kernel_name))
        pause = None if self.pause is None else (lambda: self.start_pause(server))
        try:
            with KernelWebsocket(server, kernel_id) as ws:
                pid = server_kernel_pid(server, kernel_id) if settings.rss else None
                read = read_websocket(ws, load, settings.timeout, pause, rss_pid=pid)
                stats = websocket_stats(ws, kernel_name == EXT)
        finally:
            with contextlib.suppress(Exception):
                server.shutdown_kernel(kernel_id)
        return self.outcome(kernel_name, load, read, stats)


@dataclass
class Link(Condition):
    """The only IOPub reader in a network namespace behind a tbf-shaped veth pair."""

    name: str = "link"

    @contextlib.contextmanager
    def opened(self, settings: Settings) -> Iterator[Trial]:
        missing = namespaces_missing(shaping=True)
        if missing:
            raise Skipped(missing)
        with veth_namespace() as net:
            limit_rate(net.host_if, LINK_RATE_BIT)

            def trial(kernel_name: str, load: Load) -> Outcome:
                if load.kind != "grid":
                    raise ValueError(f"the link reader runs a widget grid, not {load.label}")
                with kernel(kernel_name, client=shell_and_control_client, ip=net.host_ip) as (
                    km,
                    kc,
                ):
                    read = self.read_in_namespace(net.exec_prefix, km, load, settings)
                    stats = client_stats(kc, kernel_name == EXT)
                return self.outcome(kernel_name, load, read, stats)

            yield trial

    @staticmethod
    def read_in_namespace(prefix: Sequence[str], km: Any, load: Load, settings: Settings) -> Read:
        pid = km.provisioner.process.pid if settings.rss else None
        with RssSampler(pid) as rss:
            out = subprocess.run(
                [
                    *(*prefix, sys.executable, str(BURST_READER), km.connection_file),
                    f"--buttons={load.size}",
                    f"--timeout={settings.timeout}",
                    f"--quiet={QUIET_S}",
                ],
                capture_output=True,
                text=True,
                timeout=settings.timeout + 120,
                check=False,
            )
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError(f"the link reader failed: {out.stderr[-2000:]}")
        result = json.loads(out.stdout.splitlines()[-1])
        seconds = result["seconds"] if result["idle"] else None
        return Read(result["counts"], result["idle"], seconds, rss_growth_mb=rss.growth_mb)
