"""jupyter_kernel_test's conformance suite against the ``python3-ext`` kernelspec.

Run three times: as jupyter_kernel_test starts kernels (plain TCP), with CurveZMQ required,
and with CurveZMQ and ``--no-answer-while-busy`` (the stock-behaviour switch of PROTOCOL.md
section 5: the suite must pass in both modes). The history "range" check is left out: stock
ipykernel fails it too (an IPython behaviour).
"""

from __future__ import annotations

import jupyter_kernel_test

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
