"""``python -m ipykernel_ext``: start the kernel, or run ``install`` / ``demo``."""

import sys

if __name__ == "__main__":
    # Like ipykernel_launcher: the working directory must not shadow installed modules
    # (a notebook folder with a file named `zmq.py` would otherwise break the kernel).
    if sys.path and sys.path[0] == "":
        del sys.path[0]

    from ipykernel_ext.app import ExtKernelApp

    ExtKernelApp.launch_instance()
