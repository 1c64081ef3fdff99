"""`simforcing demo`: the whole paper on the embedded synthetic benchmark, on a laptop CPU.

    synthetic MuJoCo benchmark (generated once, reused) -> demo VAE (fitted once, reused)
    -> stage 1: simulation world model -> stage 2: sft and simforcing (+ value_distill, motion_distill with --full)
       from the same stage-1 checkpoint, the same real data and the same number of steps
    -> evaluate on the held-out real validation pairs, with the copy-first-frame and VAE-reconstruction baselines
    -> a small `sweep steps` -> DIR/report.md, DIR/report.html, DIR/results.json

`--seeds K` repeats stage 2 + evaluation with K seeds and reports the paired difference simforcing − sft (mean and
spread). `--quick` is a smoke test (a few minutes, tiny budgets, numbers meaningless).

Provenance (``simforcing.provenance``): OUT/data, OUT/vae, OUT/stage1 and each stage-2 run record what produced them
(command, sizes, seed, code version, and the records of their inputs). A folder is reused only when its record equals
what this demo run asks for; otherwise it is made again — the dataset is regenerated (atomically replaced), the VAE
refitted, a run folder removed and trained again (only a simforcing run folder or one carrying a demo record; anything
else is refused) — and a line says why. A dataset given with ``--data`` is the user's: used as it is.
"""

from __future__ import annotations

import base64
import copy
import html as _h
import json
import re
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from simforcing.checkpoint import config_hash, is_run_folder
from simforcing.config import STAGE2_METHODS, Config, ConfigError, load_config
from simforcing.data.format import is_dataset
from simforcing.data.synthetic.generate import GENERATOR_VERSION, generate_dataset
from simforcing.evaluate.run import evaluate_run
from simforcing.evaluate.sweeps import sweep_steps
from simforcing.locking import lock_folder
from simforcing.prep.demo_vae import fit_demo_vae, read_demo_vae_report
from simforcing.prep.text import finalize_dataset
from simforcing.provenance import (PROVENANCE_FILE, check_provenance, digest, provenance_record, read_provenance,
                                   write_provenance)
from simforcing.sample import generate_run
from simforcing.train import train_run
from simforcing.utils import atomic_write_json, atomic_write_text


@dataclass
class Budget:
    """Sizes of one demo run (steps and data); `--quick` and the default differ only here."""

    num_train: int = 20
    num_val: int = 16
    num_sim_pool: int = 300
    length: int = 33
    stage1_steps: int = 2500
    stage2_steps: int = 600
    eval_samples: int = 16
    sweep_n_real: tuple = (1, 5, 10)
    sweep_w: tuple = (0.0, 0.6, 1.0)
    report_videos: int = 3


QUICK = Budget(num_train=4, num_val=3, num_sim_pool=12, length=17, stage1_steps=30, stage2_steps=20,
               eval_samples=3, sweep_n_real=(1, 2), sweep_w=(0.0, 0.6, 1.0), report_videos=1)

BASE_METHODS = ("sft", "simforcing")
FULL_METHODS = STAGE2_METHODS


class Timer:
    def __init__(self) -> None:
        self.stages: dict[str, float] = {}

    def run(self, name: str, fn, *a, **kw):
        t0 = time.perf_counter()
        print(f"\n=== {name} ===", flush=True)
        out = fn(*a, **kw)
        self.stages[name] = self.stages.get(name, 0.0) + time.perf_counter() - t0
        print(f"=== {name}: {self.stages[name]:.1f} s ===", flush=True)
        return out


def demo_budget(quick: bool = False, stage1_steps: int | None = None, stage2_steps: int | None = None) -> Budget:
    """The default budget (or ``QUICK``), with the stage step counts overridden when given."""
    budget = copy.deepcopy(QUICK if quick else Budget())
    if stage1_steps:
        budget.stage1_steps = stage1_steps
    if stage2_steps:
        budget.stage2_steps = stage2_steps
    return budget


def demo_config(budget: Budget, data_root: Path, vae_dir: Path, overrides: list[str]) -> Config:
    """The demo preset + ``overrides`` on the demo's data and VAE folders (validated)."""
    cfg = load_config("demo", overrides)
    cfg.data.root = str(data_root)
    cfg.model.vae.path = str(vae_dir)
    cfg.eval.num_samples = budget.eval_samples
    return cfg.validate()


