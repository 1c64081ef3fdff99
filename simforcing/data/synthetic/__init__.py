"""The embedded synthetic paired sim/real benchmark (MuJoCo).

    scene.py     the MJCF scenes: the arm (6 hinge joints + parallel gripper), its sim twin on black, the real scene
                 (textured table, objects, distractors, lights and shadows), the full-scene simulation (plain, with
                 physics of its own: SimScene, PhysicsGap), per-episode randomisation
    motions.py   scripted reach / push / grasp end-effector targets (and a failing operator's), the 7-D actions, the
                 differential-IK controller
    tasks.py     the tasks' success predicates
    generate.py  simulate, render sim and real + arm mask: generate_dataset() (`simforcing data synth`)
    twin.py      the digital twin in the loop (SyntheticTwin: the arm alone or an episode's full scene)
    servo.py     the controller in time: one video frame of the position servos (servo_frame), the data's clock

Importing this package does not import MuJoCo; ``generate`` sets ``MUJOCO_GL=egl`` (unless set) before it does.
"""
