"""The burst scenario's named runs: what ``python -m benchmarks NAME`` runs for each.

Each preset is a plan (which conditions read which loads), the trials, and its own
description for ``--list`` and ``--help``. ``python -m benchmarks burst`` runs any other
combination (``--conditions``, ``--loads``). Nothing here imports more than the standard
library, so that listing needs none of a benchmark's dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The seed loads: a GridBox of 3000 Buttons (9002 comm_open), and a loop
#: of 20000 comm_open (a queue past ipykernel_ext's default for a co-subscriber to fill).
SEED = "grid:3000"
COMMS = "comms:20000"


@dataclass(frozen=True)
class Preset:
    """A named run of the burst scenario."""

    description: str  # first line: the --list line; the rest: --help
    plan: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # ((conditions, loads), ...)
    quick_plan: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] | None = None
    trials: int = 3
    quick_trials: int = 1
    timeout: float = 300.0
    rss: bool = False
    examples: tuple[str, ...] = field(default=())


PRESETS: dict[str, Preset] = {
    "burst": Preset(
        "One cell's burst read under the conditions you name (--conditions, --loads).\n\n"
        "The scenario every burst benchmark runs: each trial a fresh kernel, stock ipykernel"
        " and ipykernel_ext taking turns, a load (grid:N, a GridBox of N Buttons; comms:N,"
        " N comm_open) read under a condition (tcp, curve, sndhwm:N, cosub, server, block:S,"
        " sigstop:S, link, gateway, cluster:SETTING[:SEND_TIMEOUT_MS]; see"
        " benchmarks/burst/conditions.py).",
        plan=((("curve",), ("grid:1000",)),),
        examples=(
            "python -m benchmarks burst --conditions curve server --loads grid:1000",
            "python -m benchmarks burst --conditions sndhwm:1000 sndhwm:10000 sndhwm:0"
            " --buttons 1000 --kernels python3-ext",
        ),
    ),
    "iopub_burst": Preset(
        "A grid of Buttons on stock ipykernel and ipykernel_ext, plain TCP and CurveZMQ.\n\n"
        "One client reads IOPub as fast as jupyter_client can. Reported per kernel, transport"
        " and size: trials that lost messages, mean comm_open lost, median time to idle, and"
        " ipykernel_ext over CurveZMQ against stock over plain TCP (target <= 1.05).",
        plan=((("tcp", "curve"), ("grid:500", "grid:1000", SEED)),),
        trials=10,
        quick_trials=3,
    ),
    "through_server": Preset(
        "A grid of Buttons through jupyter_server, stock ipykernel vs ipykernel_ext (CurveZMQ).\n\n"
        "What a JupyterLab user runs, minus the browser: a real jupyter_server with"
        " CurveZMQ required, the cell sent and read over the kernel websocket with"
        " JupyterLab's binary v1 protocol. A lost trial is what a frontend shows as 'Error"
        " displaying widget', an empty output or a cell stuck at [*].",
        plan=((("server",), ("grid:1000", SEED)),),
        trials=10,
        quick_trials=3,
    ),
    "cluster_burst": Preset(
        "The 3000-Button burst through gateway_provisioners' launcher, stock vs ExtKernel.\n\n"
        "The launching process reads, with GP_SOCKET_TIMEOUT unset (0.01 s: the provisioner's"
        " response socket slows that process's reading, docs/CLUSTER.md) and 0; ipykernel_ext"
        " with its default send timeout and with 10 s from an IPython profile.",
        plan=((("cluster:default", "cluster:default:10000", "cluster:0"), (SEED,)),),
    ),
    "iopub_pause": Preset(
        "A reader that pauses or is slow, then carries on: stock ipykernel vs ipykernel_ext.\n\n"
        "The seed's 3000-Button burst over CurveZMQ with the reader held up as users meet"
        " it: a jupyter_server whose event loop is blocked or whose process is stopped"
        " mid-burst, gateway_provisioners' launcher, a tbf-shaped link; and a 20000-message"
        " burst with a co-subscriber that never reads (against the same burst without it)."
        " With the kernel's RSS growth. The tests (tests/server/test_iopub_pause.py) hold"
        " the counts; this shows them.",
        plan=(
            (
                ("block:1", "block:4", "block:10", "block:30", "sigstop:4", "sigstop:10"),
                (SEED,),
            ),
            (("gateway", "link"), (SEED,)),
            (("curve", "cosub"), (COMMS,)),
        ),
        quick_plan=(
            (("block:4", "sigstop:4", "gateway", "link"), (SEED,)),
            (("curve", "cosub"), (COMMS,)),
        ),
        trials=1,
        rss=True,
    ),
}
