"""The runner: ``python -m benchmarks NAME [--quick] [--trials N] [--json PATH] [options]``.

``benchmarks/__main__.py`` only calls :func:`main`, and ``python benchmarks/NAME.py ARGS``
comes here too, through :func:`script`. ``python -m benchmarks --list`` names every benchmark
with the first line of its description, read without importing it, so that listing needs
none of a benchmark's optional dependencies. A benchmark is either

* a module in this folder (all but ``__init__``, ``__main__``, this runner, ``trials`` and
  ``plot``; the packages here hold a benchmark's parts and are never listed), or
* a preset of the burst scenario (``benchmarks/burst/presets.py``: ``burst``,
  ``iopub_burst``, ``through_server``, ``cluster_burst``, ``iopub_pause``): one scenario,
  one cell's burst read under a condition, run by ``benchmarks/burst/scenario.py``.

A benchmark module gives the runner:

* a docstring whose first line says what it measures (the ``--list`` line and ``--help``);
* ``TRIALS`` and ``QUICK_TRIALS``: the default of ``--trials``, without and with ``--quick``
  (an explicit ``--trials`` wins over both; ``args.trials_given`` says whether there was one,
  for a mode with a default of its own);
* ``RESULTS_FILE`` (optional): the default of ``--json``, for benchmarks that always keep
  their raw results; without it JSON is written only when ``--json`` is given;
* ``add_arguments(parser)`` (optional): its own options;
* ``run(args) -> dict | None``: the trials and the printed summary; the dict returned is what
  ``--json`` writes (None: nothing to write).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from benchmarks.burst.presets import PRESETS
from benchmarks.trials import RESULTS, write_json

HERE = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"__init__", "__main__", "plot", "runner", "trials"}


def modules() -> list[str]:
    """Every benchmark module in this folder."""
    return sorted(
        p.stem for p in HERE.glob("*.py") if p.stem not in NOT_BENCHMARKS and p.stem[0] != "_"
    )


def names() -> list[str]:
    """Every benchmark: the modules and the burst scenario's presets."""
    return sorted([*modules(), *PRESETS])


def description(name: str) -> str:
    """The first line of a benchmark's description (a module's docstring parsed, not
    imported)."""
    if name in PRESETS:
        return PRESETS[name].description.splitlines()[0]
    doc = ast.get_docstring(ast.parse((HERE / f"{name}.py").read_text())) or ""
    return doc.splitlines()[0] if doc else "(no docstring)"


@dataclass
class Benchmark:
    """What the runner needs of a benchmark, from a module or from a burst preset."""

    name: str
    doc: str  # the description --help prints
    trials: int
    quick_trials: int
    run: Callable[[argparse.Namespace], dict[str, Any] | None]
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    results_file: Path | None = None
    examples: tuple[str, ...] = ()

    @classmethod
    def load(cls, name: str) -> Benchmark:
        if name in PRESETS:
            from benchmarks.burst.scenario import preset_benchmark

            preset = PRESETS[name]
            add_arguments, run = preset_benchmark(name, preset)
            return cls(
                name,
                preset.description.replace("\n\n", "\n"),  # all of it in --help
                preset.trials,
                preset.quick_trials,
                run,
                add_arguments,
                RESULTS / f"{name}.json",
                preset.examples,
            )
        module = importlib.import_module(f"benchmarks.{name}")
        return cls(
            name,
            (module.__doc__ or "").split("\n\n")[0],  # the first paragraph in --help
            module.TRIALS,
            module.QUICK_TRIALS,
            module.run,
            getattr(module, "add_arguments", None),
            getattr(module, "RESULTS_FILE", None),
        )


def print_list() -> None:
    width = max(len(n) for n in names())
    for name in names():
        print(f"{name:<{width}}  {description(name)}")


def run_benchmark(bench: Benchmark, argv: list[str]) -> int:
    """Parse the common options and the benchmark's own, run it, write its JSON."""
    trials, quick_trials = bench.trials, bench.quick_trials
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks {bench.name}",
        description=bench.doc,
        epilog="\n".join(bench.examples) or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = parser.add_argument_group("common options")
    common.add_argument(
        "--quick",
        action="store_true",
        help=f"{quick_trials} trial{'s' * (quick_trials != 1)}, smaller settings",
    )
    common.add_argument(
        "--trials",
        type=int,
        default=None,
        help=f"trials (default {trials}; {quick_trials} with --quick)",
    )
    results_file = bench.results_file
    common.add_argument(
        "--json",
        type=Path,
        default=results_file,
        help=f"write the raw results here (default: {results_file or 'not written'})",
    )
    if bench.add_arguments is not None:
        bench.add_arguments(parser)
    args = parser.parse_args(argv)
    args.trials_given = args.trials is not None
    if args.trials is None:
        args.trials = quick_trials if args.quick else trials
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    results = bench.run(args)
    if results is not None and args.json is not None:
        write_json(args.json, results)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m benchmarks NAME [--quick] [--trials N] [--json PATH] [options]"
    if argv[:1] == ["--list"]:
        print_list()
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{usage}\n       python -m benchmarks NAME --help\n\nbenchmarks:")
        print_list()
        return 0 if argv else 2  # no name at all is a mistake
    name, rest = argv[0].removesuffix(".py"), argv[1:]
    if name not in names():
        print(
            f"python -m benchmarks: unknown benchmark {name!r}; one of: {', '.join(names())}"
            " (python -m benchmarks --list)",
            file=sys.stderr,
        )
        return 2
    return run_benchmark(Benchmark.load(name), rest)


def script(file: str) -> NoReturn:
    """``python benchmarks/NAME.py ARGS``: the same as ``python -m benchmarks NAME ARGS``."""
    sys.exit(main([Path(file).stem, *sys.argv[1:]]))
