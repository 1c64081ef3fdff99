"""The embedded synthetic paired sim/real benchmark (MuJoCo).

    scene.py     the MJCF scenes: the arm (6 hinge joints + parallel gripper), its sim twin on black, the real scene
                 (textured table, objects, distractors, lights and shadows), per-episode randomisation
    motions.py   scripted reach / push / grasp end-effector targets, the 7-D actions, the differential-IK controller
    generate.py  simulate once, render twice (sim, real + arm mask): generate_dataset() (`simforcing data synth`)

Importing this package does not import MuJoCo; ``generate`` sets ``MUJOCO_GL=egl`` (unless set) before it does.
"""
