"""The success judge: task success read from frames (``success_judge.py``: the network, its fitting, saving and
loading, per-frame verdicts), its fitting frames from simulator rollouts (``sim_frames.py``, `model fit-judge
--sim-episodes`) and its validation against the simulator's own verdicts (``validation.py``)."""
