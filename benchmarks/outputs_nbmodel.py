"""Outputs that survive the tab, cases (a)-(g) in a browser, beside jupyter-server-nbmodel
0.2.9: what a tab shows.

Headless Debian Chromium (``/usr/bin/chromium``; ``playwright install`` is never run) on a
real JupyterLab, jupyter-collaboration on for both sides:

* **ours**: this venv's JupyterLab, ``SharedChannelsConnection`` (``keep_outputs`` on by
  default), the ``python3-ext`` kernel with CurveZMQ;
* **nbmodel**: JupyterLab and jupyter-server-nbmodel 0.2.9 (it replaces JupyterLab's cell
  executor: every cell runs through the server) in a venv of their own, ``--venv`` (default
  ``build/nbmodel-venv``), with stock ``python3`` (plain TCP: its kernelspec declares no
  CurveZMQ). Make it once with::

      python3 -m venv build/nbmodel-venv
      build/nbmodel-venv/bin/pip install jupyter-server-nbmodel==0.2.9 jupyter-collaboration \\
          jupyterlab ipykernel ipywidgets playwright

The cases (``CASES``) are tests/browser/test_browser_outputs.py's (a)-(g) with its cells, which
stop at *holds* (harness/outputs_cells.py), plus (s): (b) without collaboration, reopened once
the cell ended. Per case a fresh server and notebook; the page runs all cells (a user's Run
All); the tab leaves at hold 1; at hold 2, the tab back, the page is read ("mid"), then once
the cell ended and the server says idle ("end"), then the page saves and the file is read.
Verdicts on content only: "whole" is every output so far exactly once, in order, ``[*]`` mid-
cell; every output (drawn as the running tab draws it) and a count after; the same in the file.
Each read waits for that up to ``--settle`` s (a window for what never comes, not a bar).

    python -m benchmarks outputs_nbmodel              # every case, both sides
    python -m benchmarks outputs_nbmodel --quick      # case (a) only
    python -m benchmarks outputs_nbmodel --cases b,g --sides nbmodel
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.trials import EXT, ROOT, print_table
from harness.browser import (
    LAB_ARGS,
    chromium,
    missing_requirement,
    quiet_lab_settings,
    wait_for,
    write_notebook,
)
from harness.browser_outputs import (
    STDOUT,
    Notebook,
    cells,
    file_cells,
    file_output_data,
    lines,
    outputs,
    save,
    shows_line,
    stdout_lines,
    wait_page,
)
from harness.outputs_cells import HANG, Holds, counting_cell, rich_cell, widget_cell
from harness.server import JupyterServer

TRIALS, QUICK_TRIALS = 1, 1
SHARED = "ipykernel_ext.server.SharedChannelsConnection"
ALL_CASES = "abcdefgs"
CASES = {
    "a": "reload after line 5",
    "b": "close, reopen 8 s later",
    "c": "second tab stays, first closes",
    "d": "websocket cut, same session back",
    "e": "display_id, \\r progress, clear_output(wait=True)",
    "f": "Run All of 3 cells, reload in the first",
    "g": "slider moved to 40, HTML after the tab left",
    "s": "no collaboration: close, reopen after the cell ended",
}
KERNEL_JS = "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
Shown = list[dict[str, Any]]


@dataclass
class Result:
    side: str
    case: str
    step5_shown: bool  # the running tab showed line/frame/slider 5 before it left
    mid: str  # what the page showed at the cell's second hold (after it came back)
    mid_prompt: str
    mid_whole: bool
    end: str  # what the page showed once the cell ended
    end_prompt: str
    end_whole: bool
    file_whole: bool
    error: str = ""

    @property
    def whole(self) -> bool:
        return self.mid_whole and self.end_whole and self.file_whole and not self.error


class NbmodelLab(JupyterServer):
    """JupyterLab run by another venv's Python (that venv's extensions and kernels)."""

    def __init__(self, python: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.python = python

    def command(self) -> list[str]:
        return [str(self.python), *super().command()[1:]]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["PATH"] = f"{self.python.parent}:{env.get('PATH', '')}"
        env.pop("VIRTUAL_ENV", None)
        return env


def make_server(side: str, venv: Path, case: str) -> JupyterServer:
    # (s): jupyter-collaboration installed but off (pages load through the ContentsManager)
    args = [*LAB_ARGS, *(["--YDocExtension.disable_rtc=True"] if case == "s" else [])]
    if side == "ours":
        return JupyterServer(
            app="lab",
            encryption=True,
            extra_args=[*args, f"--ServerApp.kernel_websocket_connection_class={SHARED}"],
        )
    return NbmodelLab(venv / "bin" / "python", app="lab", encryption=False, extra_args=args)


# --- what each case expects ------------------------------------------------------------------


def rich(step: int) -> list[tuple[str, str]]:
    return [(STDOUT, "frame 19"), ("text/plain", f"status {step}"), (STDOUT, f"progress {step}")]


def expected(case: str, at_end: bool) -> list[list[tuple[str, str]]] | None:
    """The outputs (MIME drawn, text) per cell a whole page shows; None for (g) (drawn)."""
    if case in "eg":
        return [rich(39 if at_end else 29)] if case == "e" else None
    words = [("line", 40), ("second", 10), ("third", 10)][: 3 if case == "f" else 1]
    if not at_end:  # the first cell at line 29, the queued ones empty
        return [[(STDOUT, "\n".join(lines("line", 30)))], [], []][: len(words)]
    return [[(STDOUT, "\n".join([*lines(w, n), "done"]))] for w, n in words]


def drawn(shown: Shown, value: int) -> bool:
    """(g): the slider drawn as a widget at ``value`` and the HTML drawn as HTML."""
    outs = shown[0]["outputs"] if shown else []
    return (
        len(outs) == 2
        and (outs[0]["sliders"], outs[0]["readout"]) == (1, str(value))
        and (outs[1]["mime"], outs[1]["marks"]) == ("text/html", 1)
    )


def page_whole(case: str, shown: Shown, at_end: bool) -> bool:
    n = 3 if case == "f" else 1
    if len(shown) != n:
        return False
    prompts = [c["prompt"] or "" for c in shown]
    ok_prompts = (
        all(re.fullmatch(r"\[\d+\]:", p) for p in prompts) if at_end else prompts == ["[*]:"] * n
    )
    want = expected(case, at_end)
    content = (
        drawn(shown, 40 if at_end else 29)
        if want is None
        else ([outputs(c) for c in shown] == want)
    )
    return content and ok_prompts


def file_expected(case: str) -> list[list[tuple[str, Any]]]:
    def stream(words: list[str]) -> list[tuple[str, Any]]:
        return [("stream:stdout", "".join(f"{w}\n" for w in words))]

    if case in "abcds":
        return [stream([*lines("line", 40), "done"])]
    if case == "e":
        return [
            [
                ("stream:stdout", "frame 19\n"),
                ("display_data", ("text/plain",)),
                ("stream:stdout", "progress 39\n"),
            ]
        ]
    if case == "f":
        return [
            stream([*lines("line", 40), "done"]),
            stream([*lines("second", 10), "done"]),
            stream([*lines("third", 10), "done"]),
        ]
    widget = "application/vnd.jupyter.widget-view+json"
    return [
        [
            ("display_data", tuple(sorted(["text/plain", widget]))),
            ("display_data", ("text/html", "text/plain")),
        ]
    ]


def file_ok(path: Path, case: str) -> bool:
    """The file holds every cell's outputs (as :func:`file_expected`) and a count."""
    held = file_cells(path)
    ok = all(
        (held.get(f"cell-{i}") or {}).get("outputs") == want
        and (held.get(f"cell-{i}") or {}).get("count") is not None
        for i, want in enumerate(file_expected(case))
    )
    # (e): the display saved at its last value, not only as a display
    return ok and (case != "e" or file_output_data(path, "cell-0") == [{"text/plain": "status 39"}])


