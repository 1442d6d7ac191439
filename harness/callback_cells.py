"""The cell *code* the widget-callback tests share (kernel and browser layers, issue 51).

A callback that must know where the kernel's main thread is (running jupyter-ui-poll's
``terminate`` after an interrupt, waiting for a request) looks at that thread's frames:
:data:`CALLBACK_PRELUDE` defines the counters each test reads back (``started``,
``finished``, the most callbacks that ran at once) and ``_main_in(name)``.
"""

from __future__ import annotations

#: Counters and the main thread's probe, for the top of a cell that defines a callback.
CALLBACK_PRELUDE = """\
import sys, threading, time as _time, ipywidgets as _w
started, finished, active, most = [], [], [0], [0]
_main = threading.main_thread()

def _main_in(name):
    frame = sys._current_frames().get(_main.ident)
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False
"""
