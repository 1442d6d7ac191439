"""``python -m ipykernel_ext``: start the kernel, or run ``install``."""

import sys
from pathlib import Path

#: What ``python -m ipykernel_ext demo`` (once a subcommand) says now. Without it the
#: word would reach stock's app as a file to run, and a kernel would start and wait.
DEMO_MOVED = (
    "python -m ipykernel_ext: error: 'demo' is no longer part of the package; "
    "run `python -m benchmarks demo` from a checkout of ipykernel_ext"
)

if __name__ == "__main__":
    if sys.argv[1:2] == ["demo"]:
        print(DEMO_MOVED, file=sys.stderr)
        sys.exit(2)

    # As ipykernel_launcher does: while the kernel loads, the working directory must not
    # shadow installed modules (a notebook folder with a `zmq.py` would break the kernel).
    # InteractiveShellApp.init_path() puts it back for user code.
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]

    from ipykernel_ext.kernel.kernelapp import ExtKernelApp

    ExtKernelApp.launch_instance()
