"""examples/quickstart.py runs (a tiny random Llama: patch, train, generate), and tigon.transformers without
transformers says what to install."""

import re
import runpy
from pathlib import Path

import pytest
from run_python import run_python

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


def test_quickstart_trains_and_generates(capsys):
    pytest.importorskip("transformers")
    runpy.run_path(str(QUICKSTART), run_name="__main__")
    out = capsys.readouterr().out
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", out)]
    assert len(losses) == 5 and losses[-1] < losses[0], out
    generated = re.search(r"generated: \[(.*)\]", out)
    assert generated and len(generated.group(1).split(",")) == 8, out


def test_import_without_transformers_says_what_to_install():
    code = (
        "import sys; sys.modules['transformers'] = None\n"  # None in sys.modules: import fails as if absent
        "try:\n    import tigon.transformers\nexcept ImportError as e:\n    print(e)\n"
    )
    out = run_python(code)
    assert "pip install 'tigon[hf]'" in out and '".[hf]"' in out, out
