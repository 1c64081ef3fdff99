#!/usr/bin/env bash
# The full-scene pairing measured (issue 54): its own VAE, stage 1, sft and SimForcing stage 2, K=1 students; one
# window (paper's table), 8-chunk rollouts (own chain, twin) and the 60-scene pool inside the students with the twin
# and with their own chain; the estimates and the records: docs/evaluator_study/scene_estimates.sh.
set -euo pipefail
D=$(realpath ${DEMO:-runs/demo}); X=$(realpath -m ${STUDY:-runs/evaluator_study})/scene; SF="${SF:-simforcing}"
export MUJOCO_GL=egl OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p $X; cd $X; T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $X/steps.log; }
done_run() { grep -q '"state": "finished"' $1/status.json 2>/dev/null || grep -q '"finished": true' $1/status.json 2>/dev/null; }
[ -f data/meta/stats.json ] || { log data; $SF data synth --out data --num-train 20 --num-val 16 --num-sim-pool 300 --length 33 --height 32 --width 48 --seed 0 --workers 1 --layout-train 20 --layouts 2 --jitter 0.03 --pairing scene --physics-gap 1 --no-progress > data.log 2>&1; }
[ -f vae/config.json ] || { log vae; $SF model fit-vae --data data --out vae > vae.log 2>&1; }
if ! done_run stage1; then log stage1; R=""; [ -d stage1/checkpoints ] && R=--resume
  $SF pretrain --preset demo --data data --out stage1 --model.vae.path=$X/vae --train.max_steps=2000 --train.batch_size=16 --train.threads=${S1THREADS:-1} --train.log_every=100 $R > stage1.log 2>&1; fi
for M in simforcing sft; do
  if ! done_run $M; then log "train $M"; R=""; [ -d $M/checkpoints ] && R=--resume
    $SF train --method $M --teacher stage1 --data data --out $M --train.seed=42 --train.max_steps=600 --train.batch_size=8 --train.threads=1 --train.log_every=100 $R > $M.log 2>&1; fi
  if [ ! -d ${M}_student/checkpoints ]; then log "distill $M"
    $SF distill --teacher $M --steps 1 --objective trajectory --data data --out ${M}_student --train.lr=3e-4 --train.batch_size=2 --train.max_steps=100 --train.ckpt_every=100 --train.threads=1 --no-progress > distill_$M.log 2>&1; fi
done
EV="--data data --split val --num-samples 80 --eval.probe=$D/probe --eval.windows_per_episode=5 --sample.mask_mode=paired-sim"
for M in simforcing sft; do [ -f eval_$M/eval.json ] || { log "eval $M"; $SF evaluate --ckpt $M $EV --out eval_$M > eval_$M.log 2>&1; }; done
[ -f eval_copy/eval.json ] || { log "eval copy-first"; $SF evaluate --baseline copy-first --preset demo --model.vae.path=$X/vae $EV --out eval_copy > eval_copy.log 2>&1; }
log "one window done"
# long rollouts (8 chunks), as the demo's: the world model's own simulation chain, and the full-scene twin
[ -f data_long/meta/stats.json ] || { log "data long"; $SF data synth --out data_long --num-train 0 --num-val 16 --num-sim-pool 0 --length 65 --height 32 --width 48 --seed 1 --workers 1 --pairing scene --physics-gap 1 --no-progress > data_long.log 2>&1; }
RO="--data data_long --horizon 64 --eval.probe=$D/probe --videos 1"  # own chain: from the simulator's first frame
[ -f rollout_sft/rollout.json ] || { log "rollout sft"; $SF rollout --ckpt sft $RO --sample.mask_mode=paired-sim --out rollout_sft > rollout_sft.log 2>&1; }
[ -f rollout_simforcing/rollout.json ] || { log "rollout simforcing"; $SF rollout --ckpt simforcing $RO --sample.mask_mode=paired-sim --out rollout_simforcing > rollout_simforcing.log 2>&1; }
[ -f rollout_simforcing_twin/rollout.json ] || { log "rollout simforcing twin"; $SF rollout --ckpt simforcing $RO --sample.condition=render --rows rollout restart 'sim chain' --out rollout_simforcing_twin > rollout_simforcing_twin.log 2>&1; }
POL="base@500=$D/wm_eval/policies/base_500 SFT-WM@500=$D/wm_eval/policies/sft_500 SimForcing-WM@500=$D/wm_eval/policies/simforcing_500"
COMMON="--per-task 20 --max-steps 30 --layouts 2 --jitter 0.03 --runs $POL --expert-noise 0.01 0.02 0.04 --judge $D/wm_eval/judge"
for WHO in simforcing_student:render simforcing_student:rollout sft_student:rollout; do
  RUN=${WHO%%:*}; C=${WHO##*:}; E=pool_${RUN}_$C
  [ -f $E/eval.json ] || { log "pool $RUN $C"; $SF policy eval --env world-model --wm $RUN --wm-condition $C $COMMON --out $E > $E.log 2>&1; }
done
[ -f agreement/agreement.json ] || $SF policy agreement --sim $D/wm_eval/pool_sim --wm twin=pool_simforcing_student_render own=pool_simforcing_student_rollout sft=pool_sft_student_rollout --out agreement > agreement.log 2>&1
log "all done"
