#!/usr/bin/env bash
# The evaluator study (docs/POLICY_EVALUATION.md "An evaluator world model", "The full-scene pairing"): from a finished
# `make demo` (DEMO_ROOT: its stage 1, judge, policies and 60-scene simulator pool), every variant's data, stage 2,
# few-step student, the pool inside it with its own chain and with the twin, the estimates and its fidelity point;
# then the records. About 15 core-minutes a variant (2 hours in all on a 2-core machine, the full-scene part included).
#
#   docs/evaluator_study/study.sh runs/demo [runs/evaluator_study]
set -euo pipefail
export DEMO=$(realpath ${1:?DEMO_ROOT}) STUDY=$(realpath -m ${2:-runs/evaluator_study})
here=$(dirname "$(realpath "$0")")
v() { bash $here/variant.sh "$@"; }
v recipe40 "--num-train 20 --num-val 0 --num-sim-pool 0 --layout-train 20 --recipe evaluator --no-progress" ""
v recipe120 "--num-train 20 --num-val 0 --num-sim-pool 0 --layout-train 100 --recipe evaluator --no-progress" ""
v recipe360 "--num-train 20 --num-val 0 --num-sim-pool 0 --layout-train 340 --recipe evaluator --no-progress" ""
v noise_pauses120 "--num-train 20 --num-val 0 --num-sim-pool 0 --layout-train 100 --action-noise 0.05 --action-noise-splits train --pauses 2 --pause-splits train --no-progress" ""
mkdir -p $STUDY/frame_both120 && ln -sfn $STUDY/noise_pauses120/data $STUDY/frame_both120/data
v frame_both120 "" "--model.action_conditioning=both"
bash $here/scene.sh
bash $here/paper.sh   # the demo's own SimForcing student (the paper's data), and K = 4 noise draws of it
python $here/record.py --truth $DEMO/wm_eval/pool_sim --out $here/study.json \
  "paper data, own chain=$STUDY/paper/pool_student_rollout:$STUDY/paper/est_student_rollout:$STUDY/paper/agreement:student" \
  "paper data, twin=$STUDY/paper/pool_student_render:$STUDY/paper/est_student_render:$STUDY/paper/agreement:student-twin" \
  "paper data, own chain, 4 draws=$STUDY/paper/pool_student_rollout_k4:$STUDY/paper/est_student_rollout_k4" \
  $(for n in recipe40 recipe120 recipe360 noise_pauses120 frame_both120; do for c in rollout render; do
      echo "$n, $([ $c = render ] && echo twin || echo own chain)=$STUDY/$n/pool_student_$c:$STUDY/$n/est_student_$c:$STUDY/$n/agreement:student$([ $c = render ] && echo -twin)"; done; done)
bash $here/scene_estimates.sh $STUDY/scene $DEMO $STUDY/scene_estimates  # scene.json and rollouts.json
simforcing fidelity curve --points $here/../fidelity_curve $(for n in recipe40 recipe120 recipe360 noise_pauses120 frame_both120 paper; do echo "$n=$STUDY/$n/fidelity"; done) --out $STUDY/curve
