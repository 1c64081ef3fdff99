#!/usr/bin/env bash
# Which truth the coverage study checks (docs/notebook/real_trials.md, "The pool's rate or the policy's"): the
# demo's evaluator pool and the full-scene study's pool (docs/evaluator_study/scene.sh), each estimate's coverage
# study run three times — the pool's own rate (`--study-design pool`, what the other tables report), the rate of the
# population the pool samples (`population`), and that again with the interval as it was before 2026-12-07 (the
# correlation the trials' own, `--disagreement-prior 0`, and no refit variance) — then the record. No world model
# runs: every input is a pool already evaluated. About 9 core-minutes. SCENE_DEMO: the demo whose simulator pool is
# the full-scene study's truth (its DEMO; default DEMO_ROOT).
#
#   docs/real_trials_demo/designs.sh runs/demo runs/evaluator_study/scene [runs/designs]
set -euo pipefail
D=$(realpath ${1:?DEMO_ROOT}); S=$(realpath ${2:?SCENE_STUDY}); X=$(realpath -m ${3:-runs/designs}); SF="${SF:-simforcing}"
G=$(realpath ${SCENE_DEMO:-$D}); here=$(dirname "$(realpath "$0")")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p $X
ROWS=()
est() {  # name, simulator pool, world-model pool, predictor: the pool's truth, the population's, and the population's
  # with the interval before 2026-12-07 (--disagreement-prior 0 --no-refit-variance)
  for v in pool:default population:default population:0; do
    design=${v%%:*}; prior=${v##*:}; out=$X/$(echo "$1" | tr -c 'A-Za-z0-9\n' '_')_${design}_$prior
    flag=""; [ $prior = default ] || flag="--disagreement-prior $prior --no-refit-variance"
    [ -f $out/estimate.json ] || $SF policy estimate --ground-truth $2 --wm-eval $3 --n 10 --draws 400 --study-n 10 20 \
      --predictor $4 --study-design $design $flag --out $out > $out.log 2>&1
    ROWS+=("$1=$out")
  done
}
est "the demo's evaluator with the twin, hand" $D/wm_eval/pool_sim $D/wm_eval/pool_wm_evaluator-fewstep-twin hand
est "the demo's evaluator with the twin, learned" $D/wm_eval/pool_sim $D/wm_eval/pool_wm_evaluator-fewstep-twin learned
est "full scene: the simulator alone" $G/wm_eval/pool_sim $S/pool_simforcing_student_render twin
est "full scene: SimForcing with the twin, learned" $G/wm_eval/pool_sim $S/pool_simforcing_student_render learned
python $here/designs.py --out $here/designs.json "${ROWS[@]}"
