"""ipykernel_ext: a drop-in IPython kernel for Jupyter.

Its IOPub never loses a message silently, it echoes the comm messages clients send
(``comm_echo``) and it answers every widget state in one control-channel reply.
The wire contract is in PROTOCOL.md; the kernel is started with ``python -m ipykernel_ext``.
"""

__version__ = "0.1.0"

#: The kernelspec name ``pip install`` makes available.
KERNEL_NAME = "python3-ext"

#: The program as users type it; --help and usage errors name it (not ``__main__.py``).
PROG = "python -m ipykernel_ext"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The server extension that installing the package enables (``jupyter_server_config.d/
    ipykernel_ext.json``): :mod:`ipykernel_ext.server.extension`. Named, not imported, so the
    kernel never loads jupyter_server."""
    return [{"module": "ipykernel_ext.server.extension"}]
