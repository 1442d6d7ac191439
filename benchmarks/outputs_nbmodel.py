"""Issue 23's browser cases beside jupyter-server-nbmodel 0.2.9: what a tab shows when back.

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

Per case, a fresh server and notebook; the page runs the cell (``notebook:run-all-cells``, as
a user's Run All), leaves once the cell has shown its 6th step (``reload``: the page reloads;
``reopen``: the page closes and a new one opens 8 s later), then waits for the server to
report the kernel idle and reads what the page shows (up to ``--settle`` s more for the cell's
final state to arrive). Cases: ``lines`` (40 lines every 0.5 s, then ``done``), ``display``
(one ``display_id`` updated 20 times), ``slider`` (an ipywidgets IntSlider moved to 20).
Reported, not judged: the lines shown, the final value, whether a slider is drawn, the prompt.

    python -m benchmarks outputs_nbmodel              # every case, both sides
    python -m benchmarks outputs_nbmodel --quick      # the reload of the lines cell only
    python -m benchmarks outputs_nbmodel --cases lines:reload,lines:reopen --sides nbmodel
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.trials import EXT, ROOT, print_table
from harness.browser import (
    LAB_ARGS,
    LAB_STATUS_JS,
    chromium,
    missing_requirement,
    quiet_lab_settings,
    wait_for,
    write_notebook,
)
from harness.server import JupyterServer

TRIALS, QUICK_TRIALS = 1, 1
SHARED = "ipykernel_ext.server.SharedChannelsConnection"
NOTEBOOK = "bench.ipynb"
HANG = 180

#: case -> (cell source, the text that says the tab should leave now)
CELLS = {
    "lines": (
        "import time\nfor i in range(40):\n    print(f'line {i}', flush=True)\n"
        "    time.sleep(0.5)\nprint('done')",
        "line 5",
    ),
    "display": (
        "import time\nh = display('value 0', display_id=True)\nfor i in range(1, 21):\n"
        "    time.sleep(0.5)\n    h.update(f'value {i}')",
        "value 6",
    ),
    "slider": (
        "import time, ipywidgets as w\ns = w.IntSlider(max=100)\ndisplay(s)\n"
        "for i in range(1, 21):\n    time.sleep(0.5)\n    s.value = i\n"
        "print('moved', flush=True)",
        "__slider__",  # leave once the slider is drawn and reads 6 or more
    ),
}
ALL_CASES = [f"{c}:{how}" for c in CELLS for how in ("reload", "reopen")]

#: The notebook's code cells as the page shows them.
CELLS_JS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell')).map(c => {
    const prompt = c.querySelector('.jp-InputArea-prompt');
    const outs = Array.from(c.querySelectorAll('.jp-OutputArea-output'));
    const readout = c.querySelector('.widget-readout');
    return {
        prompt: prompt ? prompt.innerText.trim() : '',
        text: outs.map(o => o.innerText).join('\\n'),
        sliders: c.querySelectorAll('.widget-slider').length,
        readout: readout ? (readout.innerText || readout.value || '').trim() : '',
    };
})"""


@dataclass
class Shown:
    side: str
    case: str
    lines: int  # "line N" lines shown (lines case), in order and once each
    in_order_once: bool
    final: str  # "done" / the display's value / the slider's readout, as shown
    slider_drawn: bool
    plain_text: str  # the output text when no widget is drawn (the slider case)
    prompt: str
    step6_shown: bool  # the running tab showed step 6 before it left (else it left at 60 s)
    seconds_to_final: float | None  # from the server's idle to the final state on the page


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


def make_server(side: str, venv: Path) -> JupyterServer:
    args = [*LAB_ARGS]
    if side == "ours":
        return JupyterServer(
            app="lab", encryption=True,
            extra_args=[*args, f"--ServerApp.kernel_websocket_connection_class={SHARED}"],
        )
    return NbmodelLab(venv / "bin" / "python", app="lab", encryption=False, extra_args=args)


def page_cells(page: Any) -> list[dict[str, Any]]:
    from playwright.sync_api import Error as PlaywrightError

    try:
        return page.evaluate(CELLS_JS)
    except PlaywrightError:  # the page is navigating
        return []


def final_of(case: str, cell: dict[str, Any]) -> str:
    text = cell["text"]
    if case == "lines":
        return "done" if re.search(r"^done$", text, re.M) else ""
    if case == "display":
        values = re.findall(r"value (\d+)", text)
        return f"value {values[-1]}" if values else ""
    return cell["readout"] if cell["sliders"] else ""


def ready_to_leave(case: str, cell: dict[str, Any]) -> bool:
    marker = CELLS[case][1]
    if case == "slider":
        return bool(cell["sliders"]) and cell["readout"].isdigit() and int(cell["readout"]) >= 6
    if case == "display":
        values = re.findall(r"value (\d+)", cell["text"])
        return bool(values) and int(values[-1]) >= 6
    return marker in cell["text"].splitlines()


