"""The README's Python quick start runs as written (on a tiny run and a tiny synthetic dataset at the paths it names)."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

from evalgen import demo_results
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


def test_the_demo_tables_are_the_recorded_run():
    """The README's demo tables are the docs table ``demo`` (``simforcing.docs_tables``): ``readme_tables.render`` of
    the timing.json entry their block names — written from the recorded run by `python -m simforcing.docs_tables
    --write` (or `docs/demo_timing/record.py --readme LABEL`), so no figure there is copied by hand."""
    from simforcing.docs_tables import blocks, render_block

    found = [b for b in blocks(README.read_text()) if b.name == "demo"]
    assert len(found) == 1, "README: the demo table's block (<!-- table demo: ... -->) is missing or twice"
    assert found[0].entry, "README: the demo block must name the timing.json entry it shows"
    assert found[0].text == render_block("demo", "README.md", found[0].entry)


def test_the_readme_quotes_a_run_with_every_figure():
    """The entry the README shows holds every figure its tables print: a run recorded before a figure was kept
    would print "—" in the README."""
    import json

    from simforcing.docs_tables import blocks

    label = next(b.entry for b in blocks(README.read_text()) if b.name == "demo")
    runs = {r["label"]: r for r in json.loads((README.parent / "docs/demo_timing/timing.json").read_text())}
    assert label in runs and "figures" in runs[label], label
    figs = runs[label]["figures"]  # None: a row of `demo --full` only (sft's pool, the evaluator), or undefined
    assert all(isinstance(v, float) or v is None for v in figs.values()), figs
    assert all(isinstance(figs.get(k), float) for k in ("sft_psnr", "simforcing_psnr", "views_simforcing_wrist_psnr",
                                                         "saved_copy_first", "pearson_views_twin")), figs
    block = next(b.text for b in blocks(README.read_text()) if b.name == "demo")
    assert "—" not in block, "README: its demo entry lacks figures the tables print; record a newer `make demo`"


def test_demo_figures_come_from_the_results_file():
    """figures() reads each README number from its place in a demo's results.json (metres shown as centimetres): the
    one-window rows, the student, the rollouts, the harness check and each pool world model's estimate row."""
    from simforcing.demo.readme_tables import figures

    res = demo_results()
    f = figures(res)
    assert f["copy_cm"] == 10.0 and f["simforcing_psnr"] == 24.0 and abs(f["student_cm"] - 8.5) < 1e-9
    assert f["rollout_psnr"] == 20.0 and f["rollout_twin_psnr"] is None and f["pearson_harness"] == 0.97
    assert (f["pearson_simforcing"], f["pearson_simforcing_lo"], f["pearson_simforcing_hi"]) == (0.5, 0.2, 0.7)
    assert f["rho_simforcing"] == 0.3 and f["saved_simforcing"] == 0.1
    assert f["pearson_sft"] is None and f["pearson_evaluator_twin"] is None
