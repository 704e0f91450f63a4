"""The README's Python snippets run as written (on the CPU here; on the GPU where there is one)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_snippets_run():
    pytest.importorskip("transformers")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "no python snippets found in README.md"
    scope: dict = {}
    try:
        for block in blocks:  # one namespace, in order: later snippets use the names earlier ones define
            exec(compile(block, str(README), "exec"), scope)
    finally:
        import tigon.transformers

        tigon.transformers.revert()  # the snippets patch Llama at class level
