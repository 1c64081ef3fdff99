#!/bin/bash
# The record of the curve in docs/FAITHFUL.md: the points made by docs/fidelity_curve/point.sh (run
# from /work/democlone, a finished demo at 094e495) and the earlier measurements of FAITHFUL.md, assembled here.
# The fidelity-compute curve from the measured points (docs/FAITHFUL.md). Core-seconds: user + sys of /usr/bin/time
# around each training command (one thread); the full-budget 2x2 stage 1 (2,000 steps, the demo's) is 2x the measured
# 1,000-step stage 1 of s2x2_half (same model, batch and data), its 600-step stage 2 = the measured 1,200-step one / 2.
set -e
cd /work/democlone/runs
S=/work/main/.venv/bin/simforcing
C=curve; F=faithful_concat; D=demo
cs() { awk '{print $2 + $3}' $1; }
s1half=$(cs $C/s2x2_half/time_stage1.txt)
s1full=$(python3 -c "print(2 * $s1half)")
s2full=$(python3 -c "print($(cs $C/s2x2_stage2x2/time_stage2.txt) / 2)")
pt() { slug=$1; name=$2; shift 2; $S fidelity point --label "$name" "$@" --out $C/points/$slug > /dev/null; echo "$name ok"; }
pt demo "2x2, 600 stage-2 steps (the demo)" --oracle $F/eval/paper_oracle --twin $D/rollout/simforcing_twin \
   --wm-eval $D/wm_eval/wm_simforcing-twin --agreement $D/wm_eval/agreement --wm-name simforcing-twin \
   --core-s $(python3 -c "print($s1full + $s2full)")
pt concat "2x2, concat path" --oracle $F/eval/concat_oracle --twin $F/rollout/concat_twin --wm-eval $F/wm_eval/wm_concat-twin \
   --agreement $F/wm_eval/agreement --wm-name concat-twin --core-s $(python3 -c "print($s1full + 178.74 + 8.87)")
pt both "2x2, both paths" --oracle $F/eval/both_oracle --twin $F/rollout/both_twin --wm-eval $F/wm_eval/wm_both-twin \
   --agreement $F/wm_eval/agreement --wm-name both-twin --core-s $(python3 -c "print($s1full + 178.88 + 10.15)")
for p in s2x2_stage2x2 s2x2_half p1x1_half depth8_half; do
  [ -f $C/$p/DONE ] || { echo "$p not done"; continue; }
  case $p in
    s2x2_stage2x2) label="2x2, 1200 stage-2 steps"; core=$(python3 -c "print($s1full + $(cs $C/$p/time_stage2.txt))");;
    s2x2_half) label="2x2, half budget"; core=$(python3 -c "print($(cs $C/$p/time_stage1.txt) + $(cs $C/$p/time_stage2.txt))");;
    p1x1_half) label="1x1 patch, half budget"; core=$(python3 -c "print($(cs $C/$p/time_stage1.txt) + $(cs $C/$p/time_stage2.txt))");;
    depth8_half) label="2x2, 8 layers, half budget"; core=$(python3 -c "print($(cs $C/$p/time_stage1.txt) + $(cs $C/$p/time_stage2.txt))");;
  esac
  pt $p "$label" --oracle $C/$p/eval_oracle --twin $C/$p/rollout_twin --wm-eval $C/$p/wm_twin --agreement $C/$p/agreement \
     --core-s $core
done
$S fidelity curve --points $C/points/* --out /work/main/docs/fidelity_curve