def run_demo(out: Path, data_root: Path, budget: Budget, cfg: Config, methods=BASE_METHODS, num_seeds: int = 1) -> int:
    """The whole demo into ``out`` (see the module docstring): data, VAE, stage 1, stage 2 per method and seed,
    evaluation, sweep, videos, report. ``cfg`` from :func:`demo_config` (its VAE folder is ``out/vae``). Returns the
    exit code: 0, or a training stage's code when it did not finish (run again to resume)."""
    vae_dir = Path(cfg.model.vae.path)
    out.mkdir(parents=True, exist_ok=True)
    timer = Timer()
    t_start = time.perf_counter()
    commands: dict[str, str] = {}
    exe = "simforcing"

    # 1. data ------------------------------------------------------------------------------------------------------
    sizes = {"num_train": budget.num_train, "num_val": budget.num_val, "num_sim_pool": budget.num_sim_pool,
             "length": budget.length, "height": cfg.data.height, "width": cfg.data.width,
             "generator": GENERATOR_VERSION}
    data_rec = provenance_record(f"{exe} data synth --out {data_root} --num-train {budget.num_train} --num-val "
                                 f"{budget.num_val} --num-sim-pool {budget.num_sim_pool} --length {budget.length} "
                                 f"--height {cfg.data.height} --width {cfg.data.width} --seed 0", sizes, seed=0)
    owned = data_root.resolve() == (out / "data").resolve()  # --data elsewhere: the user's dataset, used as it is
    stale = check_provenance(data_root, data_rec) if owned and is_dataset(data_root) else []
    if not is_dataset(data_root) or stale:
        if stale:
            print(f"regenerating {data_root}: it was not made by this demo run ({'; '.join(stale[:3])})")

        def finish(folder: Path) -> None:
            finalize_dataset(folder)
            write_provenance(folder, data_rec)

        timer.run("generate synthetic benchmark", generate_dataset, data_root, num_train=budget.num_train,
                  num_val=budget.num_val, num_sim_pool=budget.num_sim_pool, length=budget.length,
                  height=cfg.data.height, width=cfg.data.width, seed=0, workers=2, overwrite=True, finish=finish)
    else:
        print(f"reusing the synthetic benchmark in {data_root}")
    if not (data_root / "meta" / "stats.json").exists() or not (data_root / "text_cache" / "info.json").exists():
        timer.run("statistics + text embeddings", finalize_dataset, data_root)
    made = read_provenance(data_root)
    commands["data"] = made["command"] if made else f"# the dataset given with --data {data_root}"
    data_digest = digest(made or {"given": str(data_root.resolve())})

    # 2. demo VAE --------------------------------------------------------------------------------------------------
    commands["vae"] = f"{exe} model fit-vae --data {data_root} --out {vae_dir}"
    vae_rec = provenance_record(commands["vae"], {"latent_channels": cfg.model.vae.latent_channels,
                                                  "frames": cfg.data.frames, "height": cfg.data.height,
                                                  "width": cfg.data.width}, seed=0, inputs={"data": data_digest})
    stale = check_provenance(vae_dir, vae_rec)
    if not (vae_dir / "config.json").exists() or stale:
        if (vae_dir / "config.json").exists():
            print(f"fitting the demo VAE again in {vae_dir} ({'; '.join(stale[:3])})")
        (vae_dir / PROVENANCE_FILE).unlink(missing_ok=True)
        vae, _ = timer.run("fit demo VAE", fit_demo_vae, data_root, cfg, out_dir=vae_dir)
        write_provenance(vae_dir, vae_rec)
    vae_report = read_demo_vae_report(vae_dir)

    # 3. stage 1 ---------------------------------------------------------------------------------------------------
    stage1 = out / "stage1"
    s1cfg = copy.deepcopy(cfg)
    s1cfg.train.method = "sim_pretrain"
    s1cfg.train.max_steps = budget.stage1_steps
    commands["stage1"] = (f"{exe} pretrain --preset demo --data {data_root} --out {stage1} "
                          f"--model.vae.path={vae_dir} --train.max_steps={budget.stage1_steps}")
    s1_rec = provenance_record(commands["stage1"], {"stage1_steps": budget.stage1_steps}, s1cfg.train.seed,
                               {"data": data_digest, "vae": digest(vae_rec), "config": config_hash(s1cfg)})
    _fresh_run(stage1, s1_rec)
    if not _finished(stage1, budget.stage1_steps):
        res = timer.run("stage 1: simulation world model", train_run, s1cfg, stage1, stage="pretrain",
                        resume=(stage1 / "checkpoints").exists())
        if res["state"] != "finished":
            return _stopped("stage 1", res)

    # 4-5. stage 2 per method and seed, evaluation -----------------------------------------------------------------
    results: dict = {"budget": budget.__dict__, "vae": vae_report, "methods": {}, "baselines": {}, "seeds": []}
    ev_cfg = copy.deepcopy(cfg)
    for base in ("copy-first", "vae-recon"):
        ev_dir = out / "eval" / base
        results["baselines"][base] = timer.run(f"evaluate baseline {base}", evaluate_run, None, data_root, ev_cfg,
                                               "val", budget.eval_samples, ev_dir, baseline=base)
        commands[f"eval {base}"] = (f"{exe} evaluate --baseline {base} --preset demo --data {data_root} --split val "
                                    f"--num-samples {budget.eval_samples} --out {ev_dir} --model.vae.path={vae_dir}")
    seeds = [cfg.train.seed + i for i in range(max(1, num_seeds))]
    for seed in seeds:
        results["seeds"].append(seed)
        for method in methods:
            tag = method if seed == cfg.train.seed else f"{method}_seed{seed}"
            run_dir = out / tag
            m_cfg = copy.deepcopy(cfg)
            m_cfg.train.seed = seed
            m_cfg.train.max_steps = budget.stage2_steps
            _fresh_run(run_dir, provenance_record(f"train {method}", {"stage2_steps": budget.stage2_steps}, seed,
                                                  {"stage1": digest(s1_rec), "config": config_hash(m_cfg)}))
            if not _finished(run_dir, budget.stage2_steps):
                res = timer.run(f"stage 2: {tag}", train_run, m_cfg, run_dir, stage="train", teacher_run=stage1,
                                method=method, resume=(run_dir / "checkpoints").exists())
                if res["state"] != "finished":
                    return _stopped(f"stage 2 ({tag})", res)
            ev_dir = out / "eval" / tag
            res = timer.run(f"evaluate {tag}", evaluate_run, run_dir, data_root, ev_cfg, "val",
                            budget.eval_samples, ev_dir)
            results["methods"].setdefault(method, {})[str(seed)] = res
            commands[f"train {tag}"] = (f"{exe} train --method {method} --teacher {stage1} --data {data_root} "
                                        f"--out {run_dir} --train.seed={seed} "
                                        f"--train.max_steps={budget.stage2_steps}")
            commands[f"eval {tag}"] = (f"{exe} evaluate --ckpt {run_dir} --data {data_root} --split val "
                                       f"--num-samples {budget.eval_samples} --out {ev_dir}")

    # 6. sweep steps -----------------------------------------------------------------------------------------------
    sweep_dir = out / "sweep_steps"
    results["sweep_steps"] = timer.run("sweep steps", sweep_steps, out / "simforcing", data_root, ev_cfg,
                                       n_sim=(1,), n_real=budget.sweep_n_real, ws=budget.sweep_w,
                                       num_samples=budget.eval_samples, out_dir=sweep_dir)
    commands["sweep steps"] = (f"{exe} sweep steps --ckpt {out / 'simforcing'} --data {data_root} --n-sim 1 "
                               f"--n-real {' '.join(map(str, budget.sweep_n_real))} "
                               f"--w {' '.join(map(str, budget.sweep_w))} --num-samples {budget.eval_samples} "
                               f"--out {sweep_dir}")

    # 7. generate a few videos per method for the report -----------------------------------------------------------
    videos: dict[str, list[str]] = {}
    for method in methods:
        gen_dir = out / "videos" / method
        videos[method] = timer.run(f"videos {method}", generate_run, out / method, data_root, ev_cfg, "val",
                                   budget.report_videos, gen_dir)
    total = time.perf_counter() - t_start
    results["wall_time_s"] = {**timer.stages, "total": total}
    results["commands"] = commands
    results["summary"] = summarize(results, methods)
    atomic_write_json(out / "results.json", results)
    write_report(out, results, methods, videos)
    print("\n" + results["summary"]["line"])
    return 0


