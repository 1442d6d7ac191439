"""plotly's ``FigureWidget`` in a real page: every restyle a loop sends is applied (issue 54).

A ``jupyter lab`` server as installed (``SharedChannelsConnection`` with jupyter_server's
default rates), Debian's Chromium driven by Playwright, JupyterLab 4.6 as it ships, plotly
(anywidget-based) from PyPI, our kernel. The verdicts are what the page's plot holds and the
restyles its plot applied (plotly's own ``plotly_restyle`` event, counted in the page).
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.browser import require_browser, wait_for
from harness.browser_subshell import open_notebook, run_cell
from harness.kernels import EXT_KERNEL
from harness.server import JupyterServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

#: Restyles the loop sends: :data:`N_FULL` under ``--full-size`` (test docstring).
N, N_FULL = 500, 2000

#: Count the restyles the figure in cell ``index`` applies, from now on.
COUNT_JS = """(index) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[index];
  const plot = cell && cell.querySelector('.js-plotly-plot');
  if (!plot || !plot.on || !plot.data) return false;
  window.restyles = 0;
  plot.on('plotly_restyle', () => { window.restyles += 1; });
  return true;
}"""
#: The y data of the figure's first trace in cell ``index``, as the page's plot holds it.
Y_JS = """(index) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[index];
  const plot = cell && cell.querySelector('.js-plotly-plot');
  return plot && plot.data ? Array.from(plot.data[0].y) : null;
}"""


def test_a_figure_widget_applies_every_restyle_of_a_loop(
    lab: JupyterServer, page: Any, full_size: bool
) -> None:
    """A loop sets a trace's data 2000 times (``--full-size``) as fast as it goes (each a
    restyle: three state messages, the command set, reset, and the edit id; 6000 in all, twice
    what the server lets through in a window): the page's plot ends on the kernel's last data
    and applied all 2000 restyles. On main the pacer folded a restyle with its reset whenever
    the tab was behind, and the page never applied it: checked, the page applied 1998 of the
    2000 (plotly's Python side is slow enough that the loop is seldom over the rate here; its
    plot ended on the last data that time, but a lost last restyle leaves it stale). By default
    500 restyles: the page applies each one, in a real plot, through the server's pacer; the
    loss on main was rare enough that only the full size (about 90 s here, in ``.ci/run``'s
    full-size leg) shows it, and the server test that tells it every time is
    tests/server/test_widget_commands_server.py."""
    require_browser(("playwright", "jupyterlab", "plotly", "anywidget"))
    n = N_FULL if full_size else N
    cells = [
        "import plotly.graph_objects as go\n"
        "fig = go.FigureWidget(data=[go.Scatter(y=[0, 0])])\nfig",
        f"for i in range({n}):\n    fig.data[0].y = [i, i + 1]\nprint('done')",
    ]
    open_notebook(page, lab, "lab", "plotly-restyles", cells, EXT_KERNEL, run_all=False)
    run_cell(page, 0)
    wait_for(lambda: page.evaluate(COUNT_JS, 0), 120, what="the figure in the page", page=page)
    run_cell(page, 1)
    wait_for(
        lambda: page.evaluate(Y_JS, 0) == [n - 1, n],
        180,
        what="the kernel's last data in the page's plot",
        page=page,
    )
    assert page.evaluate("() => window.restyles") == n
