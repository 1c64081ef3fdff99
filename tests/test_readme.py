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


def test_the_demo_tables_are_the_recorded_run():
    """The README's demo tables are render() of the timing.json entry their block names — written from the recorded
    run by `docs/demo_timing/record.py --readme`, so no figure there is copied by hand — and every figure is one."""
    import json

    from simforcing.demo.readme_tables import find_block, render

    found = find_block(README.read_text())
    assert found is not None, "README: the demo-table block's markers are missing"
    label, block = found
    runs = {r["label"]: r for r in json.loads((README.parent / "docs/demo_timing/timing.json").read_text())}
    assert label in runs and "figures" in runs[label], label
    assert block == render(runs[label])
    assert all(isinstance(v, float) for v in runs[label]["figures"].values()), runs[label]["figures"]
    assert "—" not in block


def test_demo_figures_come_from_the_results_file():
    """figures() reads each README number from its place in a demo's results.json (metres shown as centimetres)."""
    from simforcing.demo.readme_tables import figures

    rank = {"all": {"pearson": 0.5}}
    res = {"baselines": {"copy-first": {"psnr": 22.0, "af_pos": 0.1}},
           "summary": {"rows": {"sft": {"psnr": 23.0, "af_pos": 0.09}, "simforcing": {"psnr": 24.0, "af_pos": 0.08}}},
           "fewstep": {"windows": {"psnr": {"student": 23.5}, "af_pos": {"student": 0.085}}},
           "rollouts": {"runs": {"simforcing": {"rows": {"rollout": {"mean": {"psnr": 20.0, "af_pos": 0.15}}}}}},
           "wm_eval": {"agreement": {"ranking": {"sft": {"all": {"pearson": 0.1}}, "simforcing": rank}}}}
    f = figures(res)
    assert f["copy_cm"] == 10.0 and f["simforcing_psnr"] == 24.0 and abs(f["student_cm"] - 8.5) < 1e-9
    assert f["rollout_psnr"] == 20.0 and f["rollout_twin_psnr"] is None and f["pearson_simforcing"] == 0.5
    assert f["pearson_twin"] is None and f["pearson_sft"] == 0.1
