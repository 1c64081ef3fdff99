"""`simforcing demo --quick` end to end on CPU: the report and results files are complete.

The numbers' ordering belongs to the full demo (README); here only completeness is checked.
"""

import json

import pytest

from simforcing.cli import main


@pytest.mark.slow
def test_demo_quick_writes_a_complete_report(tmp_path):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    for base in ("copy-first", "vae-recon"):
        for key in ("psnr", "ssim", "psnr_arm"):
            assert isinstance(res["baselines"][base][key], float), (base, key)
        for key in ("lpips", "fid", "fvd"):  # no weights configured: null with a reason, never a number
            assert res["baselines"][base][key] is None and res["baselines"][base][f"{key}_reason"]
    for method in ("sft", "simforcing"):
        r = res["methods"][method][str(42)]
        assert isinstance(r["psnr"], float) and isinstance(r["ssim"], float) and r["latency_s"] is not None
        assert (out / method / "loss_curves.png").exists() and (out / method / "metrics.jsonl").exists()
        assert list((out / "videos" / method).glob("*.gif")) and list((out / "videos" / method).glob("*.mp4"))
    assert (out / "stage1" / "loss_curves.png").exists()
    summary = res["summary"]
    assert summary["paired"]["num_seeds"] == 1 and summary["paired"]["psnr_diff_mean"] is not None
    assert set(res["wall_time_s"]) >= {"total", "stage 1: simulation world model", "sweep steps"}
    assert len(res["commands"]) >= 6 and all(c.startswith("simforcing ") for c in res["commands"].values())
    sweep = res["sweep_steps"]
    assert sweep["table_md"] and (out / "sweep_steps").exists()
    md = (out / "report.md").read_text()
    for needle in ("copy first frame", "VAE reconstruction", "| sft |", "| simforcing |", "Loss curves",
                   "Sweep", "Wall time", "```bash"):
        assert needle in md, needle
    html = (out / "report.html").read_text()
    assert html.count("data:image/") >= 4  # loss curves, videos and heatmap inline
    # a second run reuses the generated data and the finished runs
    stamp = (out / "data" / "meta" / "info.json").stat().st_mtime_ns
    assert main(["demo", "--quick", "--out", str(out)]) == 0
    assert (out / "data" / "meta" / "info.json").stat().st_mtime_ns == stamp
