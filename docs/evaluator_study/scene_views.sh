#!/usr/bin/env bash
# The multi-view world model on the full-scene pairing, judged on the demo's pool (notebook/views.md, "Which pairing
# the multi-view evaluator needs"). Run after `make demo`, from the repository root: bash docs/evaluator_study/scene_views.sh
# OUT (default runs/scene_views); DEMO (default runs/demo) gives the pool's policies, judge and simulator truth.
set -euo pipefail
OUT=${1:-runs/scene_views}
DEMO=${DEMO:-runs/demo}
S=".venv/bin/simforcing"
mkdir -p "$OUT"
$S data synth --out "$OUT/data" --num-train 20 --num-val 16 --num-sim-pool 300 --length 33 --height 32 --width 48 \
  --seed 0 --workers 2 --views external wrist --layout-train 20 --layouts 2 --jitter 0.03 --pairing scene --physics-gap 1
$S model fit-vae --data "$OUT/data" --out "$OUT/vae"
$S pretrain --preset demo --data "$OUT/data" --out "$OUT/stage1" --model.vae.path="$OUT/vae" --train.max_steps=2000 \
  --train.batch_size=16 --train.threads=2 --no-progress
$S pretrain --init "$OUT/stage1" --preset demo --data "$OUT/data" --out "$OUT/stage1_views" --model.vae.path="$OUT/vae" \
  --data.views=external,wrist --train.max_steps=250 --train.batch_size=16 --train.lr=0.001 --train.threads=2 --no-progress
$S train --method simforcing --teacher "$OUT/stage1_views" --data "$OUT/data" --out "$OUT/simforcing_views" \
  --train.seed=42 --train.max_steps=600 --train.batch_size=8 --train.threads=2 --no-progress
$S distill --teacher "$OUT/simforcing_views" --steps 1 --objective trajectory --data "$OUT/data" \
  --out "$OUT/simforcing_views_fewstep" --train.lr=0.0003 --train.batch_size=2 --train.max_steps=100 \
  --train.ckpt_every=100 --train.threads=2 --no-progress
P="$DEMO/wm_eval/policies"
$S policy eval --env world-model --wm "$OUT/simforcing_views_fewstep" --wm-condition render --judge "$DEMO/wm_eval/judge" \
  --per-task 20 --max-steps 30 --layouts 2 --jitter 0.03 --runs base@500="$P/base_500" SFT-WM@500="$P/sft_500" \
  SimForcing-WM@500="$P/simforcing_500" --expert-noise 0.01 0.02 0.04 --out "$OUT/pool_wm"
for predictor in learned verdict twin; do
  $S policy estimate --ground-truth "$DEMO/wm_eval/pool_sim" --wm-eval "$OUT/pool_wm" --n 10 --draws 400 --study-n 10 \
    --predictor "$predictor" --out "$OUT/estimate_$predictor"
done
$S policy agreement --sim "$DEMO/wm_eval/pool_sim" --wm scene-views-twin="$OUT/pool_wm" \
  arm-views-twin="$DEMO/wm_eval/pool_wm_simforcing-views-fewstep-twin" --out "$OUT/agreement"
