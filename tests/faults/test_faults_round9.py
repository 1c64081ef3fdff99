"""Reliability, round 9 (issue 69, "Reliability, round 7"): what a careful user feeds the features of the last rounds.

- runs opened from elsewhere: a run records the VAE and state probe it was trained with (checkpoint meta.json
  ``inputs``: their folders and weights' digests), so a copy placed below another demo's ``runs/demo/vae`` (the same
  shape, fitted on other data) is refused by name, never opened with that VAE; a copy whose own VAE is still where it
  was trained opens with it; a run from before the record opens as before; a student, a resume or a latent cache with
  another VAE than the run's is refused; an export records its VAE too;
- predictors and their settings, recipes and data options, modes a loaded run cannot honour, records read back and
  results that come out empty (the sections below).

Each refusal names the file, field or flag and what to do; each has its control (the untouched input works).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from faultkit import TINY, policy_args, pretrain_args, record_module, refused

from simforcing.cli import main
from simforcing.config import ConfigError

pytestmark = pytest.mark.faults


# ----------------------------------------------------------------------------------------------------------------------
# Runs opened from elsewhere: the VAE (and probe) a run was trained with
# ----------------------------------------------------------------------------------------------------------------------


def _other_vae(like: Path, out: Path) -> Path:
    """A demo VAE of the same shape as ``like`` with other weights (another demo's, fitted on other data)."""
    from simforcing.models.vae import DemoVAE

    vae = DemoVAE.load(like)
    DemoVAE(vae.basis.flip(1), vae.shift.flatten() + 0.1, vae.scale.flatten() * 1.5).save(out)
    return out


def _probe(out: Path, seed: int) -> Path:
    from simforcing.evaluate.probe import ProbeConfig, StateProbe, save_probe

    torch.manual_seed(seed)
    return save_probe(StateProbe(ProbeConfig(height=32, width=48, state_dim=7)), out, {"note": f"seed {seed}"})


@pytest.fixture(scope="module")
def demo_a(tiny, tmp_path_factory) -> Path:
    """Project A: ``runs/demo/vae``, ``runs/demo/probe`` and a 2-step stage-1 run ``runs/demo/s1`` trained from A's
    root with the relative ``--model.vae.path=runs/demo/vae --eval.probe=runs/demo/probe`` (as `make demo` trains)."""
    import os

    proj = tmp_path_factory.mktemp("round9_a")
    shutil.copytree(tiny[1], proj / "runs" / "demo" / "vae")
    _probe(proj / "runs" / "demo" / "probe", 0)
    here = os.getcwd()
    os.chdir(proj)
    try:
        assert main(pretrain_args(Path("runs/demo/s1"), (tiny[0], Path("runs/demo/vae")),
                                  "--train.max_steps=2", "--eval.probe=runs/demo/probe")) == 0
    finally:
        os.chdir(here)
    return proj


def _meta(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("step_*"))[-1] / "meta.json"


def test_a_copied_run_beside_another_demos_vae_is_refused_by_name(demo_a, tiny, tmp_path, monkeypatch, capsys):
    """Before: a copy of a run placed below another demo's ``runs/demo/vae`` opened and evaluated with that VAE
    without a word (PSNR 23.68 dB against 24.05 with its own). Now the run's checkpoint records its VAE (folder and
    weights digest) and the VAE found at its relative path must be that one: refused naming the run, both folders
    and what to do — in the API (`open_run`, `run_config`) and every command (`evaluate` here), nothing written.
    The controls: the run opens with its own VAE from anywhere; a copy whose own VAE is still where it was trained
    opens with it (not with the other demo's); a run from before the record opens as before."""
    from simforcing.runs.folder import open_run, run_config

    run_a = demo_a / "runs" / "demo" / "s1"
    rec = json.loads(_meta(run_a).read_text())["inputs"]["vae"]
    assert Path(rec["path"]) == (demo_a / "runs" / "demo" / "vae").resolve() and len(rec["digest"]) == 16
    other = tmp_path / "b"
    _other_vae(tiny[1], other / "runs" / "demo" / "vae")
    copy = Path(shutil.copytree(run_a, other / "runs" / "demo" / "studies" / "x" / "s1"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert Path(open_run(run_a).cfg.model.vae.path) == demo_a / "runs" / "demo" / "vae"  # control: its own
    # its own VAE is still where it was trained: the copy opens with that one, not the other demo's beside it
    assert Path(open_run(copy).cfg.model.vae.path).resolve() == Path(rec["path"])
    moved = demo_a / "runs" / "demo" / "vae_moved"
    (demo_a / "runs" / "demo" / "vae").rename(moved)  # now the copy's own VAE is nowhere to be found
    try:
        for opener in (open_run, run_config):
            with pytest.raises(ConfigError, match=r"model.vae.path: .*s1 was trained with the VAE .*another VAE"):
                opener(copy)
        out = tmp_path / "ev"
        err = refused(["evaluate", "--ckpt", copy, "--data", tiny[0], "--split", "val", "--num-samples", "1",
                       "--out", out], capsys, "model.vae.path:", str(other / "runs" / "demo" / "vae"), rec["path"],
                      "Open the run from a directory where runs/demo/vae is its own VAE")
        assert not out.exists() and rec["digest"] in err
        # a run written before the record: opened with the folder found, as before (documented)
        meta = json.loads(_meta(copy).read_text())
        del meta["inputs"]
        _meta(copy).write_text(json.dumps(meta))
        assert Path(open_run(copy).cfg.model.vae.path) == other / "runs" / "demo" / "vae"
    finally:
        moved.rename(demo_a / "runs" / "demo" / "vae")
    capsys.readouterr()


def test_a_copied_run_beside_another_probe_is_refused_unless_a_probe_is_given(demo_a, tiny, tmp_path, monkeypatch,
                                                                             capsys):
    """The same for the state probe a run names (``eval.probe``): another probe at its relative path is refused by
    name (it would score the run's action error); a probe given on the command line (``--eval.probe=P``) is the
    user's choice and used. The control: the copy beside its own VAE and probe evaluates."""
    run_a = demo_a / "runs" / "demo" / "s1"
    other = tmp_path / "b" / "runs" / "demo"
    shutil.copytree(tiny[1], other / "vae")  # the same VAE: only the probe differs
    _probe(other / "probe", 1)
    copy = Path(shutil.copytree(run_a, other / "x" / "s1"))
    monkeypatch.chdir(tmp_path)
    moved = demo_a / "runs" / "demo" / "probe_moved"
    (demo_a / "runs" / "demo" / "probe").rename(moved)
    try:
        words = ["evaluate", "--ckpt", copy, "--data", tiny[0], "--split", "val", "--num-samples", "1", "--out"]
        refused(words + [tmp_path / "ev"], capsys, "eval.probe:", "another state probe", str(other / "probe"))
        assert main([str(w) for w in words + [tmp_path / "ev", f"--eval.probe={other / 'probe'}"]]) == 0
        shutil.rmtree(other / "probe")
        _probe(other / "probe", 0)  # its own probe's weights (fitted again, same result): the control
        assert main([str(w) for w in words + [tmp_path / "ev2"]]) == 0
    finally:
        moved.rename(demo_a / "runs" / "demo" / "probe")
    capsys.readouterr()


def test_an_edited_inputs_record_is_named(demo_a, tmp_path):
    """meta.json ``inputs`` edited (a digest that is a number, an unknown entry) is a CheckpointError naming the file
    and field, never taken for a record; the control: the untouched record opens."""
    from simforcing.errors import CheckpointError
    from simforcing.runs.folder import open_run

    run = Path(shutil.copytree(demo_a / "runs" / "demo" / "s1", tmp_path / "s1"))
    meta = json.loads(_meta(run).read_text())
    good = meta["inputs"]
    for bad in ({"vae": {"path": good["vae"]["path"], "digest": 7}}, {"weights": good["vae"]}, ["vae"]):
        _meta(run).write_text(json.dumps({**meta, "inputs": bad}))
        with pytest.raises(CheckpointError, match=r"meta.json.*inputs"):
            open_run(run, weights=False)
    _meta(run).write_text(json.dumps(meta))
    assert open_run(run, weights=False).cfg.model.vae.path == good["vae"]["path"]


def test_a_student_or_resume_with_another_vae_is_refused(demo_a, tiny, policy_data, tmp_path, capsys):
    """`train --teacher RUN1 --model.vae.path=OTHER`: the student started from weights trained on one VAE's latents
    and trained on another's, without a word (so did `policy train --init RUN1`); `pretrain --resume
    --model.vae.path=OTHER` went on in other latents;
    a latent cache encoded with one VAE trained a run that samples with another. Each is refused by name before
    anything is written. The controls: a copy of the run's own VAE in another folder trains (it is the same VAE)."""
    run_a = demo_a / "runs" / "demo" / "s1"
    other = _other_vae(tiny[1], tmp_path / "other_vae")
    same = Path(shutil.copytree(tiny[1], tmp_path / "same_vae"))
    out = tmp_path / "s2"
    train = ["train", "--method", "sft", "--teacher", run_a, "--data", tiny[0], "--out", out, "--no-progress",
             "--train.max_steps=1"]
    refused(train + [f"--model.vae.path={other}"], capsys, "model.vae.path:", str(other), "is not the VAE",
            "the student starts from its teacher's weights")
    assert not out.exists()
    assert main([str(w) for w in train + [f"--model.vae.path={same}"]]) == 0  # control: the same VAE elsewhere
    refused(policy_args(tmp_path / "policy", policy_data, other, init=str(run_a)), capsys, "model.vae.path:",
            "the policy starts from its weights")
    assert not (tmp_path / "policy").exists()
    resumed = Path(shutil.copytree(run_a, tmp_path / "resumed"))
    refused(pretrain_args(resumed, (tiny[0], other), "--train.max_steps=4", resume=True), capsys,
            "model.vae.path:", "a resumed run goes on in the latents it was trained in")
    assert sorted(p.name for p in (resumed / "checkpoints").iterdir()) == ["step_000002"]
    capsys.readouterr()


def test_a_latent_cache_of_another_vae_is_refused(demo_a, tiny, tmp_path, capsys):
    """`data encode` records its VAE's digest (index.json ``vae_digest``); a run trained on the cache with another VAE
    named (the one it would sample with) is refused by name; the control: the cache's own VAE trains."""
    cache = tmp_path / "cache"
    assert main(["data", "encode", "--data", str(tiny[0]), "--out", str(cache), "--windows-per-episode", "1",
                 "--splits", "train", "sim_pool", "--no-progress", *TINY, f"--model.vae.path={tiny[1]}"]) == 0
    other = _other_vae(tiny[1], tmp_path / "other_vae")
    words = ["pretrain", "--out", tmp_path / "run", "--no-progress", *TINY, "--train.max_steps=1",
             f"--data.latent_cache={cache}"]
    refused(words + [f"--model.vae.path={other}"], capsys, "model.vae.path:", "encoded with another VAE", str(other))
    assert not (tmp_path / "run" / "checkpoints").exists()
    assert main([str(w) for w in words + [f"--model.vae.path={tiny[1]}"]]) == 0
    capsys.readouterr()


def test_an_export_is_loaded_with_the_vae_its_run_was_trained_with(demo_a, tiny, tmp_path):
    """An export records its VAE's digest (config.json ``vae.digest``): `from_pretrained(vae=OTHER)` is a ConfigError
    naming both, a copied VAE whose weights were replaced a CheckpointError naming the folder; the controls: the
    export as written, and ``vae=`` a copy of the run's own VAE, load."""
    from simforcing.errors import CheckpointError
    from simforcing.export import export_run, load_pretrained

    out = export_run(demo_a / "runs" / "demo" / "s1", tmp_path / "export")
    assert len(json.loads((out / "config.json").read_text())["vae"]["digest"]) == 16
    other = _other_vae(tiny[1], tmp_path / "other_vae")
    load_pretrained(out)
    load_pretrained(out, vae=shutil.copytree(tiny[1], tmp_path / "same_vae"))
    with pytest.raises(ConfigError, match=r"vae: .*other_vae holds another VAE .* than the run was trained with"):
        load_pretrained(out, vae=other)
    shutil.copy(other / "vae.safetensors", out / "vae" / "vae.safetensors")
    with pytest.raises(CheckpointError, match=r"export/vae: .*holds another VAE"):
        load_pretrained(out)


# ----------------------------------------------------------------------------------------------------------------------
# Predictors and their settings
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> Path:
    """A simulator pool and a world-model pool of the same 4 policies × 3 tasks × 20 scenes (tests/evalgen.py)."""
    from evalgen import write_known_pool

    return write_known_pool(tmp_path_factory.mktemp("round9_pool"))[0]


def _estimate(pool: Path, out: Path, *extra, wm=None) -> list:
    return ["policy", "estimate", "--ground-truth", pool / "sim", "--wm-eval", wm or pool / "wm", "--out", out, *extra]


def _notes(out: Path) -> list[str]:
    return json.loads((out / "estimate.json").read_text())["notes"]


def _draws(k: int, per_episode=lambda i: None):
    """An eval.json edit: 'draws' k, and episode i's draw lists of ``per_episode(i)`` entries (None: none)."""
    def edit(body: dict) -> None:
        body["draws"] = k
        for per in body["episodes"].values():
            for outs in per.values():
                for i, o in enumerate(outs):
                    o.pop("draw_success", None), o.pop("draw_margin", None)
                    if per_episode(i):
                        o["draw_success"], o["draw_margin"] = [o["success"]] * per_episode(i), [0.01] * per_episode(i)
    return edit


DRAWS = [("draws 3, no draw verdicts", _draws(3), "episodes hold 0 noise draws' verdicts"),
         ("draws 1, 3 verdicts each", _draws(1, lambda i: 3), "episodes hold 3 noise draws' verdicts"),
         ("draws 3, 2 or 3 verdicts", _draws(3, lambda i: 2 + i % 2), "episodes hold 2 noise draws' verdicts")]


@pytest.mark.parametrize("what,edit,needle", DRAWS, ids=[w for w, _, _ in DRAWS])
def test_an_evaluation_whose_draws_contradict_its_episodes_is_refused(pool, what, edit, needle, tmp_path, capsys):
    """eval.json 'draws' K and episodes holding another number of draws' verdicts (an evaluation of K draws edited, or
    merged with one of one draw) was estimated without a word — the verdict predictor's soft share and the draws'
    disagreement read from what is not there. Now refused naming the file, the field and the policy; the control:
    an evaluation of 3 draws whose every episode holds 3 verdicts estimates."""
    from evalgen import edited

    bad = edited(pool / "wm", tmp_path / "wm", edit)
    refused(_estimate(pool, tmp_path / "est", wm=bad), capsys, "--wm-eval:", "eval.json", needle,
            "evaluation's 'draws' is")
    assert not (tmp_path / "est").exists()
    good = edited(pool / "wm", tmp_path / "wm3", _draws(3, lambda i: 3))
    assert main([str(w) for w in _estimate(pool, tmp_path / "est", "--predictor", "verdict", wm=good)]) == 0
    capsys.readouterr()


def test_predictor_settings_at_their_edges(pool, tmp_path, capsys):
    """`--disagreement-prior 1e308` overflowed into a numpy warning and an interval from an infinite weight (exit 0):
    now a prior above 1000 pseudo-episodes is refused by the flag, as are more than 100 000 study draws (10^9 ran for
    days before writing anything); `--no-refit-variance` with a predictor fitted on
    nothing did nothing without a word (now a note), and an estimate of one policy (`--policies good`) wrote empty
    differences and a rank of 1–1 (now said in a note). The controls: prior 1000 and 0 estimate, the learned
    predictor takes --no-refit-variance without a note."""
    refused(_estimate(pool, tmp_path / "e1", "--disagreement-prior", "1e308"), capsys,
            "--disagreement-prior: got 1e+308; expected a number from 0 to 1000")
    refused(_estimate(pool, tmp_path / "e2", "--draws", "1000000000"), capsys, "--draws: got 1000000000; expected at "
            "most 100000")
    for prior in ("1000", "0"):
        assert main([str(w) for w in _estimate(pool, tmp_path / f"p{prior}", "--disagreement-prior", prior,
                                               "--predictor", "verdict")]) == 0
    assert main([str(w) for w in _estimate(pool, tmp_path / "v", "--predictor", "verdict",
                                           "--no-refit-variance")]) == 0
    assert any("--no-refit-variance: nothing to leave out" in n for n in _notes(tmp_path / "v"))
    assert main([str(w) for w in _estimate(pool, tmp_path / "l", "--no-refit-variance")]) == 0
    assert _notes(tmp_path / "l") == []
    assert main([str(w) for w in _estimate(pool, tmp_path / "one", "--policies", "good", "--predictor",
                                           "verdict")]) == 0
    assert any("one policy (good): no differences" in n for n in _notes(tmp_path / "one"))
    capsys.readouterr()


# ----------------------------------------------------------------------------------------------------------------------
# Recipes and data options
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scene_data(tmp_path_factory) -> Path:
    """A full-scene dataset (`data synth --pairing scene`) of the tiny config's frame size: 1 train, 1 val episode."""
    from simforcing.data.synthetic.generate import generate_dataset
    from simforcing.prep.text import finalize_dataset

    return generate_dataset(tmp_path_factory.mktemp("round9_scene") / "data", num_train=1, num_val=1,
                            num_sim_pool=0, length=9, height=32, width=48, seed=3, progress=False, pairing="scene",
                            finish=finalize_dataset)


def test_data_of_another_pairing_than_the_run_was_trained_on_is_refused(ref, stage2, tiny, scene_data, tmp_path,
                                                                       capsys):
    """A full-scene dataset given to a run trained on the arm pairing — a stage-2 student of an arm teacher, a
    distillation, a resume, `evaluate` (with the full scene's own first frame, `--sample.mask_mode=paired-sim`) — was
    trained or scored without a word, the simulation prior or condition of the other domain. Each is now refused by
    name before anything is written. The controls: the arm data trains and evaluates (the fixtures, and `evaluate`
    here); a full-scene run on full-scene data evaluates (test_faults_synth_options)."""
    need = "was trained on an arm pairing"
    s2 = tmp_path / "s2"
    refused(["train", "--method", "sft", "--teacher", ref, "--data", scene_data, "--out", s2, "--no-progress",
             "--train.max_steps=1"], capsys, f"--data: {scene_data} is a full-scene pairing", need,
            "the student starts from its teacher's simulation prior")
    refused(["distill", "--teacher", stage2, "--steps", "1", "--data", scene_data, "--out", tmp_path / "st",
             "--no-progress", "--train.max_steps=1"], capsys, "is a full-scene pairing", need)
    resumed = Path(shutil.copytree(ref, tmp_path / "resumed"))
    refused(pretrain_args(resumed, (scene_data, tiny[1]), "--train.max_steps=8", resume=True), capsys,
            "is a full-scene pairing", need, "a resumed run goes on in the simulation domain it was trained in")
    ev = ["evaluate", "--ckpt", stage2, "--split", "val", "--num-samples", "1", "--sample.n_real=2", "--out"]
    refused(ev + [tmp_path / "ev", "--data", scene_data, "--sample.mask_mode=paired-sim"], capsys,
            "is a full-scene pairing", need, "its simulation condition would be of the other domain")
    assert not any((tmp_path / n).exists() for n in ("s2", "st", "ev"))
    assert main([str(w) for w in ev + [tmp_path / "ev", "--data", tiny[0]]]) == 0
    capsys.readouterr()


def test_a_recipe_dataset_changed_since_is_refused_by_train_recipe(tmp_path, capsys):
    """`train --recipe evaluator` checked that the data was made with the recipe's operators (info.json), not that
    its train split still holds the episodes the recipe made: episodes added since (a dataset extended by hand or by
    another tool) show none of its operators, and trained the evaluator's name without a word. Now the counts are
    compared and a difference named; the control: the dataset as made passes."""
    from simforcing.data.synthetic.generate import generate_dataset
    from simforcing.recipes import check_recipe_data

    root = generate_dataset(tmp_path / "data", num_train=2, num_val=0, num_sim_pool=0, length=9, height=16, width=24,
                            seed=3, progress=False, action_noise=0.05, noise_splits=("train",), pauses=2,
                            pause_splits=("train",), failures=0.25, failure_splits=("train",))
    check_recipe_data("evaluator", root)  # the control
    shutil.copytree(root / "episodes" / "ep_00001", root / "episodes" / "ep_00009")
    with open(root / "meta" / "episodes.jsonl", "a") as f:
        f.write(json.dumps({"episode_id": "ep_00009", "length": 9, "instruction": "pick up the blue block",
                            "has_real": True}) + "\n")
    splits = json.loads((root / "meta" / "splits.json").read_text())
    (root / "meta" / "splits.json").write_text(json.dumps({**splits, "train": splits["train"] + ["ep_00009"]}))
    with pytest.raises(ConfigError, match=r"--recipe evaluator: .*train split holds 3 episodes, but `data synth "
                                          r"--recipe evaluator` made 2"):
        check_recipe_data("evaluator", root)


# ----------------------------------------------------------------------------------------------------------------------
# Modes a loaded run cannot honour
# ----------------------------------------------------------------------------------------------------------------------


def test_what_the_condition_projections_read_is_kept_by_a_resume_and_a_student(stage2, tiny, tmp_path, capsys):
    """``conditioning.representation`` (what the trained projections P_j read: c itself, or its motion) changed on
    `train --resume` went on with a warning — the weights trained on one reading fed the other — and a new `distill`
    student given another one than its teacher's trained from weights that read the other (exit 0, no word); as
    ``conditioning.path`` already was, both are now refused by name before anything is written. The controls: the
    same student without the override (`--dry-run`), a resume with the run's own reading."""
    resumed = Path(shutil.copytree(stage2, tmp_path / "s2"))
    words = ["train", "--method", "sft", "--resume", "--out", resumed, "--data", tiny[0], "--no-progress",
             "--train.max_steps=1"]
    refused(words + ["--conditioning.representation=motion"], capsys, "conditioning.representation:",
            "was trained with 'latent', the resumed config asks 'motion'", "cannot change on --resume")
    assert main([str(w) for w in words + ["--conditioning.representation=latent"]]) == 0
    student = ["distill", "--teacher", stage2, "--steps", "1", "--data", tiny[0], "--out", tmp_path / "st",
               "--no-progress", "--train.max_steps=1"]
    refused(student + ["--conditioning.representation=motion"], capsys, "conditioning.representation:",
            "got 'motion' but the teacher checkpoint", "was trained with 'latent'")
    assert not (tmp_path / "st").exists()
    assert main([str(w) for w in student + ["--dry-run"]]) == 0
    capsys.readouterr()


# ----------------------------------------------------------------------------------------------------------------------
# Records read back
# ----------------------------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def _study_edit(edit):
    def apply(body: dict) -> None:
        edit(body["study"][0])
    return apply


DAMAGED_STUDIES = [("cut short", None), ("format version 9", lambda b: b.update(format_version=9)),
                   ("study of strings", lambda b: b.update(study=["n=5"])),
                   ("no coverage", _study_edit(lambda s: s.pop("coverage"))),
                   ("saved a word", _study_edit(lambda s: s.update(saved="most"))),
                   ("coverage 7", _study_edit(lambda s: [c.update(ppi=7) for c in s["coverage"].values()])),
                   ("no PPI coverage", _study_edit(lambda s: [c.pop("ppi") for c in s["coverage"].values()]))]


def test_the_demo_report_reads_a_damaged_estimate_as_missing(tmp_path):
    """The demo's estimate section read estimate.json's coverage study raw: an entry of text, a missing coverage or
    PPI column ended the report in a traceback, a saved share of text or a coverage of 7 went into the report as
    numbers. Now every study point is read typed (``StudyPoint.from_json``) and a damaged one is "—" (missing, as a
    job that did not finish), never a traceback or a wrong figure. The control: the estimate as written."""
    from simforcing.demo.estimate_section import evaluator_row
    from simforcing.policy.estimate.estimate import StudyPoint
    from simforcing.result_files import POLICY_ESTIMATE, tagged

    est = tmp_path / "est"
    est.mkdir()
    cover = {"good": {"ppi": 0.9, "ground_truth_only": 0.95}, "fair": {"ppi": 0.85, "ground_truth_only": 0.9}}
    point = StudyPoint(5, 2, cover, cover, 0.25, 0.8, 0.7, 0.9, 0.75)  # the fields policy estimate --draws writes
    (est / "estimate.json").write_text(json.dumps(tagged(POLICY_ESTIMATE, 1, {"study": [point.to_json()]})))
    row = evaluator_row("wm", None, est, 5)
    assert (row.n, row.coverage, row.saved, row.trust_auroc) == (5, 0.85, 0.25, 0.75)
    body = json.loads((est / "estimate.json").read_text())
    for what, edit in DAMAGED_STUDIES:
        bad = Path(shutil.copytree(est, tmp_path / what.replace(" ", "_")))
        b = json.loads(json.dumps(body))
        if edit is None:
            (bad / "estimate.json").write_text(json.dumps(b)[:300])
        else:
            edit(b)
            (bad / "estimate.json").write_text(json.dumps(b))
        assert evaluator_row("wm", None, bad, 5) is None, what


@pytest.fixture
def docs_copy(tmp_path) -> Path:
    """The README and docs/ as they are, in a folder of their own (``docs_tables`` takes the root)."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(ROOT / "README.md", root / "README.md")
    shutil.copytree(ROOT / "docs", root / "docs", ignore=shutil.ignore_patterns("*.png", "*.gif", "*.mp4"))
    return root


def test_docs_tables_write_is_whole_or_nothing(docs_copy):
    """`docs_tables --write` rewrote the pages one after the other: a record that could not be shown (here the
    faults record cut short) stopped it with the README already rewritten and the rest not — docs from two states of
    the records. Every page is now rendered before any is written. A docs/records.json that is not an object (an
    AttributeError traceback) and a timing entry whose commit is a number or whose minutes are a word are named.
    The controls: the docs as they are are current; a stale README is rewritten."""
    from simforcing import docs_tables as dt

    assert dt.stale(docs_copy) == []  # the control
    readme = docs_copy / "README.md"
    shown = next(e for e in json.loads((docs_copy / dt.TIMING).read_text()) if e["label"] == "this release")
    figure = f"{shown['figures']['simforcing_psnr']:.2f}"  # a figure the README's demo table prints
    assert figure in readme.read_text()
    readme.write_text(readme.read_text().replace(figure, "99.99"))
    faults = docs_copy / "docs" / "reliability" / "faults.json"
    good = faults.read_text()
    faults.write_text(good[:40])
    before = readme.read_text()
    with pytest.raises(dt.TableError, match="faults.json: not a readable JSON record"):
        dt.write(docs_copy)
    assert readme.read_text() == before  # nothing written
    faults.write_text(good)
    for rel, edit, needle in (
            (dt.PROVENANCE, lambda j: [j], "records.json: not an object"),
            (dt.TIMING, lambda j: [dict(e, commit=5) for e in j], "field 'commit' must be a string"),
            (dt.TIMING, lambda j: [dict(e, from_nothing_min="long") for e in j], "'from_nothing_min' must be a number"),
            (dt.TIMING, lambda j: {"runs": j}, "not a list of recorded runs")):
        path = docs_copy / rel
        text = path.read_text()
        path.write_text(json.dumps(edit(json.loads(text))))
        with pytest.raises(dt.TableError, match=needle):
            dt.write(docs_copy)
        path.write_text(text)
    assert readme.read_text() == before
    assert dt.write(docs_copy) == ["README.md"] and dt.stale(docs_copy) == []  # the control: rewritten whole


def test_the_timing_recorder_refuses_a_damaged_record_a_partial_log_and_no_commit(tmp_path):
    """docs/demo_timing/record.py read timing.json raw (cut short or a run without its label: a traceback, and a
    recording into it would have been lost), recorded a log without /usr/bin/time's lines as a demo of unknown
    duration, and an empty commit for a demo outside a git checkout — each without a word. Now each is one line
    naming the file and what to do, before anything is written; the controls: a whole log, --allow-missing, a given
    commit, an absent record (the first run)."""
    rec = record_module()
    path = tmp_path / "timing.json"
    assert rec.read_timing(path) == []
    for body, needle in (('[{"label": "a"', "timing.json: Expecting"), ('[{"commit": "abc"}]', "its string 'label'"),
                         ('{"label": "a"}', "not a list of runs")):
        path.write_text(body)
        with pytest.raises(SystemExit, match=needle):
            rec.read_timing(path)
    path.write_text('[{"label": "a", "commit": "abc"}]')
    assert rec.read_timing(path)[0]["label"] == "a"
    log = tmp_path / "demo.log"
    log.write_text("[01:02] eval sft: done in 3 s\ndemo @ abc\n")
    with pytest.raises(SystemExit, match=r"demo.log: no elapsed, user, system line\(s\)"):
        rec.read_log(log)
    assert rec.read_log(log, allow_missing=True)["elapsed"] is None
    log.write_text(log.read_text() + "\tUser time (seconds): 100.5\n\tSystem time (seconds): 3.0\n"
                   "\tElapsed (wall clock) time (h:mm:ss or m:ss): 32:30.1\n")
    assert rec.read_log(log)["elapsed"].group(1) == "32:30.1"
    outside = tmp_path / "demo"
    outside.mkdir()
    with pytest.raises(SystemExit, match="not in a git checkout; give the commit"):
        rec.commit_of(outside, None)
    assert rec.commit_of(outside, "abc123") == "abc123"


def test_an_agreement_record_is_read_typed(tmp_path):
    """agreement.json's episode shares, scene count and resample count were read raw (a share of text reached the
    tables and the demo's report as a number, "20" resamples passed); now each is named by field. The control: the
    record as written."""
    from evalgen import edited, write_known_pool

    from simforcing.policy.closed_loop.results import AgreementResult, JudgeRecord

    root, _ = write_known_pool(tmp_path / "pool")
    wm = edited(root / "wm", tmp_path / "wm", lambda b: b.update(judge=JudgeRecord({"h": 32}, 1, "w").to_json()))
    out = tmp_path / "agreement"
    assert main(["policy", "agreement", "--sim", str(root / "sim"), "--wm", f"a={wm}", "--bootstrap", "20",
                 "--out", str(out)]) == 0
    AgreementResult.read(out, "--x")
    body = json.loads((out / "agreement.json").read_text())
    for key, value, needle in (("episode_agreement", {"a": {"all": "most"}}, "'a' must map 'all'"),
                               ("n_boot", "20", "n_boot"), ("scenes", 0, "scenes")):
        bad = tmp_path / f"bad_{key}"
        bad.mkdir()
        (bad / "agreement.json").write_text(json.dumps({**body, key: value}))
        with pytest.raises(ConfigError, match=f"agreement.json is an agreement .* malformed field .*{needle}"):
            AgreementResult.read(bad, "--x")


# ----------------------------------------------------------------------------------------------------------------------
# Results that come out empty
# ----------------------------------------------------------------------------------------------------------------------


def test_a_comparison_or_study_with_nothing_in_it_is_refused(tmp_path, capsys):
    """`policy agreement --reference A` with A the only world model wrote an agreement whose comparison with the
    reference was empty (exit 0); `policy estimate --draws N` on an evaluation of fewer scenes than every default n
    wrote a coverage study of no points (exit 0). Both are refused by the flag, nothing written. The controls: a
    second world model to compare (here the same evaluation under another name: said in a note), and --study-n."""
    from evalgen import edited, evaluation

    from simforcing.policy.closed_loop.results import SIMULATOR, WORLD_MODEL, EpisodeOutcome, JudgeRecord

    judge = JudgeRecord({"h": 32}, 1, "w")
    for name, env, j in (("sim", SIMULATOR, None), ("wm", WORLD_MODEL, judge)):  # 3 scenes: one per task
        evaluation(env, 1, lambda p, t, s: EpisodeOutcome(s, p in ("good", "fair"), 10), judge=j).write(tmp_path / name)
    words = ["policy", "agreement", "--sim", tmp_path / "sim", "--bootstrap", "20", "--reference", "a", "--out"]
    refused(words + [tmp_path / "ag", "--wm", f"a={tmp_path / 'wm'}"], capsys,
            "--reference: 'a' is the only world model given with --wm")
    assert not (tmp_path / "ag").exists()
    assert main([str(w) for w in words + [tmp_path / "ag", "--wm", f"a={tmp_path / 'wm'}",
                                          f"b={edited(tmp_path / 'wm', tmp_path / 'wm_b', lambda b: None)}"]]) == 0
    assert list(json.loads((tmp_path / "ag" / "agreement.json").read_text())["vs_reference"]) == ["b"]
    est = ["policy", "estimate", "--ground-truth", tmp_path / "sim", "--wm-eval", tmp_path / "wm", "--predictor",
           "verdict", "--n", "2", "--draws", "2", "--out", tmp_path / "est"]
    refused(est, capsys, "--draws: none of the coverage study's default n (5 10 20 40) is fewer than the 3 scenes",
            "give --study-n with values from 2 to 2")
    assert not (tmp_path / "est").exists()
    assert main([str(w) for w in est + ["--study-n", "2"]]) == 0
    assert [p["n"] for p in json.loads((tmp_path / "est" / "estimate.json").read_text())["study"]] == [2]
    capsys.readouterr()


def test_a_damaged_start_record_is_named_before_the_first_checkpoint(ref, tiny, tmp_path, capsys):
    """RUN/init.json (what a run started from: `pretrain --init RUN0`, `policy train --init RUN`) cut short or
    edited read as no record: a run resumed before its first checkpoint started from other weights without a word.
    Now a CheckpointError naming the file (exit 1); once the run holds checkpoints (its weights) it is not needed and
    not refused. The controls: a start of "base" resumes; the same damage beside checkpoints resumes."""
    run = Path(shutil.copytree(ref, tmp_path / "s1"))
    shutil.rmtree(run / "checkpoints")
    for body in ('{"source": "ba', '{"source": 5}', '["base"]'):
        (run / "init.json").write_text(body)
        refused(pretrain_args(run, tiny, "--train.max_steps=1", resume=True), capsys, "checkpoint error:",
                "init.json", "the run has no checkpoint yet", code=1)
    (run / "init.json").write_text('{"source": "base"}')
    assert main(pretrain_args(run, tiny, "--train.max_steps=1", resume=True)) == 0
    (run / "init.json").write_text('{"source": 5}')  # beside a checkpoint: its weights are the checkpoint's
    assert main(pretrain_args(run, tiny, "--train.max_steps=2", resume=True)) == 0
    capsys.readouterr()


def test_a_window_evaluation_with_a_number_that_is_not_one_is_named(tmp_path):
    """eval.json of `evaluate` read a NaN or infinite PSNR, a negative action error and 0 samples as scores (they
    reached the demo's report, the model card and a fidelity point as figures); `evaluate` never writes them (a
    prediction that is not finite is refused). Now each is named by field; the control: the file as written."""
    from fidelitygen import window_eval, world_model

    from simforcing.evaluate.results import WindowEvaluation

    folder = window_eval(tmp_path / "ev", world_model(tmp_path / "stage2"))
    assert WindowEvaluation.read(folder, "--eval").scores.psnr == 24.5
    body = json.loads((folder / "eval.json").read_text())
    for key, value, needle in (("psnr", float("nan"), "'psnr' must be a finite number or null; got nan"),
                               ("ssim", float("inf"), "'ssim' must be a finite number"),
                               ("af_pos", -0.01, "'af_pos' must be a finite number >= 0"),
                               ("lpips", -1, "'lpips' must be a finite number >= 0"),
                               ("num_samples", 0, "'num_samples' must be an integer >= 1")):
        (folder / "eval.json").write_text(json.dumps({**body, key: value}))
        with pytest.raises(ConfigError, match=f"eval.json is a one-window evaluation with a malformed field .*{needle}"):
            WindowEvaluation.read(folder, "--eval")
