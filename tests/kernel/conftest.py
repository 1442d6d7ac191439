"""Fixtures of the kernel tests: ``kernel``, the client of the module's ``ext_kernel``.

``ext_kernel`` (tests/conftest.py) is module-scoped: the tests of one module share that kernel,
and a test that also needs its ``KernelManager`` (to interrupt it, to start another client)
asks for ``ext_kernel`` itself. A module that needs a kernel of its own defines ``kernel``.
"""

from __future__ import annotations

import pytest
from jupyter_client import BlockingKernelClient, KernelManager


@pytest.fixture
def kernel(ext_kernel: tuple[KernelManager, BlockingKernelClient]) -> BlockingKernelClient:
    """The ready client of the module's ``ext_kernel`` (ipykernel_ext, CurveZMQ required)."""
    return ext_kernel[1]
