"""The runner: ``python -m benchmarks NAME [--quick] [--trials N] [--json PATH] [options]``.

``benchmarks/__main__.py`` only calls :func:`main`, and ``python benchmarks/NAME.py ARGS``
comes here too, through :func:`script`. ``python -m benchmarks --list`` names every benchmark
(every module in this folder but ``__init__``, ``__main__``, this runner, ``trials``, ``burst``
and ``plot``) with the first line of its docstring, read without importing it, so that
listing needs none of a benchmark's optional dependencies.

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
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from benchmarks.trials import write_json

HERE = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"__init__", "__main__", "burst", "plot", "runner", "trials"}


def names() -> list[str]:
    """Every benchmark module in this folder."""
    return sorted(
        p.stem for p in HERE.glob("*.py") if p.stem not in NOT_BENCHMARKS and p.stem[0] != "_"
    )


def description(name: str) -> str:
    """The first line of a benchmark's docstring (parsed, not imported)."""
    doc = ast.get_docstring(ast.parse((HERE / f"{name}.py").read_text())) or ""
    return doc.splitlines()[0] if doc else "(no docstring)"


def print_list() -> None:
    width = max(len(n) for n in names())
    for name in names():
        print(f"{name:<{width}}  {description(name)}")


def run_benchmark(module: ModuleType, name: str, argv: list[str]) -> int:
    """Parse the common options and the module's own, run it, write its JSON."""
    trials, quick_trials = module.TRIALS, module.QUICK_TRIALS
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks {name}",
        description=(module.__doc__ or "").split("\n\n")[0],
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
    results_file = getattr(module, "RESULTS_FILE", None)
    common.add_argument(
        "--json",
        type=Path,
        default=results_file,
        help=f"write the raw results here (default: {results_file or 'not written'})",
    )
    if hasattr(module, "add_arguments"):
        module.add_arguments(parser)
    args = parser.parse_args(argv)
    args.trials_given = args.trials is not None
    if args.trials is None:
        args.trials = quick_trials if args.quick else trials
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    results = module.run(args)
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
    return run_benchmark(importlib.import_module(f"benchmarks.{name}"), name, rest)


def script(file: str) -> NoReturn:
    """``python benchmarks/NAME.py ARGS``: the same as ``python -m benchmarks NAME ARGS``."""
    sys.exit(main([Path(file).stem, *sys.argv[1:]]))
