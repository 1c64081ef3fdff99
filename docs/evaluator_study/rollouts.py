"""The paper's one window and the long rollouts on both pairings, side by side (docs/notebook/evaluator.md, "One
window and long rollouts on both pairings"): per world model, its one-window scores on held-out real episodes
(`simforcing evaluate`) and its 8-chunk rollouts of held-out real episodes with its own simulation chain and with the
digital twin rendering its condition, against the same episodes restarted from the recorded frame every chunk
(`simforcing rollout`) — the arm pairing's from a finished `make demo`, the full-scene pairing's from
docs/evaluator_study/scene.sh.

    python docs/evaluator_study/rollouts.py --out docs/evaluator_study/rollouts.json \
        --window "arm|SimForcing=runs/demo/eval/simforcing" "arm|SimForcing|own chain=runs/demo/rollout/simforcing" \
        "scene|SimForcing|twin=runs/evaluator_study/scene/rollout_simforcing_twin" ...

Every number is read from an eval.json (``WindowEvaluation``) or a rollout.json (``RolloutDrift``); nothing is typed
here."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from simforcing.evaluate.results import RolloutDrift, WindowEvaluation

PAIRINGS = {"arm": "the arm on black (the paper's Bridge-like default)",
            "scene": "the whole scene with physics of its own (`data synth --pairing scene --physics-gap 1`)"}
CONDITIONS = ("own chain", "twin")


def _cm(m: float | None) -> float | None:
    return None if m is None else 100 * m


def _spec(spec: str, parts: int, what: str) -> tuple[list[str], str]:
    """``A|B[|C]=FOLDER`` -> ([A, B(, C)], FOLDER), or a SystemExit naming the argument and the form it needs."""
    head, sep, folder = spec.partition("=")
    fields = head.split("|")
    if not sep or len(fields) != parts or fields[0] not in PAIRINGS or (parts == 3 and fields[2] not in CONDITIONS):
        sys.exit(f"rollouts.py: {spec!r}: expected {what}=FOLDER with PAIRING one of {', '.join(PAIRINGS)}"
                 + (f" and CONDITION one of {', '.join(CONDITIONS)}" if parts == 3 else ""))
    return fields, folder


def window(spec: str) -> dict:
    (pairing, model), folder = _spec(spec, 2, "PAIRING|MODEL")
    s = WindowEvaluation.read(folder, f"the one window of {pairing}|{model}").scores
    return {"pairing": pairing, "model": model, "folder": str(folder), "windows": s.num_samples, "psnr": s.psnr,
            "action_error_cm": _cm(s.action.af_pos)}


def rollout(spec: str) -> dict:
    (pairing, model, condition), folder = _spec(spec, 3, "PAIRING|MODEL|CONDITION")
    r = RolloutDrift.read(folder, f"the rollout of {pairing}|{model}|{condition}")
    for name in ("rollout", "restart"):
        if name not in r.rows:
            sys.exit(f"rollouts.py: {folder}/rollout.json has no {name!r} row (rows: {', '.join(r.rows)}); run "
                     "`simforcing rollout` with its default rows or `--rows rollout restart`")
    mean = {k: s.mean for k, s in r.rows.items()}
    cm = {k: _cm(m.get("af_pos")) for k, m in mean.items()}
    return {"pairing": pairing, "model": model, "condition": condition, "folder": str(folder),
            "episodes": r.num_episodes, "chunks": r.chunks, "sampler": r.sampler,
            "psnr": {k: m.get("psnr") for k, m in mean.items()}, "action_error_cm": cm,
            "drift_cm": None if cm["rollout"] is None or cm["restart"] is None else cm["rollout"] - cm["restart"],
            "condition_psnr": mean.get("sim chain", {}).get("psnr")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rollouts", nargs="*", metavar="PAIRING|MODEL|CONDITION=FOLDER")
    ap.add_argument("--window", action="append", default=[], metavar="PAIRING|MODEL=EVAL_FOLDER")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    body = {"format": "simforcing.pairings_windows_rollouts", "pairings": PAIRINGS,
            "windows": [window(s) for s in args.window], "rollouts": [rollout(s) for s in args.rollouts]}
    args.out.write_text(json.dumps(body, indent=1) + "\n")
    print(f"wrote {args.out} ({len(body['windows'])} windows, {len(body['rollouts'])} rollouts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
