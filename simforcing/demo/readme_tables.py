"""The README's two demo tables, written from a recorded run rather than copied by hand.

``figures(results)`` takes the numbers the README quotes out of a demo's ``results.json``;
``docs/demo_timing/record.py`` keeps them in ``timing.json`` beside that run's times, and
``docs/demo_timing/record.py --readme LABEL`` rewrites the README's block between :data:`BEGIN` and :data:`END` with
:func:`render` of that entry. ``tests/test_readme.py`` checks that the block is the rendering of the entry it names, so
the README cannot drift from the recorded run.
"""

from __future__ import annotations

import re
from typing import Optional

from simforcing.demo.report import CM

BEGIN = "<!-- demo tables from docs/demo_timing/timing.json: {label} -->"
END = "<!-- end of demo tables -->"

# (figure key, world model as the agreement names it)
RANKED = (("pearson_harness", "simulator frames through the judge"), ("pearson_sft", "sft"),
          ("pearson_simforcing", "simforcing"), ("pearson_twin", "simforcing-twin"),
          ("pearson_student", "simforcing-fewstep"))


def _get(d: dict, *keys) -> Optional[float]:
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return float(d)


def figures(results: dict) -> dict[str, Optional[float]]:
    """The README's numbers from a demo's results.json (None where the run made no such row)."""
    rows = (results.get("summary") or {}).get("rows") or {}
    copy_first = (results.get("baselines") or {}).get("copy-first") or {}
    few = (results.get("fewstep") or {}).get("windows") or {}
    runs = (results.get("rollouts") or {}).get("runs") or {}
    ranking = ((results.get("wm_eval") or {}).get("agreement") or {}).get("ranking") or {}

    def cm(v: Optional[float]) -> Optional[float]:
        return None if v is None else v * CM

    out = {"copy_psnr": _get(copy_first, "psnr"), "copy_cm": cm(_get(copy_first, "af_pos"))}
    for m in ("sft", "simforcing"):
        out[f"{m}_psnr"], out[f"{m}_cm"] = _get(rows, m, "psnr"), cm(_get(rows, m, "af_pos"))
    out["student_psnr"], out["student_cm"] = _get(few, "psnr", "student"), cm(_get(few, "af_pos", "student"))
    for key, run in (("rollout", "simforcing"), ("rollout_twin", "simforcing twin")):
        mean = ((runs.get(run) or {}).get("rows") or {}).get("rollout", {}).get("mean", {})
        out[f"{key}_psnr"], out[f"{key}_cm"] = _get(mean, "psnr"), cm(_get(mean, "af_pos"))
    for key, name in RANKED:
        out[key] = _get(ranking, name, "all", "pearson")
    return out


def _f(v: Optional[float]) -> str:
    return "—" if v is None else f"{v:.2f}"


def render(entry: dict) -> str:
    """The block for one timing.json entry (its ``figures``, ``commit``, ``machine`` and ``date``)."""
    f = entry["figures"]
    lines = [BEGIN.format(label=entry["label"]),
             "| `make demo`, held-out real episodes | PSNR (dB) ↑ | action error (cm) ↓ |", "|---|---|---|",
             f"| one window: copy the first frame / `sft` / **SimForcing** | {_f(f['copy_psnr'])} / "
             f"{_f(f['sft_psnr'])} / **{_f(f['simforcing_psnr'])}** | {_f(f['copy_cm'])} / {_f(f['sft_cm'])} / "
             f"**{_f(f['simforcing_cm'])}** |",
             f"| SimForcing's few-step student: one window in 2 network evaluations instead of 21 | "
             f"{_f(f['student_psnr'])} | {_f(f['student_cm'])} |",
             f"| SimForcing, 8-chunk rollout: condition from its own simulation chain / **from the robot's digital "
             f"twin** | {_f(f['rollout_psnr'])} / **{_f(f['rollout_twin_psnr'])}** | {_f(f['rollout_cm'])} / "
             f"**{_f(f['rollout_twin_cm'])}** |", "",
             "| `make demo`, 8 policies on 15 held-out scenes | Pearson with the simulator's ranking ↑ |", "|---|---|",
             f"| the simulator's own frames through the success judge (its harness check) | "
             f"{_f(f['pearson_harness'])} |",
             f"| inside the world model: `sft` / SimForcing / **SimForcing with the twin** / its few-step student | "
             f"{_f(f['pearson_sft'])} / {_f(f['pearson_simforcing'])} / **{_f(f['pearson_twin'])}** / "
             f"{_f(f['pearson_student'])} |", "",
             f"*Both tables: `make demo` on a clean clone of `{entry['commit']}` on a {entry['machine']} "
             f"({entry['date']}; [timing.json](docs/demo_timing/timing.json), entry \"{entry['label']}\").*", END]
    return "\n".join(lines)


def find_block(text: str) -> Optional[tuple[str, str]]:
    """(the label the README's block names, the whole block) or None when the README has no block."""
    m = re.search(re.escape(BEGIN).replace(re.escape("{label}"), "(.+?)") + r".*?" + re.escape(END), text, re.S)
    return (m.group(1), m.group(0)) if m else None


def rewrite(text: str, entry: dict) -> str:
    """``text`` (the README) with its block replaced by :func:`render` of ``entry``."""
    found = find_block(text)
    if found is None:
        raise ValueError(f"README: no demo-table block ({BEGIN.format(label='LABEL')} ... {END}); add the two "
                         "markers where the tables belong")
    return text.replace(found[1], render(entry))
