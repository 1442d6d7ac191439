"""The cell *code* the outputs browser tests and the nbmodel benchmark put in a notebook, and
the marker files that pace it (running a cell from a client is :mod:`harness.cells`; these cells
run in a page).

A cell prints at its own pace (short sleeps) but stops at *holds*: after a given line it
touches ``<name>.held<n>`` beside the notebook and waits until the test touches
``<name>.go<n>``; when it ends it touches ``<name>.ended``. So "the tab left after line 5"
and "the page is checked while the cell still runs" are decided by order, never by time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.browser import wait_for

#: Seconds between two printed lines: each line its own message, as a real cell's, but no
#: verdict depends on the pace (the holds order every step the tests look at). It was 0.25 s,
#: which cost the browser tests about 9 s a cell of sleeping and proved nothing more.
PACE = 0.02
#: Hang guard of a hold inside a cell: it goes on by itself after this long.
HOLD_GUARD = 600
#: Hang guard of every wait on what the page or the file shows (not a speed bar).
HANG = 120


# --- holds ---------------------------------------------------------------------------------


@dataclass
class Holds:
    """The marker files of one cell (``<folder>/<name>.held<n>``, ``.go<n>``, ``.ended``)."""

    folder: Path
    name: str

    def path(self, suffix: str) -> Path:
        return self.folder / f"{self.name}.{suffix}"

    def wait_held(self, n: int, page: Any = None) -> None:
        wait_for(self.path(f"held{n}").exists, HANG, what=f"{self.name} at hold {n}", page=page)

    def release(self, n: int) -> None:
        self.path(f"go{n}").touch()

    def release_all(self, holds: int = 2) -> None:
        for n in range(1, holds + 1):
            self.release(n)

    def ended(self) -> bool:
        return self.path("ended").exists()

    def wait_ended(self, page: Any = None) -> None:
        wait_for(self.ended, HANG, what=f"{self.name} ended", page=page)

    def prelude(self) -> str:
        """Source defining ``_hold(n)`` and ``_ended()`` for a cell using these files."""
        return f"""\
import pathlib, time
_flags = pathlib.Path({str(self.folder)!r})
def _hold(n):
    (_flags / f"{self.name}.held{{n}}").touch()
    end = time.monotonic() + {HOLD_GUARD}
    while not (_flags / f"{self.name}.go{{n}}").exists() and time.monotonic() < end:
        time.sleep(0.05)
def _ended():
    (_flags / "{self.name}.ended").touch()
"""


def counting_cell(
    holds: Holds, word: str = "line", n: int = 40, at: tuple[int, ...] = (5, 29)
) -> str:
    """Print ``<word> 0`` .. ``<word> n-1`` then ``done``; hold k+1 right after line ``at[k]``."""
    return f"""{holds.prelude()}
for i in range({n}):
    print(f"{word} {{i}}", flush=True)
    if i in {at!r}:
        _hold({at!r}.index(i) + 1)
    else:
        time.sleep({PACE})
print("done", flush=True)
_ended()"""


def rich_cell(holds: Holds) -> str:
    """``clear_output(wait=True)`` frames (the tab leaves at frame 5), then one display
    updated by its ``display_id`` and a ``\\r`` progress line (hold 2 at step 29)."""
    return f"""{holds.prelude()}
import sys
from IPython.display import Pretty, clear_output, display
for i in range(20):
    clear_output(wait=True)
    print(f"frame {{i}}", flush=True)
    if i == 5:
        _hold(1)
    else:
        time.sleep({PACE})
handle = display(Pretty("status 20"), display_id=True)
for i in range(20, 40):
    handle.update(Pretty(f"status {{i}}"))
    sys.stdout.write(f"\\rprogress {{i}}")
    sys.stdout.flush()
    if i == 29:
        _hold(2)
    else:
        time.sleep({PACE})
print(flush=True)
_ended()"""


def widget_cell(holds: Holds) -> str:
    """A slider moved from 0 to 40 (the tab leaves at 5); HTML displayed once it left."""
    return f"""{holds.prelude()}
import ipywidgets as widgets
from IPython.display import HTML, display
slider = widgets.IntSlider(value=0, max=100)
display(slider)
for i in range(1, 41):
    slider.value = i
    if i == 5:
        _hold(1)
        display(HTML('<b class="outputs-mark">displayed after the tab left</b>'))
    elif i == 29:
        _hold(2)
    else:
        time.sleep({PACE})
_ended()"""


def input_cell(holds: Holds, n: int = 10, at: tuple[int, ...] = (2, 7)) -> str:
    """Print ``before``, ask ``input("name?")``, then print ``hello <answer> 0`` ..
    ``hello <answer> n-1`` and ``done``; hold k+1 right after line ``at[k]``."""
    return f"""{holds.prelude()}
print("before", flush=True)
name = input("name?")
for i in range({n}):
    print(f"hello {{name}} {{i}}", flush=True)
    if i in {at!r}:
        _hold({at!r}.index(i) + 1)
    else:
        time.sleep({PACE})
print("done", flush=True)
_ended()"""
