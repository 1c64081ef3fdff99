#!/bin/bash
# Does the few-step student rank policies and hold a rollout as its teacher does? (issue #46; docs/FEWSTEP.md)
#
#   docs/fewstep_ranking/study.sh DEMO_ROOT     # a finished `make demo` folder's parent (the one holding runs/demo)
#
# From the demo's SimForcing teacher and its K = 1 student (both made by `make demo`): K = 2 and K = 4 students
# distilled the demo's way (100 steps, batch 2, lr 3e-4, the trajectory objective); the teacher and each student on
# the estimate's pool (the eight players on 60 scenes, the demo's judge); `policy agreement` against the simulator's
# pool with the teacher as the reference (paired differences on the same scene draws); each student's 8-chunk
# rollouts on the demo's long held-out episodes, and their drift (rollout − restarted action error) paired with the
# teacher's per episode. Writes DEMO_ROOT/runs/kstudy/ and copies the tables here. About 25 minutes on one core.
set -euo pipefail
ROOT=$(cd "${1:?usage: study.sh DEMO_ROOT}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$ROOT"
SF="${SIMFORCING:-simforcing}"
D=runs/demo; W=$D/wm_eval; P=$W/policies; O=runs/kstudy
RUNS="base@500=$P/base_500 SFT-WM@500=$P/sft_500 SimForcing-WM@500=$P/simforcing_500"
pool() { [ -f "$2/eval.json" ] || $SF policy eval --env world-model --wm "$1" --judge $W/judge --per-task 20 \
  --max-steps 30 --layouts 2 --jitter 0.03 --runs $RUNS --expert-noise 0.01 0.02 0.04 --out "$2"; }
roll() { [ -f "$2/rollout.json" ] || $SF rollout --ckpt "$1" --data $D/data_long --horizon 64 \
  --eval.probe=$D/probe --out "$2" --rows rollout restart --videos 0; }
for K in 2 4; do
  [ -d $O/k$K/checkpoints ] || $SF distill --teacher $D/simforcing --steps $K --objective trajectory --data $D/data \
    --out $O/k$K --train.lr=0.0003 --train.batch_size=2 --train.max_steps=100 --train.ckpt_every=100 \
    --train.threads=1 --no-progress
  pool $O/k$K $O/pool_k$K
  roll $O/k$K $O/roll_k$K
done
pool $D/simforcing $O/pool_teacher
rm -rf $O/agreement
$SF policy agreement --sim $W/pool_sim --wm teacher=$O/pool_teacher K1=$W/pool_wm_simforcing-fewstep \
  K2=$O/pool_k2 K4=$O/pool_k4 --reference teacher --out $O/agreement
python - "$O" <<'PY'
import json, sys
from pathlib import Path
import numpy as np
from simforcing.demo.rollout_section import _per_episode, _read, bootstrap_ci
out = Path(sys.argv[1])
folders = {"teacher": "runs/demo/rollout/simforcing", "K1": "runs/demo/rollout/simforcing_few-step",
           "K2": out / "roll_k2", "K4": out / "roll_k4"}
drift = {}
for name, f in folders.items():
    r = _read(Path(f))
    drift[name] = (_per_episode(r, "rollout", "af_pos") - _per_episode(r, "restart", "af_pos")).mean(axis=1) * 100
res, lines = {}, ["| model | drift: rollout − restarted action error (cm) | − teacher's, paired over episodes [95 %] |",
                  "|---|---|---|"]
for name, d in drift.items():
    diff = d - drift["teacher"]
    res[name] = {"drift_cm": float(d.mean()), "minus_teacher_cm": float(diff.mean()),
                 "minus_teacher_ci95": list(bootstrap_ci(diff)) if name != "teacher" else None, "episodes": len(d)}
    ci = "" if name == "teacher" else f"{diff.mean():+.2f} [{res[name]['minus_teacher_ci95'][0]:+.2f}, " \
                                      f"{res[name]['minus_teacher_ci95'][1]:+.2f}]"
    lines.append(f"| {name} | {d.mean():.2f} | {ci} |")
(out / "drift.json").write_text(json.dumps(res, indent=1) + "\n")
(out / "drift.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
cp $O/agreement/agreement.md $O/agreement/agreement.json $O/agreement/scatter.png $O/drift.md $O/drift.json "$HERE/"
