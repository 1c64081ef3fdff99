"""Benchmark section ``simulator`` (opt-in: ``--sections simulator``): the embedded synthetic benchmark's MuJoCo
simulator per video frame, the pieces a closed loop pays for — the controller (``servo.servo_frame``: an IK solve,
then 100 physics steps of the position servos) in the real scene (contacts, objects) and in the arm's twin alone, and
the rendering of a real frame (two shadowed lights, textures; colour and arm mask) and of a twin frame (the arm on
black, what ``--wm-condition render`` draws for every condition frame).

The servo frame is timed against its reference, the same frame as a Python loop of ``mj_step`` calls
(``servo.stepped_servo_frame``), in turns (``measure.time_round_robin``), each on a fresh copy of the same episodes
driven by their scripted targets; ``identical`` says the two left the same physics state to the last bit (positions,
velocities, the solver's warm start, controls). One thread, the demo's frame size; ``lp_num_threads`` is llvmpipe's
thread setting the renders ran with (``data.synthetic.offscreen``). No dataset or checkpoint is needed.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np
import torch

from simforcing.bench.measure import time_round_robin
from simforcing.bench.options import BenchOptions

HEIGHT, WIDTH = 32, 48  # the demo's frames
SEED = 1  # the scenes' dataset seed (episode i of it: its real scene, camera and scripted motion)
CPU = torch.device("cpu")  # what time_round_robin synchronises: the simulator runs on the CPU


class _ArmTwin:
    """One episode's twin of the arm alone, started by the twin itself (``SyntheticTwin.start``: where ``data synth``
    places the arm), with the names ``_drive`` reads."""

    def __init__(self, ep, twin_episode):
        sim = twin_episode.sim
        self.model, self.data, self.ctl, self.q = sim.model, twin_episode.data, sim.ctl, twin_episode.q
        self.arm_act, self.finger_act, self.renderer = sim.arm_act, sim.finger_act, sim.renderer
        self.motion, self.camera = ep.motion, twin_episode.camera


def _arm_twins(twin, eps: list) -> list:
    """The arm's twins of the episodes ``eps`` (``EpisodePhysics``), each at its start (its state, its scripted
    target)."""
    from simforcing.data.twin_episode import TwinEpisode

    twin.start([TwinEpisode(ep.state(), ep.twin_record(), (ep.motion.pos[0], ep.motion.rpy[0], ep.motion.grip[0]))
                for ep in eps])
    return [_ArmTwin(ep, e) for ep, e in zip(eps, twin.episodes)]


def _drive(sims: list, frame_fn: Callable, frames: int) -> None:
    """Drive every sim (``EpisodePhysics`` or ``_ArmTwin``) through its first ``frames`` scripted targets."""
    for sim in sims:
        mo = sim.motion
        for t in range(1, frames + 1):
            sim.q = frame_fn(sim.model, sim.data, sim.ctl, sim.q, mo.pos[t], mo.rpy[t], mo.grip[t], sim.arm_act,
                             sim.finger_act)


def _state(sims: list) -> np.ndarray:
    return np.concatenate([np.concatenate([s.data.qpos, s.data.qvel, s.data.qacc_warmstart, s.data.ctrl, s.q])
                           for s in sims])


def bench_simulator(opts: BenchOptions, log: Callable[[str], None] = print) -> dict:
    from simforcing.data.synthetic.generate import EpisodePhysics, RealRenderer
    from simforcing.data.synthetic.scene import MESH
    from simforcing.data.synthetic.servo import servo_frame, stepped_servo_frame
    from simforcing.data.synthetic.twin import SyntheticTwin

    twin = SyntheticTwin(HEIGHT, WIDTH)  # the arm's twins of every round (one model, one renderer)

    n, frames, repeats = opts.sim_episodes, opts.sim_frames, opts.sim_repeats
    log(f"simulator: {n} episodes x {frames} frames, {repeats} rounds")
    length = frames + 1
    rows = []

    def fresh(kind: str) -> list:
        eps = [EpisodePhysics(SEED, i, length) for i in range(n)]
        return eps if kind == "real scene" else _arm_twins(twin, eps)

    for kind in ("real scene", "arm twin"):
        made = {"servo": [], "stepped": []}  # the sims each round drives (made before it: not timed)
        ends = {"servo": [], "stepped": []}

        def run(which: str, fn: Callable) -> Callable[[], None]:
            def call() -> None:
                sims = made[which].pop()
                _drive(sims, fn, frames)
                ends[which].append(_state(sims))
            return call

        for which in made:
            made[which] = [fresh(kind) for _ in range(repeats + 1)]  # one round untimed first
        times = time_round_robin({"servo": run("servo", servo_frame), "stepped": run("stepped", stepped_servo_frame)},
                                 repeats, 1, CPU)
        per = n * frames
        ours, ref = times["servo"].median / per, times["stepped"].median / per
        rows.append({"what": f"servo frame, {kind}", "unit": "frame", "ms": ours * 1e3, "reference_ms": ref * 1e3,
                     "speedup": ref / ours,
                     "identical": all(np.array_equal(a, b) for a, b in zip(ends["servo"], ends["stepped"]))})

    # the IK alone: the real scene's controller on its scripted targets, each solve from the last solution
    eps = fresh("real scene")

    def solves() -> None:
        for ep in eps:
            q = ep.q
            for t in range(1, length):
                q = ep.ctl.solve(q, ep.motion.pos[t], ep.motion.rpy[t])

    ik = time_round_robin({"ik": solves}, repeats, 1, CPU)["ik"].median / (n * frames)
    rows.insert(0, {"what": "IK solve (the arm's 6 joints)", "unit": "solve", "ms": ik * 1e3})

    # rendering: a real frame (colour + arm mask, as data synth renders it) and a twin frame, at each episode's start
    real = [(RealRenderer(ep.model, HEIGHT, WIDTH), ep) for ep in eps]
    twins = _arm_twins(twin, eps)

    def render_real() -> None:
        for r, ep in real:
            r.render(ep.data, ep.camera.to_mjv())

    def render_twin() -> None:
        for tw in twins:
            tw.renderer.update_scene(tw.data, camera=tw.camera)
            tw.renderer.render()

    try:
        t = time_round_robin({"real": render_real, "twin": render_twin}, opts.sim_render_repeats, 2, CPU)
    finally:
        for r, _ in real:
            r.close()
        twin.close()
    rows += [{"what": "render a real frame (colour + arm mask)", "unit": "frame", "ms": t["real"].median / n * 1e3},
             {"what": "render a twin frame", "unit": "frame", "ms": t["twin"].median / n * 1e3}]
    return {"episodes": n, "frames": frames, "repeats": repeats, "render_repeats": opts.sim_render_repeats,
            "resolution": [HEIGHT, WIDTH], "mesh": list(MESH),
            "lp_num_threads": os.environ.get("LP_NUM_THREADS"), "rows": rows,
            "median_of": "rounds (each round: every episode, one after the other)"}


def simulator_table(s: dict) -> list[str]:
    """The section's markdown table."""
    lines = [f"Simulator ({s['episodes']} episodes of the benchmark, {s['frames']} scripted frames each, "
             f"{s['resolution'][0]}x{s['resolution'][1]}, tessellation {s['mesh'][0]} x {s['mesh'][1]}, "
             f"LP_NUM_THREADS={s['lp_num_threads']}; medians of {s['repeats']} rounds, renders of "
             f"{s['render_repeats']}):", "",
             "| piece | ms | stepped loop (ms) | speed-up | same state to the bit |", "|---|---|---|---|---|"]
    for r in s["rows"]:
        if "reference_ms" in r:
            lines.append(f"| {r['what']} | {r['ms']:.3f} | {r['reference_ms']:.3f} | {r['speedup']:.2f}x | "
                         f"{'yes' if r['identical'] else 'NO'} |")
        else:
            lines.append(f"| {r['what']} | {r['ms']:.3f} | | | |")
    return lines + [""]