def _stopped(stage: str, res: dict) -> int:
    """A training stage that did not finish (stopped, diverged) ends the demo; run it again to resume."""
    print(f"simforcing demo: {stage} ended as {res['state']!r} at step {res['step']} ({res.get('reason')}); "
          f"run the same command again to resume", file=sys.stderr)
    return int(res.get("exit_code") or 1)


def _fresh_run(run_dir: Path, record: dict) -> None:
    """Keep ``run_dir`` only when its provenance is ``record`` (then an unfinished run resumes); a run made from other
    inputs is removed — only a simforcing run folder or one carrying a demo record, and only when no process is
    writing it (its lock) — and the record is written for the run about to start."""
    if run_dir.exists():
        stale = check_provenance(run_dir, record)
        if not stale:
            return
        if not (is_run_folder(run_dir) or read_provenance(run_dir) is not None):
            raise ConfigError(f"{run_dir} is not a run of this demo (no {PROVENANCE_FILE}, not a simforcing run); "
                              "move it away or choose another --out")
        print(f"training {run_dir} again: it was made from other inputs ({'; '.join(stale[:3])})")
        with lock_folder(run_dir, "simforcing demo (removing a stale run)"):
            shutil.rmtree(run_dir)
    write_provenance(run_dir, record)


def _finished(run_dir: Path, steps: int) -> bool:
    status = run_dir / "status.json"
    if not status.exists():
        return False
    try:
        s = json.loads(status.read_text())
    except json.JSONDecodeError:
        return False
    return s.get("state") == "finished" and int(s.get("step", -1)) >= steps


