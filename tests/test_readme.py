"""The README's Python quick start runs as written (on a tiny run and a tiny synthetic dataset at the paths it names)."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

from test_sample import make_run

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start() -> str:
    text = README.read_text()
    section = text[text.index("## Python quick start"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_python_quick_start_runs_as_written(tmp_path):
    from simforcing.data.synthetic.generate import generate_dataset
    from simforcing.prep.text import finalize_dataset

    generate_dataset(tmp_path / "runs/demo/data_long", num_train=0, num_val=1, num_sim_pool=0, length=17, height=32,
                     width=48, seed=1, progress=False, finish=finalize_dataset)
    make_run(tmp_path / "runs/demo/simforcing", tmp_path / "runs/demo/data_long", tmp_path / "vae")
    code, out = quick_start(), io.StringIO()
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("(9, 32, 48, 3)") and lines[1] == "(17, 32, 48, 3)", lines
