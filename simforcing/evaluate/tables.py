"""Reports rendered from the typed video-evaluation results (``evaluate.results``): the one-window evaluation's line
and eval.md, the rollout's chunk tables and rollout.md, the sweeps' tables in the paper's layout."""

from __future__ import annotations

from typing import Optional, Sequence

from simforcing.evaluate.results import METRIC_KEYS, CfgSweep, ChunkSeries, RolloutDrift, StepsSweep, WindowEvaluation
from simforcing.utils import fmt_num


def format_result(res: WindowEvaluation) -> str:
    """One line: every metric, the latency and the sample count."""
    s, af = res.scores, res.scores.action
    return (f"PSNR {fmt_num(s.psnr, 2)} dB | SSIM {fmt_num(s.ssim, 4)} | arm PSNR {fmt_num(s.psnr_arm, 2)} | "
            f"LPIPS {fmt_num(s.lpips, 4)} | FID {fmt_num(s.fid, 2)} | FVD {fmt_num(s.fvd, 2)} | "
            f"action error {fmt_num(af.af_pos, 4)} (floor {fmt_num(af.af_floor_pos, 4)}) | "
            f"{fmt_num(s.latency_s, 4)} s/sample over {s.num_samples} samples")


def eval_markdown(res: WindowEvaluation, run_dir=None) -> str:
    """A short report: one metrics row, the reasons of metrics not computed, settings and latency."""
    s, af = res.scores, res.scores.action
    name = res.baseline or (str(run_dir) if run_dir else "?")
    unfinished = res.checkpoint.unfinished_note(name) if res.checkpoint else None
    lines = [f"# Evaluation: {name}" + (" (unfinished run)" if unfinished else ""), "",
             f"{s.num_samples} windows of split `{res.split}` ({res.data}), first frame "
             f"{'included' if res.include_first_frame else 'excluded'}.", "",
             "| PSNR ↑ | SSIM ↑ | arm PSNR ↑ | LPIPS ↓ | FID ↓ | FVD ↓ | latency s/sample | forwards/sample |",
             "|---|---|---|---|---|---|---|---|",
             f"| {fmt_num(s.psnr, 2)} | {fmt_num(s.ssim, 4)} | {fmt_num(s.psnr_arm, 2)} | "
             f"{fmt_num(s.lpips, 4)} | {fmt_num(s.fid, 2)} | {fmt_num(s.fvd, 2)} | "
             f"{fmt_num(s.latency_s, 4)} | {s.forwards_per_sample} |", ""]
    if unfinished:
        lines += [f"Note: {unfinished}", ""]
    if s.views:
        lines += ["Per camera (each view's part of every frame scored alone):", "",
                  "| view | PSNR ↑ | SSIM ↑ | arm PSNR ↑ | LPIPS ↓ |", "|---|---|---|---|---|"]
        lines += [f"| {v} | {fmt_num(m['psnr'], 2)} | {fmt_num(m['ssim'], 4)} | {fmt_num(m['psnr_arm'], 2)} | "
                  f"{fmt_num(m['lpips'], 4)} |" for v, m in s.views.items()] + [""]
    if af.af_pos is not None:
        lines += ["Action following (state probe, state units; lower is better):", "",
                  "| error | all frames | moving frames | gripper | probe on the recorded frames (floor) | "
                  "with another window's actions |",
                  "|---|---|---|---|---|---|",
                  f"| position | {fmt_num(af.af_pos, 4)} | {fmt_num(af.af_pos_moving, 4)} | "
                  f"{fmt_num(af.af_grip, 3)} | {fmt_num(af.af_floor_pos, 4)} | "
                  f"{fmt_num(af.af_control_pos, 4)} |", ""]
    elif s.reasons.get("af"):
        lines += [f"Action following not computed: {s.reasons['af']}", ""]
    reasons = [f"- {k}: {s.reasons[k]}" for k in METRIC_KEYS if s.metric(k) is None and s.reasons.get(k)]
    if reasons:
        lines += ["Not computed:", *reasons, ""]
    lines += [f"Sampler: `{res.sampler}`", ""]
    lat = s.latency
    lines += [f"Latency: mean {fmt_num(lat.mean_s, 4)} s over {lat.num_timed} sample(s) "
              f"({lat.warmup_excluded} warm-up excluded{'; ' + lat.note if lat.note else ''}); "
              "phases: " + ", ".join(f"{k} {v:.4f} s" for k, v in s.latency_phases_s.items()), ""]
    if res.checkpoint:
        lines += [f"Checkpoint: {res.checkpoint.to_json()}", ""]
    return "\n".join(lines)


