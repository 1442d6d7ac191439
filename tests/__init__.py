"""ipykernel_ext's tests: real kernels, real ZMQ, real servers and browsers (CONTRIBUTING.md).

A package, as ipykernel's. What the tests share with the benchmarks (kernels, servers,
browsers, bursts, links) is the checkout's ``harness`` package (pytest's ``pythonpath``); what
only tests use stays here. Nothing outside tests/ imports ``tests``.
"""
