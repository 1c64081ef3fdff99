"""Downstream policy learning from the world model (paper §VLA, Tab. 5; SPEC §9).

The policy is the world model's network built with ``model.action_head`` (``models/world_model.py``) and a policy
attention mask; this package holds everything around it: settings (``settings``), the policy dataset (``data``,
``synth_data``), the training step (``steps``), initialisation from a world-model run (``init``), training
(``train``: the world model's loop, generalised), inference per action chunk (``infer``), closed-loop evaluation on
the synthetic benchmark (``synthetic``, ``evaluate``) and on LIBERO (``libero``), and the demo's section (``demo``).
"""