# ----------------------------------------------------------------------------------------------------------------------
# Summary and report
# ----------------------------------------------------------------------------------------------------------------------


def summarize(results: dict, methods) -> dict:
    def mean_of(method: str, key: str) -> float | None:
        vals = [r.get(key) for r in results["methods"].get(method, {}).values() if r.get(key) is not None]
        return statistics.fmean(vals) if vals else None

    copy_psnr = results["baselines"]["copy-first"]["psnr"]
    rows = {}
    for m in methods:
        rows[m] = {k: mean_of(m, k) for k in ("psnr", "ssim", "psnr_arm", "lpips", "fid", "fvd")}
        rows[m]["beats_copy_first"] = rows[m]["psnr"] is not None and rows[m]["psnr"] > copy_psnr
    diffs, diffs_arm = [], []
    for seed in results["seeds"]:
        a = results["methods"].get("simforcing", {}).get(str(seed))
        b = results["methods"].get("sft", {}).get(str(seed))
        if a and b:
            diffs.append(a["psnr"] - b["psnr"])
            if a.get("psnr_arm") is not None and b.get("psnr_arm") is not None:
                diffs_arm.append(a["psnr_arm"] - b["psnr_arm"])

    def spread(v):
        return statistics.stdev(v) if len(v) > 1 else None

    paired = {"psnr_diff_mean": statistics.fmean(diffs) if diffs else None, "psnr_diff_std": spread(diffs),
              "psnr_arm_diff_mean": statistics.fmean(diffs_arm) if diffs_arm else None,
              "psnr_arm_diff_std": spread(diffs_arm), "num_seeds": len(diffs)}
    learned = all(r["beats_copy_first"] for r in rows.values())
    d = paired["psnr_diff_mean"]
    line = (f"demo: copy-first {copy_psnr:.2f} dB | "
            + " | ".join(f"{m} {r['psnr']:.2f} dB" for m, r in rows.items() if r["psnr"] is not None)
            + (f" | simforcing − sft {d:+.2f} dB over {len(diffs)} seed(s)" if d is not None else "")
            + ("" if learned else " | WARNING: not every model beats copying the first frame"))
    return {"rows": rows, "paired": paired, "all_beat_copy_first": learned, "line": line}


def _fmt(v, nd=2) -> str:
    return "—" if v is None else f"{v:.{nd}f}"


