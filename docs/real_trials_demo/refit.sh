#!/usr/bin/env bash
# The learned predictor's own noise (docs/notebook/real_trials.md, "The learned predictor's refit variance"): the
# demo's evaluator pools (with the twin, and with its own chain), the learned predictor, the population design at
# n = 10 over 3,000 draws (a coverage's s.e. ≈ 0.4 %), each with its refit variance (the default) and without
# (`--no-refit-variance`, the interval before 2026-12-07); then the record. No world model runs. About 6 core-minutes.
#
#   docs/real_trials_demo/refit.sh runs/demo [runs/refit]
set -euo pipefail
D=$(realpath ${1:?DEMO_ROOT}); X=$(realpath -m ${2:-runs/refit}); SF="${SF:-simforcing}"
here=$(dirname "$(realpath "$0")")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p $X
ROWS=()
for wm in evaluator-fewstep-twin evaluator-fewstep; do
  for v in refit no-refit; do
    out=$X/${wm}_$v; flag=""; [ $v = refit ] || flag="--no-refit-variance"
    [ -f $out/estimate.json ] || $SF policy estimate --ground-truth $D/wm_eval/pool_sim --wm-eval $D/wm_eval/pool_wm_$wm \
      --n 10 --draws 3000 --study-n 10 --study-design population $flag --out $out > $out.log 2>&1
    ROWS+=("the demo's $wm=$out")
  done
done
python $here/designs.py --out $here/refit.json "${ROWS[@]}"
