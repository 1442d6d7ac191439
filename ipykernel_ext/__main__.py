"""``python -m ipykernel_ext``: start the kernel, or run ``install`` / ``demo``."""

import sys
from pathlib import Path

if __name__ == "__main__":
    # As ipykernel_launcher does: while the kernel loads, the working directory must not
    # shadow installed modules (a notebook folder with a `zmq.py` would break the kernel).
    # InteractiveShellApp.init_path() puts it back for user code.
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]

    from ipykernel_ext.kernel.kernelapp import ExtKernelApp

    ExtKernelApp.launch_instance()
