#!/usr/bin/env bash
# One evaluator variant: its data, stage 2 from the demo's stage 1, its K=1 student, the 60-scene pool inside the
# student (own chain and twin), the estimates against the demo's simulator pool.
# usage: DEMO=runs/demo STUDY=runs/evaluator_study variant.sh NAME "DATA SYNTH ARGS" "TRAIN OVERRIDES" [STEPS]
set -euo pipefail
NAME=$1; SYNTH=$2; TRAINOV=${3:-}; STEPS=${4:-600}
D=$(realpath ${DEMO:-runs/demo}); X=$(realpath -m ${STUDY:-runs/evaluator_study})/$NAME; SF="${SF:-simforcing}"
export MUJOCO_GL=egl OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p $X; cd $X
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $X/steps.log; }
if [ ! -f data/meta/info.json ] && [ ! -d data/meta ]; then
  log "data: $SYNTH"
  $SF data synth --out data --length 33 --height 32 --width 48 --seed 0 --workers 1 --layouts 2 --jitter 0.03 $SYNTH > data.log 2>&1
fi
if [ ! -f run/status.json ] || ! grep -q '"state": "finished"' run/status.json 2>/dev/null; then
  log "train ($STEPS steps) $TRAINOV"
  RES=""; [ -d run/checkpoints ] && RES="--resume"
  $SF train --method simforcing --teacher $D/stage1 --data data --out run --train.seed=42 --train.max_steps=$STEPS \
     --train.batch_size=8 --train.threads=1 --train.log_every=50 $TRAINOV $RES > train.log 2>&1
fi
if [ ! -d student/checkpoints ]; then
  log "distill"
  $SF distill --teacher run --steps 1 --objective trajectory --data data --out student --train.lr=3e-4 \
     --train.batch_size=2 --train.max_steps=100 --train.ckpt_every=100 --train.threads=1 --no-progress > distill.log 2>&1
fi
POL=$(ls -d $D/wm_eval/policies/*_500 | while read p; do n=$(basename $p); case $n in base_500) echo "base@500=$p";; sft_500) echo "SFT-WM@500=$p";; simforcing_500) echo "SimForcing-WM@500=$p";; esac; done | tr '\n' ' ')
COMMON="--per-task 20 --max-steps 30 --layouts 2 --jitter 0.03 --runs $POL --expert-noise 0.01 0.02 0.04 --judge $D/wm_eval/judge"
for COND in rollout render; do
  for WHO in ${WHOS:-student}; do
    E=pool_${WHO}_${COND}
    if [ ! -f $E/eval.json ]; then
      log "pool $WHO $COND ${DRAWS:+draws $DRAWS}"
      $SF policy eval --env world-model --wm $WHO --wm-condition $COND ${DRAWS:+--draws $DRAWS} $COMMON --out $E > $E.log 2>&1
    fi
    if [ ! -f est_${WHO}_${COND}/estimate.json ]; then
      $SF policy estimate --ground-truth $D/wm_eval/pool_sim --wm-eval $E --n 10 --draws 400 --study-n 10 --out est_${WHO}_${COND} > est_${WHO}_${COND}.log 2>&1
      log "estimate $WHO $COND done"
    fi
  done
done
log "all done"
# the fidelity point of the variant's student (the data axis of the curve)
if [ ! -f oracle/eval.json ]; then log "oracle eval"
  $SF evaluate --ckpt student --data $D/data --split val --num-samples 80 --eval.probe=$D/probe --eval.windows_per_episode=5 --sample.condition=oracle --out oracle > oracle.log 2>&1; fi
if [ ! -f twin_rollout/rollout.json ]; then log "twin rollout"
  $SF rollout --ckpt student --data $D/data_long --horizon 64 --eval.probe=$D/probe --sample.condition=render --rows rollout restart --videos 0 --out twin_rollout > twin_rollout.log 2>&1; fi
if [ ! -f agreement/agreement.json ]; then log "agreement"
  $SF policy agreement --sim $D/wm_eval/pool_sim --wm student-twin=pool_student_render student=pool_student_rollout --out agreement > agreement.log 2>&1; fi
if [ ! -f fidelity/fidelity.json ]; then log "fidelity point"
  $SF fidelity point --label $NAME --oracle oracle --twin twin_rollout --wm-eval pool_student_render --agreement agreement --wm-name student-twin --runs $D/stage1 run student --out fidelity > fidelity.log 2>&1; fi
log "fidelity done"
