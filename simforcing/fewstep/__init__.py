"""A few-step world model: the guided two-stage sampler (N_s + 2·N_r network evaluations per chunk) distilled into a
student that samples in K ∈ {1, 2, 4} evaluations of its conditional branch (plus the N_s of its simulation
rollout). docs/FEWSTEP.md has the objectives, docs/notebook/fewstep.md the measurements.

- ``objective``: the distillation objectives (``trajectory``, ``progressive``) and the step function;
- ``stage``: `simforcing distill` as a stage of the shared training loop (``DISTILL``, ``distill_run``);
- the student's sampler is ``sample.FewStepSampler``, what ``sample.sampler_for`` returns for a student run (in
  ``sample``: the sampler sits below everything that builds on it);
- ``job``: distil and evaluate a student against its teacher on the same windows (for the demo).
"""