def is_final(case: str, cell: dict[str, Any]) -> bool:
    final = final_of(case, cell)
    return {"lines": final == "done", "display": final == "value 20",
            "slider": final == "20"}[case] and not cell["prompt"].startswith("[*")


def run_case(browser: Any, side: str, case: str, how: str, venv: Path, settle: float) -> Shown:
    cell_name = case
    with make_server(side, venv) as lab:
        quiet_lab_settings(lab)
        kernel = EXT if side == "ours" else "python3"
        write_notebook(lab.root_dir / NOTEBOOK, [CELLS[cell_name][0]], kernel_name=kernel)
        context = browser.new_context()
        try:
            page = context.new_page()
            url = lab.http_url(f"lab/workspaces/{side}/tree/{NOTEBOOK}?token={lab.token}")
            page.goto(url)
            page.wait_for_function(
                f"() => ({LAB_STATUS_JS})().toLowerCase() === 'idle'", timeout=HANG * 1000)
            page.evaluate(
                "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            try:  # the cell takes 10-20 s: a page that never shows step 6 leaves after 60
                wait_for(lambda: any(ready_to_leave(cell_name, c) for c in page_cells(page)),
                         60, what=f"{side} {case}: step 6 shown", page=page)
                step6 = True
            except TimeoutError:
                step6 = False
            if how == "reload":
                page.reload()
            else:
                page.close()
                time.sleep(8)
                page = context.new_page()
                page.goto(url)
            kernel_id = wait_for(lambda: lab.api("GET", "api/kernels"), HANG,
                                 what="a kernel", page=page)[0]["id"]
            wait_for(lambda: lab.kernel_model(kernel_id)["execution_state"] == "idle",
                     HANG, what="the cell ended (server)", page=page)
            idle_at = time.perf_counter()
            shown: dict[str, Any] = {}
            # A measuring window, not a verdict: what the page shows once the cell ended.
            while True:
                cells = page_cells(page)
                if cells:
                    shown = cells[0]
                    if is_final(cell_name, shown):
                        break
                if time.perf_counter() - idle_at > settle:
                    break
                page.wait_for_timeout(250)
            done_at = time.perf_counter()
        finally:
            context.close()
    shown = shown or {"prompt": "", "text": "", "sliders": 0, "readout": ""}
    numbers = [int(n) for n in re.findall(r"^line (\d+)$", shown["text"], re.M)]
    return Shown(
        side=side, case=f"{case}:{how}", lines=len(set(numbers)),
        in_order_once=numbers == sorted(set(numbers)),
        final=final_of(cell_name, shown), slider_drawn=bool(shown["sliders"]),
        plain_text=shown["text"][:60].replace("\n", " ") if case == "slider" else "",
        prompt=shown["prompt"], step6_shown=step6,
        seconds_to_final=done_at - idle_at if is_final(cell_name, shown) else None,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cases", default=",".join(ALL_CASES),
                        help=f"comma-separated CELL:HOW (default all: {','.join(ALL_CASES)}; "
                             "--quick: lines:reload)")
    parser.add_argument("--sides", default="ours,nbmodel", help="ours, nbmodel or both")
    parser.add_argument("--venv", type=Path, default=ROOT / "build" / "nbmodel-venv",
                        help="the venv with jupyter-server-nbmodel (default build/nbmodel-venv)")
    parser.add_argument("--settle", type=float, default=20,
                        help="seconds after the server's idle to wait for the final state")


def run(args: argparse.Namespace) -> dict[str, Any] | None:
    why = missing_requirement(("playwright", "jupyterlab"))
    if why:
        print(f"outputs_nbmodel: cannot run: {why}")
        return None
    sides = args.sides.split(",")
    if "nbmodel" in sides and not (args.venv / "bin" / "python").exists():
        print(f"outputs_nbmodel: no venv at {args.venv} (see --help for how to make one)")
        return None
    cases = ["lines:reload"] if args.quick and args.cases == ",".join(ALL_CASES) else (
        args.cases.split(","))
    results: list[Shown] = []
    with chromium() as browser:
        for _ in range(args.trials):
            for case in cases:
                cell, how = case.split(":")
                for side in sides:
                    shown = run_case(browser, side, cell, how, args.venv, args.settle)
                    results.append(shown)
                    print(f"  {side:8} {case:15} {shown}", flush=True)
    print()
    rows = [[r.case, r.side, "yes" if r.step6_shown else "no",
             r.lines if r.case.startswith("lines") else "",
             "yes" if r.in_order_once else "no", r.final or "-",
             ("drawn" if r.slider_drawn else f"text: {r.plain_text!r}")
             if r.case.startswith("slider") else "",
             r.prompt or "-",
             "-" if r.seconds_to_final is None else f"{r.seconds_to_final:.1f} s"]
            for r in results]
    print_table(["case", "side", "step 6 shown open", "lines shown (of 40)", "in order, once",
                 "final shown", "slider", "prompt", "final after idle"], rows, markdown=True)
    return {"results": [asdict(r) for r in results]}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