def chunk_table(rows: dict[str, ChunkSeries], metric: str, digits: int = 2, scale: float = 1.0,
                names: Optional[dict] = None) -> str:
    """A markdown table: rows × chunks (+ the mean) of one metric."""
    k = max(len(r.per_chunk.get(metric, [])) for r in rows.values())
    lines = ["| | " + " | ".join(f"chunk {i + 1}" for i in range(k)) + " | mean |", "|---" * (k + 2) + "|"]
    for name, r in rows.items():
        vals = r.per_chunk.get(metric)
        if not vals:
            continue
        cells = [fmt_num(None if v is None else v * scale, digits) for v in vals]
        m = r.mean.get(metric)
        lines.append(f"| {(names or {}).get(name, name)} | " + " | ".join(cells)
                     + f" | {fmt_num(None if m is None else m * scale, digits)} |")
    return "\n".join(lines)


def rollout_markdown(res: RolloutDrift) -> str:
    """rollout.md: the setting, then per metric the table of every row's chunks."""
    lines = [f"# Rollout: {res.run}", "",
             f"{res.num_episodes} episodes of split `{res.split}`, {res.horizon} actions = {res.chunks} "
             f"chunks ({res.frames} frames), state input `{res.state_input}`, simulation chain "
             f"`{res.sim_chain}`, sampler `{res.sampler}`.", ""]
    for metric, title, scale, digits in (("psnr", "PSNR (dB) ↑", 1, 2), ("psnr_arm", "arm-region PSNR (dB) ↑", 1, 2),
                                         ("af_pos", "action error (cm) ↓", 100, 2)):
        if any(metric in r.per_chunk for r in res.rows.values()):
            lines += [f"**{title}**", "", chunk_table(res.rows, metric, digits, scale), ""]
    lines += [f"Forwards per episode: {res.forwards_per_episode}; {res.seconds}", ""]
    return "\n".join(lines)


def has_values(grid: list[list]) -> bool:
    """Whether a sweep's table holds any value (the action-following table: only with a probe)."""
    return any(v is not None for row in grid for v in row)


def steps_markdown(sweep: StepsSweep) -> str:
    """sweep_steps.md: Tab. A2 (PSNR), A3 (SSIM), A4 (latency), the action-following error with a probe, the notes."""
    keys = [(ns, nr) for ns in sweep.n_sim for nr in sweep.n_real]
    heads, t = ("N_s", "N_r"), sweep.tables
    parts = [_table_md("Tab. A2 — PSNR (dB) ↑", heads, keys, sweep.w, t["psnr"], 3),
             _table_md("Tab. A3 — SSIM ↑", heads, keys, sweep.w, t["ssim"], 4),
             _table_md("Tab. A4 — latency (s/sample) ↓", heads, keys, sweep.w, t["latency_s"], 4)]
    if has_values(t["af_pos"]):
        parts.append(_table_md("Action-following error (state probe, state units) ↓", heads, keys, sweep.w,
                               t["af_pos"], 4))
    return "\n\n".join(parts) + "\n\n" + "\n".join(f"- {n}" for n in sweep.notes) + "\n"


def cfg_markdown(sweep: CfgSweep) -> str:
    """sweep_cfg.md: Tab. A1 (PSNR / SSIM per training p and guidance w), the action-following error with a probe,
    a note for each unfinished run."""
    rows, t = [(label,) for label in sweep.row_labels], sweep.tables
    cells = [[_pair(a, b) for a, b in zip(ra, rb)] for ra, rb in zip(t["psnr"], t["ssim"])]
    md = _table_md("Tab. A1 — PSNR (dB) / SSIM by training p (rows) and guidance w (columns)", ("p",), rows, sweep.w,
                   cells, None)
    if has_values(t["af_pos"]):
        md += "\n\n" + _table_md("Tab. A1 — action-following error (state probe, state units) ↓", ("p",), rows,
                                  sweep.w, t["af_pos"], 4)
    return md + "".join(f"\n\nNote: {n}" for n in (rec.unfinished_note(r) for r, rec in sweep.checkpoints.items())
                        if n)


def _pair(a, b) -> str:
    return "—" if a is None or b is None else f"{a:.3f} / {b:.4f}"


def _table_md(title: str, heads: Sequence[str], keys: Sequence[tuple], ws: Sequence[float], grid: list[list],
              nd: Optional[int]) -> str:
    """A markdown table: one column per row-key field, then one column per w."""
    lines = [f"**{title}**", "", "| " + " | ".join(heads) + " | " + " | ".join(f"w = {w:g}" for w in ws) + " |",
             "|" + "---|" * (len(heads) + len(ws))]
    for key, vals in zip(keys, grid):
        if nd is None:
            cells = [str(v) for v in vals]
        else:
            cells = ["—" if v is None else f"{v:.{nd}f}" for v in vals]
        lines.append("| " + " | ".join(str(x) for x in key) + " | " + " | ".join(cells) + " |")
    return "\n".join(lines)
