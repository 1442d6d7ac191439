"""ipykernel_ext's tests: real kernels, real ZMQ, real servers and browsers (CONTRIBUTING.md).

A package, as ipykernel's: the shared parts (``helpers``, ``bursts``, ``server_utils``,
``browser_utils``) are imported relatively by the tests and as ``tests.…`` by the benchmarks.
"""
