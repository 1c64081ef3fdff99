"""Policies acting in an environment, and what that records: the synthetic MuJoCo benchmark and its scripted expert
(``synthetic.py``), the players and the simulator's evaluation (``evaluate.py``, `policy eval --env synthetic`), LIBERO
(``libero.py``), the same episodes inside a world model judged from its frames (``world_model_eval.py``, `policy eval
--env world-model`), and the typed results (``results.py``) with their markdown tables (``tables.py``)."""