def write_report(out: Path, results: dict, methods, videos: dict) -> None:
    s = results["summary"]
    base = results["baselines"]
    lines = ["# SimForcing demo report", "",
             "Embedded synthetic MuJoCo benchmark: plentiful simulation, scarce real data, one arm, a real appearance gap.",
             "All stage-2 methods start from the same stage-1 checkpoint and see the same real data for the same steps.",
             "", "## Results (held-out real validation pairs)", "",
             "| method | PSNR ↑ | SSIM ↑ | arm PSNR ↑ | LPIPS ↓ | FID ↓ | FVD ↓ |", "|---|---|---|---|---|---|---|"]
    for name, r in (("copy first frame (floor)", base["copy-first"]), ("VAE reconstruction (ceiling)", base["vae-recon"])):
        lines.append(f"| {name} | {_fmt(r['psnr'])} | {_fmt(r['ssim'], 4)} | {_fmt(r.get('psnr_arm'))} | "
                     f"{_fmt(r.get('lpips'), 4)} | {_fmt(r.get('fid'))} | {_fmt(r.get('fvd'))} |")
    for m in methods:
        r = s["rows"][m]
        lines.append(f"| {m} | {_fmt(r['psnr'])} | {_fmt(r['ssim'], 4)} | {_fmt(r['psnr_arm'])} | "
                     f"{_fmt(r['lpips'], 4)} | {_fmt(r['fid'])} | {_fmt(r['fvd'])} |")
    reasons = {k: base["copy-first"].get(f"{k}_reason") for k in ("lpips", "fid", "fvd")}
    missing = [f"{k.upper()}: {v}" for k, v in reasons.items() if v]
    if missing:
        lines += ["", "Not computed: " + "; ".join(missing)]
    if not s["all_beat_copy_first"]:
        lines += ["", "**Not every model beats copying the first frame: below that line a comparison between methods "
                      "says nothing.**"]
    p = s["paired"]
    if p["psnr_diff_mean"] is not None:
        sd = f" ± {p['psnr_diff_std']:.2f}" if p["psnr_diff_std"] is not None else ""
        lines += ["", f"Paired difference simforcing − sft: PSNR {p['psnr_diff_mean']:+.3f}{sd} dB over "
                      f"{p['num_seeds']} seed(s)" + (f"; arm-region PSNR {p['psnr_arm_diff_mean']:+.3f} dB"
                                                     if p["psnr_arm_diff_mean"] is not None else "") + "."]
    lines += ["", f"Demo VAE reconstruction: {json.dumps(results.get('vae', {}))}", "",
              "## Videos (masked first frame | simulation rollout | prediction | ground truth)", ""]
    for m, files in videos.items():
        for f in files:
            rel = Path(f).relative_to(out) if Path(f).is_absolute() or str(f).startswith(str(out)) else f
            lines.append(f"**{m}** ![{m}]({rel})")
            lines.append("")
    lines += ["## Loss curves", ""]
    for run_dir in ["stage1", *methods]:
        png = out / run_dir / "loss_curves.png"
        if png.exists():
            lines += [f"{run_dir}: ![{run_dir} loss]({run_dir}/loss_curves.png)", ""]
    lines += ["## Sweep: N_r × w (N_s = 1)", ""]
    sw = results.get("sweep_steps") or {}
    if sw.get("table_md"):
        lines += [sw["table_md"], ""]
    if sw.get("heatmap"):
        lines += [f"![sweep heatmap]({Path(sw['heatmap']).relative_to(out)})", ""]
    lines += ["## Wall time", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in results["wall_time_s"].items()]
    lines += ["", "## Commands that reproduce each number", "", "```bash"]
    lines += [f"# {k}\n{v}" for k, v in results["commands"].items()]
    lines += ["```", ""]
    md = "\n".join(lines)
    atomic_write_text(out / "report.md", md)
    atomic_write_text(out / "report.html", _html(md, out))


def _html(md: str, out: Path) -> str:
    """A self-contained HTML page: the markdown's tables and text, images inlined as base64."""
    body = []
    in_code = False
    table: list[str] = []

    def flush_table():
        if not table:
            return
        rows = [r.strip("|").split("|") for r in table if not set(r.replace("|", "").strip()) <= set("-: ")]
        body.append("<table>" + "".join(
            "<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{_h.escape(c.strip())}</{'th' if i == 0 else 'td'}>"
                             for c in row) + "</tr>" for i, row in enumerate(rows)) + "</table>")
        table.clear()

    for line in md.splitlines():
        if line.startswith("```"):
            flush_table()
            body.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
            continue
        if in_code:
            body.append(_h.escape(line))
            continue
        if line.startswith("|"):
            table.append(line)
            continue
        flush_table()
        imgs = re.findall(r"!\[([^\]]*)\]\(([^)]+)\)", line)
        if imgs:
            for alt, src in imgs:
                p = out / src
                if p.exists():
                    mime = "image/gif" if p.suffix == ".gif" else "image/png"
                    data = base64.b64encode(p.read_bytes()).decode()
                    body.append(f"<figure><img src='data:{mime};base64,{data}' alt='{_h.escape(alt)}'/>"
                                f"<figcaption>{_h.escape(alt)}</figcaption></figure>")
            continue
        if line.startswith("#"):
            n = len(line) - len(line.lstrip("#"))
            body.append(f"<h{n}>{_h.escape(line[n:].strip())}</h{n}>")
        elif line.strip():
            body.append(f"<p>{_h.escape(line)}</p>")
    flush_table()
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px}img{image-rendering:pixelated;max-width:100%}")
    return f"<!doctype html><html><head><meta charset='utf-8'><title>SimForcing demo</title><style>{style}</style>" \
           f"</head><body>{''.join(body)}</body></html>"