def describe(case: str, shown: Shown) -> str:
    """A short account of what the page shows (for the table)."""
    if not shown:
        return "no cells"
    parts: list[str] = []
    for cell in shown:
        if case in "abcdfs":
            got = stdout_lines(cell)
            numbers = [int(m) for m in re.findall(r"^\w+ (\d+)$", "\n".join(got), re.M)]
            once = numbers == sorted(set(numbers)) and numbers == list(range(len(numbers)))
            total = 40 if not parts else 10
            text = f"{len(set(numbers))}/{total}{' + done' if 'done' in got else ''}"
            parts.append(text + ("" if once else " (out of order/twice)"))
        elif case == "e":
            parts.append(", ".join(t.replace("\n", " ")[:20] for _, t in outputs(cell)) or "none")
        else:
            outs = []
            for o in cell["outputs"]:
                if o["sliders"]:
                    outs.append(f"slider drawn at {o['readout']}")
                elif o["marks"]:
                    outs.append("HTML drawn")
                else:
                    outs.append(f"text {o['text'].strip()[:40]!r}")
            parts.append(", ".join(outs) or "none")
    return "; ".join(parts)


def read_page(page: Any, case: str, at_end: bool, settle: float) -> Shown:
    """What the page shows, once it is whole or ``settle`` s passed (a window, no verdict)."""
    try:
        return wait_page(page, "whole", lambda s: page_whole(case, s, at_end), settle)
    except AssertionError:
        return cells(page)


