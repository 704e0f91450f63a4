"""Runs Python code in a fresh interpreter that imports this checkout's tigon (what a once-per-process behaviour or an
import failure needs)."""

import os
import subprocess
import sys
from pathlib import Path

PYTHON_DIR = str(Path(__file__).resolve().parents[2] / "python")


def run_python(code: str) -> str:
    """stdout of `python -c code`; raises CalledProcessError (with stderr) when it fails."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PYTHON_DIR, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
