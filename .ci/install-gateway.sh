#!/usr/bin/env bash
# Jupyter Enterprise Gateway for the gateway-mode tests (harness/gateway.py): it pins old
# Jupyter packages (jupyter_server 1.x, jupyter_client 6), so it gets a venv of its own,
# .venv-eg at the checkout's root (the tests look there, or where IPYKERNEL_EXT_EG_VENV says).
# Its kernels run in the project's venv (the kernelspecs the tests make point there).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-eg
.venv-eg/bin/python -m pip install --quiet --upgrade pip
.venv-eg/bin/python -m pip install --quiet 'jupyter-enterprise-gateway==3.3.0'
.venv-eg/bin/jupyter-enterprisegateway --version
