"""The pieces of the training loop (``simforcing.train.Trainer``), one file per thing the loop owns:

- ``step.py``: one training step (autocast + step function, backward, clipping, the optimizer update) — the same
  function for the loop and both benchmarks;
- ``optim.py``: the recipe's optimizer and schedule, and applying changed settings to a restored optimizer;
- ``checks.py``: what may continue a run or teach it (resume, teacher, the data a run recorded);
- ``runlog.py``: what a run writes besides checkpoints (metrics.jsonl, TensorBoard, status.json);
- ``faults.py``: stop requests (SIGTERM/SIGINT) and the fault-injection hook of the tests.
"""
