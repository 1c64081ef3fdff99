#!/usr/bin/env bash
# The full-scene table's record (docs/POLICY_EVALUATION.md, "An evaluator world model, and the full-scene pairing")
# from the pools docs/evaluator_study/scene.sh evaluated: each row's estimate run again with today's interval, then
# docs/evaluator_study/record.py; and the long rollouts of both pairings (scene.sh's beside the demo's own,
# docs/evaluator_study/rollouts.py). No world model runs; about 3 core-minutes. TRUTH: the simulator pool of the demo
# scene.sh ran beside (its DEMO).
#
#   docs/evaluator_study/scene_estimates.sh runs/evaluator_study/scene runs/demo [runs/scene_estimates]
set -euo pipefail
S=$(realpath ${1:?SCENE_STUDY}); D=$(realpath ${2:?DEMO_ROOT}); X=$(realpath -m ${3:-runs/scene_estimates})
SF="${SF:-simforcing}"; here=$(dirname "$(realpath "$0")")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p $X
est() {  # pool, predictor -> $X/est_POOL_PREDICTOR
  [ -f $X/est_$1_$2/estimate.json ] || $SF policy estimate --ground-truth $D/wm_eval/pool_sim --wm-eval $S/$1 --n 10 \
    --draws 400 --study-n 10 --predictor $2 --out $X/est_$1_$2 > $X/est_$1_$2.log 2>&1
}
est pool_simforcing_student_render twin
est pool_simforcing_student_render learned
est pool_simforcing_student_render verdict
est pool_simforcing_student_rollout learned
est pool_sft_student_rollout learned
A=$S/agreement
python $here/record.py --truth $D/wm_eval/pool_sim --out $here/scene.json --runs-from $S \
  "simulator alone (the full-scene twin's verdict)=$S/pool_simforcing_student_render:$X/est_pool_simforcing_student_render_twin" \
  "full scene: SimForcing, twin=$S/pool_simforcing_student_render:$X/est_pool_simforcing_student_render_learned:$A:twin" \
  "full scene: SimForcing, twin, its verdict alone=$S/pool_simforcing_student_render:$X/est_pool_simforcing_student_render_verdict:$A:twin" \
  "full scene: SimForcing, own chain=$S/pool_simforcing_student_rollout:$X/est_pool_simforcing_student_rollout_learned:$A:own" \
  "full scene: sft=$S/pool_sft_student_rollout:$X/est_pool_sft_student_rollout_learned:$A:sft"
python $here/rollouts.py --out $here/rollouts.json \
  --window "arm|copy the first frame=$D/eval/copy-first" --window "arm|sft=$D/eval/sft" \
  --window "arm|SimForcing=$D/eval/simforcing" --window "scene|copy the first frame=$S/eval_copy" \
  --window "scene|sft=$S/eval_sft" --window "scene|SimForcing=$S/eval_simforcing" \
  "arm|sft|own chain=$D/rollout/sft" "arm|SimForcing|own chain=$D/rollout/simforcing" \
  "arm|SimForcing|twin=$D/rollout/simforcing_twin" \
  "scene|sft|own chain=$S/rollout_sft" "scene|SimForcing|own chain=$S/rollout_simforcing" \
  "scene|SimForcing|twin=$S/rollout_simforcing_twin"
