"""The kernel side (ipykernel_ext.kernel, the kernelspec, the launchers).

Real kernels through jupyter_client.KernelManager, no server. Marker ``kernel``.
"""
