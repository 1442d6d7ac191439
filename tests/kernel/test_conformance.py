"""jupyter_kernel_test's conformance suite against the ``python3-ext`` kernelspec.

Run three times: as jupyter_kernel_test starts kernels (plain TCP), with CurveZMQ required,
and with CurveZMQ and ``--no-answer-while-busy`` (the stock-behaviour switch of PROTOCOL.md
section 5: the suite must pass in both modes). The history "range" check is left out: stock
ipykernel fails it too (an IPython behaviour). ``execute_helper`` is the suite's, with one
change: it waits for each IOPub message up to the suite's own ``TIMEOUT``, not 0.1 s, as a
loaded machine can take longer than that between the reply and the cell's last message.
"""

from __future__ import annotations

from typing import Any

import jupyter_kernel_test
from jupyter_kernel_test.msgspec_v5 import validate_message  # type: ignore[import-untyped]  # ships no types

from harness.cells import evaluate
from harness.kernels import EXT_KERNEL, new_client, start_kernel


class ExtKernelConformance(jupyter_kernel_test.KernelTests):  # type: ignore[misc]  # jupyter_kernel_test ships no types
    kernel_name = EXT_KERNEL
    language_name = "python"
    file_extension = ".py"

    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"
    completion_samples = [{"text": "zi", "matches": {"zip"}}]
    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n\n"]
    incomplete_code_samples = ["print('''hello", "def f(x):\n  x*2"]
    invalid_code_samples = ["import = 7q"]
    code_page_something = "zip?"
    code_generate_error = "raise"
    code_execute_result = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n*n for n in range(1, 4)]", "result": "[1, 4, 9]"},
    ]
    code_display_data = [
        {
            "code": "from IPython.display import HTML, display; display(HTML('<b>test</b>'))",
            "mime": "text/html",
        },
        {
            "code": "from IPython.display import Math, display; display(Math('\\\\frac{1}{2}'))",
            "mime": "text/latex",
        },
    ]
    code_history_pattern = "1?2*"
    supported_history_operations = ("tail", "search")
    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output; clear_output()"

    def execute_helper(
        self,
        code: str,
        timeout: int = jupyter_kernel_test.TIMEOUT,
        silent: bool = False,
        store_history: bool = True,
        stop_on_error: bool = True,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The reply, then the cell's IOPub up to its idle, each message checked as upstream
        does; the wait for each one is ``timeout`` (upstream: 0.1 s, a verdict on speed)."""
        msg_id = self.kc.execute(
            code=code, silent=silent, store_history=store_history, stop_on_error=stop_on_error
        )
        reply = self.get_non_kernel_info_reply(timeout=timeout)
        validate_message(reply, "execute_reply", msg_id)
        busy = self.kc.get_iopub_msg(timeout=timeout)
        validate_message(busy, "status", msg_id)
        self.assertEqual(busy["content"]["execution_state"], "busy")
        outputs: list[dict[str, Any]] = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            validate_message(msg, msg["msg_type"], msg_id)
            if msg["msg_type"] == "status":
                self.assertEqual(msg["content"]["execution_state"], "idle")
                return reply, outputs
            if msg["msg_type"] == "execute_input":
                self.assertEqual(msg["content"]["code"], code)
            else:
                outputs.append(msg)


class ExtKernelConformanceCurve(ExtKernelConformance):
    """The same suite with every socket encrypted (CurveZMQ required)."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.km = start_kernel(EXT_KERNEL)
        cls.kc = new_client(cls.km)


class ExtKernelConformanceNoAnswerWhileBusy(ExtKernelConformance):
    """The same suite, CurveZMQ required, on a kernel started with --no-answer-while-busy."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.km = start_kernel(EXT_KERNEL, extra_arguments=["--no-answer-while-busy"])
        cls.kc = new_client(cls.km)
        # The flag reached the kernel (a typo would be a warning and a default-mode run).
        assert evaluate(cls.kc, "get_ipython().kernel.answer_while_busy") is False


class ExtKernelIopubWelcome(jupyter_kernel_test.IopubWelcomeTests):  # type: ignore[misc]  # jupyter_kernel_test ships no types
    kernel_name = EXT_KERNEL
    support_iopub_welcome = True