# --- one case ----------------------------------------------------------------------------------


def sources(case: str, nb: Notebook) -> list[str]:
    if case == "e":
        return [rich_cell(nb.holds())]
    if case == "g":
        return [widget_cell(nb.holds())]
    if case == "f":
        return [
            counting_cell(nb.holds(0)),
            counting_cell(nb.holds(1), "second", n=10, at=()),
            counting_cell(nb.holds(2), "third", n=10, at=()),
        ]
    return [counting_cell(nb.holds())]


def step5(case: str) -> Callable[[Shown], bool]:
    if case == "e":
        return shows_line(0, "frame 5")
    if case == "g":
        return lambda s: bool(s) and any(o["sliders"] for o in s[0]["outputs"])
    return shows_line(0, "line 5")


def leave_and_come_back(case: str, nb: Notebook, context: Any, page: Any, holds: Holds) -> Any:
    """The tab leaves at hold 1; the cell goes on to hold 2; returns the page to look at."""
    lab = nb.lab

    def connections() -> int:
        kernel = lab.api("GET", "api/sessions")[0]["kernel"]
        return lab.kernel_model(kernel["id"])["connections"]

    if case in "aefg":
        page.reload(wait_until="commit")
    elif case == "b":
        page.close()
        closed_at = time.monotonic()
    elif case == "c":
        second = nb.open(context, tab=1)
        wait_page(second, "the second tab shows line 5", shows_line(0, "line 5"), 60)
        page.close()
        page = second
    else:  # d
        context.set_offline(True)
        page.evaluate(f"() => {{ {KERNEL_JS}.reconnect().catch(() => null); }}")
        wait_for(lambda: connections() == 0, HANG, what="the websocket cut", page=page)
    holds.release(1)
    holds.wait_held(2)
    if case == "b":
        time.sleep(max(0.0, 8 - (time.monotonic() - closed_at)))  # the case: reopen after 8 s
        page = nb.open(context)
    elif case == "d":
        context.set_offline(False)
        page.evaluate(f"() => {{ {KERNEL_JS}.reconnect().catch(() => null); }}")
        wait_for(lambda: connections() == 1, HANG, what="the websocket back", page=page)
    return page


