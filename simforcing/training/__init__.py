"""The training loop every stage shares (``loop.py``), a stage as one specification (``stage.py``), and the parts a
run owns, one file each, composed by the loop with explicit inputs:

- ``folder.py``: the run folder — the checks before any work, its claim (lock, run record), config/teacher/init files;
- ``resume.py``: the checkpoint a ``--resume`` continues from and its restore;
- ``step.py``: one training step (autocast + step function, backward, clipping, the optimizer update) — the same
  function for the loop and both benchmarks — and the loop's ``TrainStep`` around it;
- ``checkpointer.py``: the checkpoints the loop writes;
- ``runlog.py``: what a run writes besides checkpoints (metrics.jsonl, TensorBoard, status.json);
- ``faults.py``: stop requests (SIGTERM/SIGINT) and the fault-injection wrappers of the tests;
- ``optim.py``: the recipe's optimizer and its warm-up + cosine schedule, and changed settings applied on resume;
- ``checks.py``: what may continue a run or teach it (resume, teacher, the data a run recorded).
"""
