"""A network namespace behind a veth pair, and a rate limit on it: a real remote link.

The SSH hop of the cluster tests and the rate-limited link of the pause tests and benchmarks
run a process inside a namespace that reaches this machine only through a veth pair, which
``tc``'s tbf can shape. Needs root and iproute2: :func:`namespaces_missing` says why not.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from jupyter_client import localinterfaces


def can_make_namespaces() -> bool:
    """Can :func:`veth_namespace` work here (see :func:`namespaces_missing`)?"""
    return namespaces_missing() is None


@functools.cache
def namespaces_missing(shaping: bool = False) -> str | None:
    """Why :func:`veth_namespace` (and, with ``shaping``, :func:`limit_rate` on it) cannot
    work on this machine, or None; for a test to skip with.

    Root and iproute2 are not enough (a container may lack the capability, a kernel the tbf
    qdisc), so a namespace and veth pair are made and removed once, for real.
    """
    if os.geteuid() != 0:
        return "a network namespace needs root"
    for tool in ("ip", "tc") if shaping else ("ip",):
        if shutil.which(tool) is None:
            return f"iproute2's {tool!r} is not installed (apt-get install iproute2)"
    try:
        with veth_namespace() as net:
            if shaping:
                limit_rate(net.host_if, 1_000_000)
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode(errors="replace").strip()
        return f"cannot make a network namespace and veth pair here: {exc.cmd}: {detail}"
    except OSError as exc:
        return f"cannot make a network namespace and veth pair here: {exc}"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _free_subnet() -> str:
    """A 10.213.N.0/30 no interface of this machine uses (the test's own wire)."""
    in_use = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    for n in secrets.SystemRandom().sample(range(256), 256):
        if f"10.213.{n}." not in in_use:
            return f"10.213.{n}"
    raise RuntimeError("no free 10.213.N.0/30 subnet")


@dataclass
class VethNamespace:
    """A network namespace joined to this one by a veth pair on a private /30.

    ``host_ip`` is on ``host_if`` (this side), ``remote_ip`` on ``remote_if`` (inside). Run a
    command inside with ``[*exec_prefix, ...]``. Nothing else is reachable from inside: its
    default route is the veth pair, and this side routes nowhere new.
    """

    namespace: str
    host_if: str
    remote_if: str
    host_ip: str
    remote_ip: str

    @property
    def exec_prefix(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.namespace)

    def pids(self) -> set[int]:
        out = subprocess.run(
            ["ip", "netns", "pids", self.namespace], capture_output=True, text=True, check=True
        ).stdout
        return {int(pid) for pid in out.split()}


@contextmanager
def veth_namespace() -> Iterator[VethNamespace]:
    """Make a namespace and veth pair; on exit kill what runs inside and remove both."""
    namespace = f"ipkx{secrets.token_hex(3)}"
    subnet = _free_subnet()
    net = VethNamespace(namespace, f"{namespace}h", f"{namespace}r", f"{subnet}.1", f"{subnet}.2")
    _ip("netns", "add", namespace)
    try:
        _ip("link", "add", net.host_if, "type", "veth", "peer", "name", net.remote_if)
        _ip("link", "set", net.remote_if, "netns", namespace)
        _ip("addr", "add", f"{net.host_ip}/30", "dev", net.host_if)
        _ip("link", "set", net.host_if, "up")
        # jupyter_client lists this machine's addresses once per process and will not start
        # a kernel on any other (LocalProvisioner): have it list them again, with host_ip.
        localinterfaces._load_ips_psutil()
        _ip("-n", namespace, "addr", "add", f"{net.remote_ip}/30", "dev", net.remote_if)
        _ip("-n", namespace, "link", "set", net.remote_if, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        # A process inside reaches this machine's own addresses (a kernel's, a provisioner's
        # response address) through the veth pair.
        _ip("-n", namespace, "route", "add", "default", "via", net.host_ip)
        yield net
    finally:
        # Everything left inside was started by the caller: sshd, kernels, readers.
        for pid in net.pids() if _namespace_exists(namespace) else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", net.host_if], capture_output=True)


def _namespace_exists(namespace: str) -> bool:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return any(line.split()[0] == namespace for line in out.splitlines() if line.strip())


def limit_rate(dev: str, rate_bit: int, burst_bytes: int = 16_000, latency_ms: int = 500) -> None:
    """Shape what leaves ``dev`` to ``rate_bit`` bit/s with tbf (a slow link, for real).

    ``latency_ms`` bounds tbf's own queue: the sender's TCP then feels the limit quickly
    instead of filling a big qdisc buffer first.
    """
    subprocess.run(
        [
            "tc",
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            f"{rate_bit}bit",
            "burst",
            str(burst_bytes),
            "latency",
            f"{latency_ms}ms",
        ],
        check=True,
        capture_output=True,
    )
