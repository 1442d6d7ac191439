"""The lists the docs keep are held against the tree, and every file the docs name exists.

* docs/ARCHITECTURE.md, the map: every room (``kernel/iopub/``) and every module
  (``kernel/iopub/socket.py``) of ``ipykernel_ext``, by its path under the package, in
  backticks (an ``__init__.py`` is its room);
* ``harness/``: every module and subpackage of a harness package is named in that package's
  ``__init__`` docstring (``:mod:`.polling```, ````pause_extension````); CONTRIBUTING.md points
  there instead of keeping a list of its own;
* every file path named in docs/*.md, README.md, CONTRIBUTING.md and in the docstrings and
  comments of tests/ exists in the checkout: a path with a folder is matched by its end
  (``kernel/iopub/socket.py``, ``tests/package/test_layering.py``,
  ``../ipykernel_ext/protocol.py``), a bare name anywhere in the tree; other projects' files
  (:data:`FOREIGN`) and placeholders (``benchmarks/NAME.py``) are not ours to find.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "ipykernel_ext"
HARNESS_DIR = ROOT / "harness"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Not part of the checkout's tree (what a test or a build makes, virtualenvs).
NOT_TREE = {".git", "build", "node_modules", "__pycache__"}

#: Files of other projects, or of a user, that the docs and tests name.
FOREIGN = {
    # a user's or operator's config files
    "jupyter_kernel_config.py",
    "ipython_kernel_config.py",
    "jupyter_server_config.py",
    "voila.py",
    # gateway_provisioners' kernel launcher
    "launch_ipykernel.py",
    # the user's module that must not shadow pyzmq (tests/kernel/test_kernel.py)
    "zmq.py",
    # ipykernel's own test suite (tests/upstream, PROTOCOL.md's upstream tests)
    "tests/utils.py",
    "utils.py",
    "test_debugger.py",
    "test_subshells.py",
    "test_ipkernel_direct.py",
    "test_kernel_direct.py",
    "test_matplotlib_eventloops.py",
}
#: A file path as prose writes it: folders, a name, and one of these suffixes (a glob such as
#: ``*_direct.py`` names files of another project, not one of ours).
FILE_PATH = re.compile(r"(?<![\w./*-])((?:\.{1,2}/)*(?:[\w.-]+/)*[\w-]+\.(?:py|md|toml|sh))\b")


def test_the_map_names_every_room_and_module() -> None:
    text = ARCHITECTURE.read_text()
    missing = [
        name
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if "__pycache__" not in path.parts
        for name in [
            f"{path.parent.relative_to(PACKAGE_DIR).as_posix()}/"
            if path.name == "__init__.py"
            else path.relative_to(PACKAGE_DIR).as_posix()
        ]
        if name != "./" and f"`{name}`" not in text
    ]
    assert not missing, f"docs/ARCHITECTURE.md does not name {missing} (paths under ipykernel_ext/)"


def test_each_harness_package_lists_its_modules() -> None:
    missing = []
    for init in sorted(HARNESS_DIR.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for child in sorted(init.parent.iterdir()):
            is_module = child.suffix == ".py" and child.name != "__init__.py"
            if not (is_module or (child / "__init__.py").exists()):
                continue
            if not re.search(rf"`\.?{re.escape(child.stem)}`", doc):
                missing.append(child.relative_to(ROOT).as_posix())
    assert not missing, f"not in their package's __init__ docstring: {missing}"


def tree() -> tuple[list[str], set[str]]:
    """Every file of the checkout (paths from its root), and their names."""
    files = [
        path.relative_to(ROOT).as_posix()
        for path in ROOT.rglob("*")
        if path.is_file()
        and not any(part in NOT_TREE or part.startswith(".venv") for part in path.parts)
    ]
    return files, {f.rsplit("/", 1)[-1] for f in files}


def prose_of_tests() -> Iterator[tuple[str, str]]:
    """``(file:line, text)`` of every comment and docstring under tests/."""
    for path in sorted((ROOT / "tests").rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(ROOT).as_posix()
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield f"{where}:{token.start[0]}", token.string
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    yield f"{where}:{getattr(node, 'lineno', 1)}", doc


def named_paths(text: str) -> Iterator[str]:
    for match in FILE_PATH.finditer(text):
        path = re.sub(r"^(?:\.{1,2}/)+", "", match.group(1))
        if path not in FOREIGN and "NAME" not in path:
            yield path


def test_every_file_the_docs_and_tests_name_exists() -> None:
    files, names = tree()

    def exists(path: str) -> bool:
        if "/" not in path:
            return path in names
        return any(f == path or f.endswith(f"/{path}") for f in files)

    texts = [(doc.relative_to(ROOT).as_posix(), doc.read_text()) for doc in DOCS]
    missing = [
        f"{where}: {path}"
        for where, text in [*texts, *prose_of_tests()]
        for path in named_paths(text)
        if not exists(path)
    ]
    assert not missing, "\n".join(["files named that do not exist:", *missing])


def test_the_checks_catch_a_missing_file() -> None:
    """The reader finds the paths prose names (with folders, ``../``, bare), leaving out other
    projects' files and placeholders."""
    prose = (
        "`kernel/iopub/socket.py`, (see ../ipykernel_ext/protocol.py), iopub_notice.py, "
        "jupyter_server_config.py, benchmarks/NAME.py, docs/PROTOCOL.md."
    )
    assert list(named_paths(prose)) == [
        "kernel/iopub/socket.py",
        "ipykernel_ext/protocol.py",
        "iopub_notice.py",
        "docs/PROTOCOL.md",
    ]
