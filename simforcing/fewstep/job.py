"""Distil a student and measure it against its teacher on the same windows and noise: what the demo calls.

    res = distill_and_compare(TEACHER_RUN, DATA, OUT, steps=4, eval_cfg=cfg, num_samples=80)
    # OUT/student (the run), OUT/eval_teacher, OUT/eval_student (``simforcing evaluate``), OUT/fewstep.json

Both evaluations use one config (``eval_cfg``: the data/sample/eval sections, e.g. the probe and the windows per
episode; the teacher's own when None), so sample i is the same window with the same noise for both
(``runs.loaded.sample_generator``). :func:`compare` pairs their per-sample scores: mean difference (student − teacher)
with a 95 % interval (normal approximation over the windows), the relative difference of the means, and the latency
and forwards per sample; and the student's samples against the teacher's (:func:`teacher_agreement`). A resumed
job continues a stopped distillation (its run folder holds checkpoints).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import torch

from simforcing.config import Config, apply_overrides
from simforcing.evaluate.metrics import psnr_per_sample
from simforcing.evaluate.results import WindowScores
from simforcing.evaluate.run import evaluate_run
from simforcing.fewstep.stage import TEACHER_KINDS, distill_config, distill_run
from simforcing.runs.folder import is_run_folder, run_config
from simforcing.runs.loaded import collate_one, eval_dataset, load_world_model, sample_generator
from simforcing.sample import sampler_for
from simforcing.sampler_batch import SamplerBatch
from simforcing.utils import atomic_write_json

PAIRED = ("psnr", "psnr_arm", "ssim", "af_pos", "af_pos_moving", "latency_s")  # per-sample scores compared
# what a short distillation of the demo's model trains with (docs/FEWSTEP.md): a gentle fine-tuning of the teacher
DEMO_TRAIN = {"train.lr": 3e-4, "train.batch_size": 2, "train.max_steps": 100, "train.ckpt_every": 50,
              "train.log_every": 5}


def paired_difference(teacher: list, student: list) -> Optional[dict]:
    """Mean of student − teacher over the windows both scored, its 95 % interval (None from a single window: one
    difference says nothing of its spread — it was a zero-width interval), and n (None when none)."""
    d = [s - t for t, s in zip(teacher, student) if t is not None and s is not None
         and math.isfinite(t) and math.isfinite(s)]
    if not d:
        return None
    mean = sum(d) / len(d)
    if len(d) < 2:
        return {"mean": mean, "ci95": None, "n": 1}
    half = 1.96 * math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1)) / math.sqrt(len(d))
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": len(d)}


def compare(teacher: WindowScores, student: WindowScores) -> dict:
    """The two evaluations' scores side by side (``evaluate_run`` results of the same windows)."""
    out: dict = {"forwards_per_sample": {"teacher": teacher.forwards_per_sample,
                                         "student": student.forwards_per_sample}}
    for name in PAIRED:
        t, s = teacher.metric(name), student.metric(name)
        if t is None or s is None:
            continue
        row = {"teacher": t, "student": s, "relative": (s - t) / abs(t) if t else None}
        pt, ps = teacher.per_sample.get(name), student.per_sample.get(name)
        if pt is not None and ps is not None:
            row["paired"] = paired_difference(pt, ps)
        out[name] = row
    out["latency_speedup"] = teacher.latency_s / student.latency_s
    return out


@torch.no_grad()
def teacher_agreement(teacher_run: str | Path, student_run: str | Path, data_root: str | Path,
                      cfg: Optional[Config] = None, split: str = "val", num_samples: int = 16) -> dict:
    """How close the student's samples are to its teacher's — what the distillation fits — on the first
    ``num_samples`` evaluation windows with the same noise: PSNR of the student's video against the teacher's
    (the evaluation's frames), per sample and its mean."""
    wms = [load_world_model(run, cfg, "cpu", None, data_root) for run in (teacher_run, student_run)]
    samplers = [sampler_for(wm) for wm in wms]
    ds = eval_dataset(wms[1].cfg, data_root, split, wms[1].stats)
    per_sample = []
    for i in range(min(int(num_samples), len(ds))):
        batch = SamplerBatch.from_collated(collate_one(ds[i]))
        t, s = (sampler(batch, sample_generator(wms[1].cfg, i)).real_video for sampler in samplers)
        per_sample.append(float(psnr_per_sample(s, t)[0]))
    return {"psnr_to_teacher": sum(per_sample) / len(per_sample), "per_sample": per_sample}


def distill_and_compare(teacher_run: str | Path, data_root: str | Path, out_dir: str | Path, steps: int = 4,
                        objective: str = "trajectory", train: Optional[dict] = None,
                        eval_cfg: Optional[Config] = None, split: str = "val", num_samples: Optional[int] = None,
                        progress: bool = False) -> dict:
    """Distil a ``steps``-step student of ``teacher_run`` into OUT/student (``train``: dotted overrides such as
    ``{"train.max_steps": 200}`` on top of :data:`DEMO_TRAIN`), evaluate teacher and student on the same windows
    and write OUT/fewstep.json (:func:`compare`, :func:`teacher_agreement` and the run's record). Returns that dict."""
    out = Path(out_dir)
    cfg = distill_config(run_config(teacher_run, TEACHER_KINDS, "--teacher", "distill_teacher"), steps, objective)
    apply_overrides(cfg, {**DEMO_TRAIN, **(train or {})})
    cfg.data.root = str(data_root)
    run = out / "student"
    trained = distill_run(cfg.validate(), run, teacher_run, resume=is_run_folder(run), progress=progress)
    if trained["state"] != "finished":
        return {"distill": trained}
    evals = {name: evaluate_run(path, data_root, eval_cfg, split, num_samples, out / f"eval_{name}",
                                progress=progress) for name, path in (("teacher", teacher_run), ("student", run))}
    res = {"teacher": str(teacher_run), "student": str(run), "steps": steps, "objective": objective,
           "distill": {k: trained[k] for k in ("state", "step", "checkpoint", "last_logs")},
           "sampler": {name: e.sampler for name, e in evals.items()},
           "compare": compare(*(e.scores for e in evals.values())),
           "agreement": teacher_agreement(teacher_run, run, data_root, eval_cfg, split,
                                          min(16, evals["student"].scores.num_samples))}
    atomic_write_json(out / "fewstep.json", res)
    return res