def run_case(browser: Any, side: str, case: str, venv: Path, settle: float) -> Result:
    result = Result(side, case, False, "", "", False, "", "", False, False)
    with make_server(side, venv, case) as lab:
        quiet_lab_settings(lab)
        nb = Notebook(lab, f"{case}-{side}")
        write_notebook(nb.path, sources(case, nb), EXT if side == "ours" else "python3")
        all_holds = [nb.holds(i) for i in range(3 if case == "f" else 1)]
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        try:
            page = context.new_page()
            nb.run_all(page)
            try:
                wait_page(page, "step 5", step5(case), 60)
                result.step5_shown = True
            except AssertionError:
                pass
            all_holds[0].wait_held(1, page)
            kernel_id = lab.api("GET", "api/sessions")[0]["kernel"]["id"]
            if case == "s":  # no tab while the cell runs: nothing to see mid-cell
                page.close()
                result.mid, result.mid_whole = "(no tab)", True
            else:
                page = leave_and_come_back(case, nb, context, page, all_holds[0])
                shown = read_page(page, case, False, settle)
                result.mid = describe(case, shown)
                result.mid_whole = page_whole(case, shown, False)
                result.mid_prompt = " ".join(c["prompt"] or "-" for c in shown)
            for holds in all_holds:
                holds.release_all()
            for holds in all_holds:
                holds.wait_ended()
            wait_for(
                lambda: lab.kernel_model(kernel_id)["execution_state"] == "idle",
                HANG,
                what="the kernel idle (server)",
            )
            if case == "s":  # reopened once the file has the outputs, or after --settle s
                with contextlib.suppress(TimeoutError):
                    wait_for(lambda: file_ok(nb.path, case), settle, what="the file written")
                page = nb.open(context)
            shown = read_page(page, case, True, settle)
            result.end, result.end_whole = describe(case, shown), page_whole(case, shown, True)
            result.end_prompt = " ".join(c["prompt"] or "-" for c in shown)
            save(page)
            try:
                wait_for(lambda: file_ok(nb.path, case), settle, what="the file saved", page=page)
                result.file_whole = True
            except TimeoutError:
                pass
        except Exception as exc:  # one case's failure is a row, not the end
            result.error = f"{type(exc).__name__}: {str(exc)[:200]}"
        finally:
            for holds in all_holds:
                holds.release_all()
            context.close()
    return result


# --- the runner ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cases", default=ALL_CASES, help="the cases, letters a-g (default all; --quick: a)"
    )
    parser.add_argument("--sides", default="ours,nbmodel", help="ours, nbmodel or both")
    parser.add_argument(
        "--venv",
        type=Path,
        default=ROOT / "build" / "nbmodel-venv",
        help="the venv with jupyter-server-nbmodel (default build/nbmodel-venv)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=20,
        help="seconds each read waits for the whole state before it reads",
    )


def run(args: argparse.Namespace) -> dict[str, Any] | None:
    why = missing_requirement(("playwright", "jupyterlab"))
    if why:
        print(f"outputs_nbmodel: cannot run: {why}", file=sys.stderr)
        raise SystemExit(2)  # a run that measured nothing must not look like one that did
    sides = args.sides.split(",")
    if "nbmodel" in sides and not (args.venv / "bin" / "python").exists():
        print(
            f"outputs_nbmodel: no venv at {args.venv} (see --help for how to make one)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    cases = "a" if args.quick and args.cases == ALL_CASES else args.cases.replace(",", "")
    results: list[Result] = []
    with chromium() as browser:
        for _ in range(args.trials):
            for case in cases:
                for side in sides:
                    started = time.perf_counter()
                    result = run_case(browser, side, case, args.venv, args.settle)
                    results.append(result)
                    print(
                        f"  {side:8} ({case}) {time.perf_counter() - started:.0f} s {result}",
                        flush=True,
                    )
    print()
    rows = [
        [
            f"({r.case}) {CASES[r.case]}",
            r.side,
            "yes" if r.step5_shown else "no",
            r.mid,
            r.mid_prompt,
            r.end,
            r.end_prompt,
            "yes" if r.file_whole else "no",
            ("**yes**" if r.whole else "no") + (f" ({r.error})" if r.error else ""),
        ]
        for r in results
    ]
    print_table(
        [
            "case",
            "side",
            "step 5 shown before leaving",
            "mid-cell, tab back",
            "prompt",
            "after the end",
            "prompt",
            "file after save",
            "whole",
        ],
        rows,
        markdown=True,
    )
    return {"results": [asdict(r) | {"whole": r.whole} for r in results]}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
