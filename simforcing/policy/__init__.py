"""Downstream policy learning from the world model (paper §VLA, Tab. 5; SPEC §9).

The policy is the world model's network built with ``model.action_head`` (``models/world_model.py``) and a policy
attention mask. This folder learns one; its sub-folders run and score policies:

- learning: the settings (``settings.py``), a run's config (``configs.py``), the policy dataset (``data.py``;
  ``synth_data.py``: scripted-expert demonstrations), the training step (``steps.py``), initialisation from another
  run (``init.py``), training (``train.py``: the world model's loop, generalised), inference per action chunk
  (``infer.py``) and what the frozen video expert hands the policy (``probe.py``);
- ``closed_loop/``: policies acting in an environment — the synthetic benchmark (``synthetic.py``), the simulator's
  evaluation and its players (``evaluate.py``), LIBERO (``libero.py``), the inside of a world model
  (``world_model_eval.py``) — and the typed results with their tables (``results.py``, ``tables.py``);
- ``judge/``: the success judge that reads task success from frames (``success_judge.py``), its fitting data from
  simulator rollouts (``sim_frames.py``) and its validation on the simulator's own frames (``validation.py``);
- ``agreement/``: how far a world model's verdicts on policies agree with the simulator's (``statistics.py``) and
  their pictures (``media.py``).

The demo's policy sections live with the demo (``demo/policy_section.py``, ``demo/transfer_section.py``).
"""
