"""Every burst condition by its name on the command line: :func:`parse`.

``tcp``, ``curve``, ``cosub``, ``server``, ``link`` and ``gateway`` take no argument;
``sndhwm:N``, ``block:S``, ``sigstop:S`` and ``cluster:SETTING[:SEND_TIMEOUT_MS]`` take one
(see :mod:`benchmarks.burst.conditions` and :mod:`benchmarks.burst.provisioners` for what
each is). A name that is none of these is a ValueError that lists them, so the command line
refuses it before any kernel starts.
"""

from __future__ import annotations

from benchmarks.burst.conditions import Condition, Direct, Link, ThroughServer
from benchmarks.burst.provisioners import Cluster, Gateway


def parse(spec: str) -> Condition:
    """The condition named ``spec`` (see :mod:`benchmarks.burst.conditions`); ValueError
    if none is."""
    name, _, arg = spec.partition(":")
    try:
        if name in ("tcp", "curve", "cosub", "server", "link", "gateway") and not arg:
            return {
                "tcp": lambda: Direct(spec, curve=False),
                "curve": lambda: Direct(spec),
                "cosub": lambda: Direct(spec, co_subscriber=True),
                "server": lambda: ThroughServer(spec),
                "link": lambda: Link(spec),
                "gateway": lambda: Gateway(spec),
            }[name]()
        if name == "sndhwm" and arg:
            return Direct(spec, sndhwm=int(arg))
        if name in ("block", "sigstop") and arg:
            return ThroughServer(spec, pause=name, seconds=float(arg))
        if name == "cluster" and arg:
            setting, _, send_timeout = arg.partition(":")
            return Cluster(spec, setting, int(send_timeout) if send_timeout else None)
    except ValueError:
        pass
    raise ValueError(
        f"unknown condition {spec!r}: one of tcp, curve, cosub, server, link, gateway,"
        " sndhwm:N, block:S, sigstop:S, cluster:SETTING[:SEND_TIMEOUT_MS]"
    )
