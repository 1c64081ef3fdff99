#!/usr/bin/env bash
# The demo's own SimForcing few-step student (the paper's data) on the pool: its own chain, the twin, 4 noise draws;
# its fidelity point (the data axis' 40 scripted episodes).
set -euo pipefail
D=$(realpath ${DEMO:-runs/demo}); X=$(realpath -m ${STUDY:-runs/evaluator_study})/paper; SF="${SF:-simforcing}"
export MUJOCO_GL=egl OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p $X; cd $X
POL="base@500=$D/wm_eval/policies/base_500 SFT-WM@500=$D/wm_eval/policies/sft_500 SimForcing-WM@500=$D/wm_eval/policies/simforcing_500"
COMMON="--per-task 20 --max-steps 30 --layouts 2 --jitter 0.03 --runs $POL --expert-noise 0.01 0.02 0.04 --judge $D/wm_eval/judge"
for c in rollout render; do
  [ -f pool_student_$c/eval.json ] || $SF policy eval --env world-model --wm $D/simforcing_fewstep --wm-condition $c $COMMON --out pool_student_$c > pool_student_$c.log 2>&1
  [ -f est_student_$c/estimate.json ] || $SF policy estimate --ground-truth $D/wm_eval/pool_sim --wm-eval pool_student_$c --n 10 --draws 400 --study-n 10 --out est_student_$c > est_student_$c.log 2>&1
done
[ -f pool_student_rollout_k4/eval.json ] || $SF policy eval --env world-model --wm $D/simforcing_fewstep --wm-condition rollout --draws 4 $COMMON --out pool_student_rollout_k4 > pool_student_rollout_k4.log 2>&1
[ -f est_student_rollout_k4/estimate.json ] || $SF policy estimate --ground-truth $D/wm_eval/pool_sim --wm-eval pool_student_rollout_k4 --n 10 --draws 400 --study-n 10 --out est_student_rollout_k4 > est_student_rollout_k4.log 2>&1
[ -f agreement/agreement.json ] || $SF policy agreement --sim $D/wm_eval/pool_sim --wm student-twin=pool_student_render student=pool_student_rollout --out agreement > agreement.log 2>&1
[ -f oracle/eval.json ] || $SF evaluate --ckpt $D/simforcing_fewstep --data $D/data --split val --num-samples 80 --eval.probe=$D/probe --eval.windows_per_episode=5 --sample.condition=oracle --out oracle > oracle.log 2>&1
[ -f twin_rollout/rollout.json ] || $SF rollout --ckpt $D/simforcing_fewstep --data $D/data_long --horizon 64 --eval.probe=$D/probe --sample.condition=render --rows rollout restart --videos 0 --out twin_rollout > twin_rollout.log 2>&1
[ -f fidelity/fidelity.json ] || $SF fidelity point --label paper --oracle oracle --twin twin_rollout --wm-eval pool_student_render --agreement agreement --wm-name student-twin --runs $D/stage1 $D/simforcing $D/simforcing_fewstep --out fidelity > fidelity.log 2>&1
echo "paper done"
