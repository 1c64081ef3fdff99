"""How far a world model's verdicts on policies can be trusted (`policy agreement`): the agreement of world-model
evaluations with the simulator's (``statistics.py``) and its pictures, the scatter plot and side-by-side episode videos
(``media.py``)."""
