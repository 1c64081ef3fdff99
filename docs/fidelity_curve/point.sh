#!/bin/bash
# One point of the fidelity-compute curve (docs/FAITHFUL.md): [stage 1] + stage 2 of SimForcing, then the four
# fidelity measurements, each a simforcing command; training core-seconds from /usr/bin/time (user + sys).
#
#   DEMO=runs/demo OUT=runs/curve docs/fidelity_curve/point.sh NAME STAGE1_STEPS STAGE2_STEPS [--section.field=value ...]
#
# STAGE1_STEPS 0 reuses the demo's stage 1. DEMO is a finished `make demo` folder (its data, VAE, probe, long
# episodes, judge, policies and simulator evaluations are reused); then `simforcing fidelity point ... --core-s` and
# `simforcing fidelity curve` (docs/fidelity_curve/assemble.sh is the record of the points in FAITHFUL.md).
set -e
export OMP_NUM_THREADS=1
name=$1; s1=$2; s2=$3; shift 3; ov="$@"
D=${DEMO:-runs/demo}; B=${OUT:-runs/curve}/$name; S=${SIMFORCING:-simforcing}
mkdir -p $B
T() { /usr/bin/time -o $B/time_$1.txt -f "%e %U %S" "${@:2}"; }
if [ "$s1" != 0 ]; then
  [ -f $B/stage1/status.json ] && grep -q finished $B/stage1/status.json || \
  T stage1 $S pretrain --preset demo --data $D/data --out $B/stage1 --model.vae.path=$D/vae --train.max_steps=$s1 \
    --train.batch_size=16 --train.threads=1 --no-progress $ov > $B/stage1.log 2>&1
  teacher=$B/stage1
else teacher=$D/stage1; fi
[ -f $B/stage2/status.json ] && grep -q finished $B/stage2/status.json || \
T stage2 $S train --method simforcing --teacher $teacher --data $D/data --out $B/stage2 --train.seed=42 \
  --train.max_steps=$s2 --train.batch_size=8 --train.threads=1 --no-progress $ov > $B/stage2.log 2>&1
R=$B/stage2
T oracle $S evaluate --ckpt $R --out $B/eval_oracle --data $D/data --split val --num-samples 80 \
  --eval.windows_per_episode=5 --eval.probe=$D/probe --eval.action_control=false --sample.condition=oracle \
  --sample.w=1.0 --train.threads=1 > $B/eval_oracle.log 2>&1
T twin $S rollout --ckpt $R --data $D/data_long --horizon 64 --eval.probe=$D/probe --out $B/rollout_twin \
  --sample.condition=render --rows rollout restart --videos 0 > $B/rollout_twin.log 2>&1
P=$D/wm_eval/policies
T wm $S policy eval --env world-model --wm $R --wm-condition render --runs base@500=$P/base_500 \
  SFT-WM@500=$P/sft_500 SimForcing-WM@500=$P/simforcing_500 --expert-noise 0.01 0.02 0.04 --per-task 5 \
  --max-steps 30 --layouts 2 --jitter 0.03 --judge $D/wm_eval/judge --out $B/wm_twin > $B/wm_twin.log 2>&1
$S policy agreement --sim $D/wm_eval/sim_experts $D/wm_eval/sim_policies --wm $name=$B/wm_twin \
  --out $B/agreement > $B/agreement.log 2>&1
echo done > $B/DONE
