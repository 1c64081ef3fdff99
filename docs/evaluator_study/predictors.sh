#!/usr/bin/env bash
# What predicts a policy's real success per episode (docs/POLICY_EVALUATION.md, "What the world model adds"): a
# finished `make demo`'s 60-scene pools, each world model estimated with the hand from the executed actions (`hand`)
# (`hand`), and the control that reads no predicted frame (`actions`); then the record.
# About 5 core-minutes (no world model runs: every input is a pool the demo evaluated).
#
#   docs/evaluator_study/predictors.sh runs/demo [runs/predictors]
set -euo pipefail
D=$(realpath ${1:?DEMO_ROOT}); X=$(realpath -m ${2:-runs/predictors}); SF="${SF:-simforcing}"
here=$(dirname "$(realpath "$0")")
export MUJOCO_GL=egl OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p $X
WMS="evaluator-fewstep-twin evaluator-fewstep simforcing-fewstep-twin simforcing-fewstep sft-fewstep"
est() {  # world model, predictor
  [ -f $X/est_$1_$2/estimate.json ] || $SF policy estimate --ground-truth $D/wm_eval/pool_sim \
    --wm-eval $D/wm_eval/pool_wm_$1 --n 10 --draws 400 --study-n 10 --predictor $2 --out $X/est_$1_$2 > $X/est_$1_$2.log 2>&1
}
for w in $WMS; do est $w hand; done
est evaluator-fewstep-twin actions
A=$D/wm_eval/pool_agreement
python $here/record.py --truth $D/wm_eval/pool_sim --out $here/predictors.json --runs-from $D/../.. \
  $(for w in $WMS; do echo "$w=$D/wm_eval/pool_wm_$w:$X/est_${w}_hand:$A:$w"; done) \
  "evaluator-fewstep-twin, its actions alone=$D/wm_eval/pool_wm_evaluator-fewstep-twin:$X/est_evaluator-fewstep-twin_actions:$A:evaluator-fewstep-twin"
