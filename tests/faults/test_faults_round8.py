"""Reliability round 8: the features added last, attacked as a careful user would (each refusal with its control —
the untouched input works).

- the twin record's ``mesh`` (generator version 5): an ill-typed or null mesh, a record of a version-5 dataset that
  lost it, a mesh in a dataset of an older generator — named by `data check` (which now checks a synthetic dataset's
  records as its twin renders them), `data check-twin`, `rollout --sample.condition=render` and the Python API, with
  the episode and its twin.json, before anything is rendered (a bad mesh was a config error naming no file, a null
  one rendered at MuJoCo's default); the world-model closed loop renders at the tessellation of the world model's
  data;
- `policy estimate --predictor hand | actions` on tasks none of which is on the hand says what the predictor reduces
  to; an evaluation's distances (arm offset, the commanded hand's gap, the judge's errors) negative, of text or
  ragged are refused by field;
- `export --eval` of an evaluation made with a relative --ckpt from another directory (it was refused whatever was
  given); rollout.json holding NaN, infinity or text in its scores; one world-model evaluation or fidelity point
  given under two names (now said); docs/demo_timing/record.py on a results.json missing sections (it recorded "—" silently);
- a run trained with relative paths (`make demo`'s ``runs/demo/vae``) opened from another working directory (its VAE
  was "not a folder"), and one policy checkpoint evaluated from two directories (refused as another policy).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from faultkit import pretrain_args, record_module, refused

from simforcing.cli import main
from simforcing.config import ConfigError

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------------------------------------
# The twin record's mesh
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    """A `data synth` dataset (generator version 5, arm pairing) ready for `data check`: 1 train, 1 val, 1 sim-pool
    episode of 3 frames at 16×24, its statistics and text cache."""
    from simforcing.data.synthetic.generate import generate_dataset

    root = generate_dataset(tmp_path_factory.mktemp("round8_synth") / "data", num_train=1, num_val=1,
                            num_sim_pool=1, length=3, height=16, width=24, seed=3, progress=False)
    assert main(["data", "stats", str(root)]) == 0 and main(["data", "embed-text", str(root)]) == 0
    return root


def _edited(src: Path, dst: Path, edit, episode: str = "ep_00001", info=None, others=None) -> Path:
    """A copy of dataset ``src`` whose val episode's twin.json is ``edit(record)`` (every other episode's
    ``others(record)``; info.json ``info(info)``)."""
    out = Path(shutil.copytree(src, dst))
    for path in sorted(out.glob("episodes/*/twin.json")):
        change = edit if path.parent.name == episode else others
        if change is not None:
            path.write_text(json.dumps(change(json.loads(path.read_text()))))
    if info is not None:
        meta = out / "meta" / "info.json"
        meta.write_text(json.dumps(info(json.loads(meta.read_text()))))
    return out


def _mesh(value):
    return lambda rec: {**rec, "mesh": value}


def _no_mesh(rec):
    return {k: v for k, v in rec.items() if k != "mesh"}


def _version(v):
    return lambda info: {**info, "synth": {**info["synth"], "version": v}}


BAD_MESHES = [  # (what, edit, info edit, what the refusal names)
    ("one number", _mesh([14]), None, "mesh: got [14]"),
    ("text", _mesh("14x8"), None, 'mesh: got "14x8"'),
    ("null", _mesh(None), None, "mesh: got null"),
    ("floats", _mesh([14.0, 8]), None, "mesh: got [14.0, 8]"),
    ("true", _mesh([True, 8]), None, "mesh: got [true, 8]"),
    ("too fine", _mesh([200, 8]), None, "mesh: got [200, 8]"),
    ("too coarse", _mesh([2, 8]), None, "mesh: got [2, 8]"),
    ("lost in a version-5 dataset", _no_mesh, None, "no 'mesh': the dataset's generator (meta/info.json "
                                                    "synth.version 5)"),
    ("named in a version-4 dataset (the others without)", lambda rec: rec, _version(4),
     "but the dataset's generator (meta/info.json synth.version 4) rendered"),
]
MESH_IDS = [w for w, *_ in BAD_MESHES]


@pytest.mark.parametrize("what,edit,info,needle", BAD_MESHES, ids=MESH_IDS)
def test_data_check_and_check_twin_name_a_bad_mesh(synth, what, edit, info, needle, tmp_path, capsys):
    """Before: `data check` passed every one (it checked the record's shape only); `data check-twin` refused the
    ill-typed ones as a config error naming no file (exit 2) and rendered a null or lost mesh at MuJoCo's default
    against videos rendered at half of it. Now both: data error bad_twin naming the episode, twin.json and the field,
    exit 1, nothing rendered or written."""
    bad = _edited(synth, tmp_path / "data", edit, info=info, others=None if info is None else _no_mesh)
    refused(["data", "check", bad, "--preset", "demo"], capsys, "bad_twin", "ep_00001", "twin.json", needle, code=1)
    out = tmp_path / "twin"
    refused(["data", "check-twin", "--data", bad, "--preset", "demo", "--split", "val", "--out", out], capsys,
            "data error [bad_twin]", "ep_00001", "twin.json", needle, code=1)
    assert not out.exists()


def test_mesh_controls_a_whole_dataset_and_an_older_generators(synth, tmp_path, capsys):
    """The controls: the untouched version-5 dataset passes both; a dataset of generator 4 whose records name no mesh
    (the documented older datasets: rendered at MuJoCo's default) passes `data check`, and check-twin renders it."""
    assert main(["data", "check", str(synth), "--preset", "demo"]) == 0
    out = tmp_path / "twin.json"
    assert main(["data", "check-twin", "--data", str(synth), "--preset", "demo", "--split", "val",
                 "--out", str(out)]) == 0
    assert json.loads(out.read_text())["psnr_worst_frame"] >= 40.0
    old = _edited(synth, tmp_path / "old", _no_mesh, info=_version(4), others=_no_mesh)
    assert main(["data", "check", str(old), "--preset", "demo"]) == 0
    assert main(["data", "check-twin", "--data", str(old), "--preset", "demo", "--split", "val",
                 "--out", str(tmp_path / "twin_old.json")]) == 0
    capsys.readouterr()


def test_check_twin_out_is_a_file_written_again(synth, tmp_path, capsys):
    """`data check-twin --out FILE` checked its file as a folder: the same command run again was refused by its own
    result ("is a file; expected a folder"), and a folder passed the check to fail at the write. Now --out is a file:
    an earlier result is replaced, a folder or a file it did not write is refused by name (left as it was)."""
    out = tmp_path / "twin.json"
    args = ["data", "check-twin", "--data", str(synth), "--preset", "demo", "--split", "val", "--out"]
    assert main(args + [str(out)]) == 0
    assert main(args + [str(out)]) == 0  # the control: run again, its result replaced
    assert json.loads(out.read_text())["split"] == "val"
    mine = tmp_path / "notes.json"
    mine.write_text('{"mine": 1}')
    refused(args + [mine], capsys, "--out:", "did not write")
    assert mine.read_text() == '{"mine": 1}'
    refused(args + [tmp_path], capsys, "--out:", "is a folder; expected a file")


def test_data_check_checks_the_synthetic_fields_only_of_a_synthetic_dataset(synth, tmp_path, capsys):
    """`data check` names a synthetic dataset's camera a renderer cannot use (it passed: only `check-twin` and the
    render condition read it); a dataset of another source keeps its own record format (only the shape every
    renderer needs is checked: its twin may be a registered one)."""
    def no_lookat(rec):
        return {**rec, "camera": {k: v for k, v in rec["camera"].items() if k != "lookat"}}

    bad = _edited(synth, tmp_path / "data", no_lookat)
    refused(["data", "check", bad, "--preset", "demo"], capsys, "bad_twin", "ep_00001", "camera lacks lookat", code=1)
    other = _edited(synth, tmp_path / "other", no_lookat, info=lambda i: {**i, "source": "my-robot"})
    assert main(["data", "check", str(other), "--preset", "demo"]) == 0
    capsys.readouterr()


@pytest.fixture(scope="module")
def mesh_data(tiny, tmp_path_factory) -> Path:
    """The tiny dataset with a synthetic twin record per episode, naming the benchmark's mesh."""
    from simforcing.data.format import read_episodes, write_twin_record

    camera = {"lookat": [0.27, 0.0, 0.23], "distance": 1.05, "azimuth": 215.0, "elevation": -32.0}
    root = Path(shutil.copytree(tiny[0], tmp_path_factory.mktemp("round8_twin") / "data"))
    for eid in read_episodes(root):
        write_twin_record(root, eid, {"camera": dict(camera), "mesh": [14, 8]})
    return root


def _rollout(run, data, out) -> list:
    return ["rollout", "--ckpt", run, "--data", data, "--horizon", "4", "--rows", "rollout", "--videos", "0",
            "--out", out, "--device", "cpu", "--sample.condition=render", "--sample.n_real=2"]


def test_rollout_with_the_twin_names_a_bad_mesh_and_the_control_runs(ref, mesh_data, tmp_path, capsys):
    """`rollout --sample.condition=render`: a bad mesh was a config error (exit 2) naming no file, raised by the first
    render; now a data error naming the episode and its twin.json before anything is rendered or written."""
    bad = Path(shutil.copytree(mesh_data, tmp_path / "data"))
    path = bad / "episodes" / "val_000" / "twin.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "mesh": [14, "8"]}))
    out = tmp_path / "rollout"
    refused(_rollout(ref, bad, out), capsys, "data error [bad_twin]", "val_000", "twin.json", "mesh: got [14, \"8\"]",
            code=1)
    assert not out.exists()
    assert main([str(w) for w in _rollout(ref, mesh_data, out)]) == 0, capsys.readouterr().err
    assert json.loads((out / "rollout.json").read_text())["sampler"]["condition"] == "render"


def test_the_api_twin_refuses_a_bad_mesh_before_rendering(ref, mesh_data):
    """``WorldModelPipeline.rollout(..., twin=)`` checks the mesh with the rest of the record (a ValueError naming it)
    before the renderer starts; the control: the episode's own twin."""
    from simforcing import WorldModelPipeline, read_episode
    from simforcing.twin import TwinEpisode

    pipe = WorldModelPipeline.from_run(ref, device="cpu", overrides=["--sample.n_real=2"])
    ep = read_episode(mesh_data, "val_000")
    frame, text, state, actions = ep.real[0], ep.instruction, ep.states[0], ep.actions[:4]
    for mesh in ([14], None, "coarse"):
        with pytest.raises(ValueError, match=r"twin.record: mesh: got"):
            pipe.rollout(frame, text, state, actions, twin=TwinEpisode(state, {**ep.twin.record, "mesh": mesh}))
    out = pipe.rollout(frame, text, state, actions, twin=ep.twin)
    assert out.video.shape[0] == 1 + 4 // pipe.cfg.data.frame_stride


def test_the_closed_loop_twin_renders_at_the_mesh_of_the_world_models_data(synth, tmp_path):
    """`policy eval --env world-model --wm-condition render`: the twin record follows the world model's data — a
    world model trained on a generator-4 dataset (rendered at MuJoCo's default) had its twin render at half of it;
    the control: a version-5 dataset's domain renders at ``scene.MESH``."""
    from simforcing.data.synthetic.scene import DEFAULT_MESH, MESH
    from simforcing.data.synthetic.twin import mesh_of
    from simforcing.policy.closed_loop.synthetic import SimDomain, SyntheticTaskEnv

    old = _edited(synth, tmp_path / "old", _no_mesh, info=_version(4))
    env = SyntheticTaskEnv(seed=1, index=0, max_steps=8)
    try:
        for root, mesh in ((old, DEFAULT_MESH), (synth, MESH)):
            domain = SimDomain.of_dataset(root)
            assert domain.mesh == mesh and mesh_of(env.twin_record(domain)) == mesh
    finally:
        env.close()


# ----------------------------------------------------------------------------------------------------------------------
# policy estimate with the hand predictors; an evaluation's distances
# ----------------------------------------------------------------------------------------------------------------------


def _gap_pool(root: Path, tasks=("reach", "push", "grasp")) -> tuple[Path, Path]:
    """(sim, wm) evaluations of evalgen's 4 policies on ``tasks`` × 8 scenes whose world-model episodes record the
    commanded hand's gap (``frame_gap_mm``)."""
    import evalgen

    from simforcing.policy.closed_loop.results import SIMULATOR, WORLD_MODEL, EpisodeOutcome

    rng = np.random.default_rng(3)
    truth = {(p, t, s): bool(rng.random() < r) for p, r in evalgen.RATES.items() for t in tasks for s in range(8)}

    def wm(p, t, s):
        v = truth[(p, t, s)] if rng.random() < 0.75 else not truth[(p, t, s)]
        return EpisodeOutcome(s, v, 10, frame_judged=[v] * 3, frame_margin=[0.01] * 3, frame_arm_mm=[10.0] * 3,
                              frame_gap_mm=[60.0, 20.0 if truth[(p, t, s)] else 80.0])

    with pytest.MonkeyPatch.context() as mp:  # evalgen's evaluations of these tasks
        mp.setattr(evalgen, "TASKS", list(tasks))
        evalgen.evaluation(SIMULATOR, 8, lambda p, t, s: EpisodeOutcome(s, truth[(p, t, s)], 10)).write(root / "sim")
        evalgen.evaluation(WORLD_MODEL, 8, wm).write(root / "wm")
    return root / "sim", root / "wm"


def test_the_hand_predictors_on_tasks_not_on_the_hand_say_what_they_reduce_to(tmp_path, capsys):
    """An evaluation of push and grasp only: --predictor hand is the world model's verdict there and actions a
    constant (failure) — the estimate ran as if it were prediction-powered by the hand; now a note says so
    (estimate.json notes, estimate.md). The control: with reach among the tasks, no note."""
    from simforcing import estimate_success

    sim, wm = _gap_pool(tmp_path / "objects", tasks=("push", "grasp"))
    for predictor, needle in (("hand", "the world model's verdict on every episode"),
                              ("actions", "failure on every episode, a constant")):
        with pytest.warns(UserWarning, match="no episode is of a task whose predicate is on the hand"):
            res, _ = estimate_success(sim, wm, n=3, predictor=predictor, min_trials=3)
        assert len(res.notes) == 1 and "no episode is of a task whose predicate is on the hand (reach)" in \
            res.notes[0] and needle in res.notes[0], res.notes
    sim, wm = _gap_pool(tmp_path / "all")
    for predictor in ("hand", "actions"):
        res, _ = estimate_success(sim, wm, n=3, predictor=predictor, min_trials=3)
        assert res.notes == [] and res.predictor == predictor
    capsys.readouterr()


BAD_DISTANCES = [  # (field, value, what the refusal names)
    ("frame_gap_mm", [60.0, -5.0], "'frame_gap_mm' must be a list of finite numbers >= 0"),
    ("frame_arm_mm", [-1.0, 2.0, 3.0], "'frame_arm_mm' must be a list of finite numbers >= 0"),
    ("frame_error_mm", [[1, 2, 3, 4, 5, 6], [1, 2]], "'frame_error_mm' must be a list of rows"),
    ("frame_error_mm", [["a", 2, 3, 4, 5, 6]], "'frame_error_mm' must be a list of rows"),
    ("frame_error_mm", [[1, 2, 3, 4, 5, -6]], "'frame_error_mm' must be a list of rows"),
]


@pytest.mark.parametrize("key,value,needle", BAD_DISTANCES, ids=[f"{k}-{i}" for i, (k, _, _) in
                                                                  enumerate(BAD_DISTANCES)])
def test_an_evaluations_distances_are_read_as_distances(tmp_path, key, value, needle, capsys):
    """A negative gap read as a hand that reached its object (the hand predictor's success), a negative arm offset
    as trust; text or ragged rows in the judge's errors ended in numpy's traceback when `policy agreement` merged
    simulator evaluations. Now each is named by field; the control: the untouched evaluation is estimated."""
    from evalgen import edited

    sim, wm = _gap_pool(tmp_path / "pool")

    def edit(body):
        episode = body["episodes"]["good"]["reach"][0]
        episode[key] = value

    bad = edited(wm, tmp_path / "bad", edit)
    refused(["policy", "estimate", "--ground-truth", sim, "--wm-eval", bad, "--out", tmp_path / "o", "--n", "3",
             "--predictor", "hand"], capsys, str(bad / "eval.json"), needle)
    assert not (tmp_path / "o").exists()
    assert main(["policy", "estimate", "--ground-truth", str(sim), "--wm-eval", str(wm), "--out",
                 str(tmp_path / "o"), "--n", "3", "--predictor", "hand"]) == 0
    capsys.readouterr()


# ----------------------------------------------------------------------------------------------------------------------
# export --eval from another directory
# ----------------------------------------------------------------------------------------------------------------------


def test_export_takes_an_evaluation_made_with_a_relative_ckpt_elsewhere(ref, tiny, tmp_path, monkeypatch, capsys):
    """`evaluate --ckpt ref` run in one directory recorded the checkpoint as `ref/checkpoints/step_000006`, so `export
    --eval` refused it from any other directory, however the run was spelt. The evaluation now records the absolute
    path; an older one with a relative path is refused saying why and what to do."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    shutil.copytree(ref, here / "ref")
    monkeypatch.chdir(here)
    assert main(["evaluate", "--ckpt", "ref", "--data", str(tiny[0]), "--out", "ev", "--num-samples", "1",
                 "--device", "cpu"]) == 0
    recorded = json.loads((here / "ev" / "eval.json").read_text())["checkpoint"]["path"]
    assert recorded == str((here / "ref" / "checkpoints" / "step_000006").resolve())
    monkeypatch.chdir(there)
    assert main(["export", "--ckpt", "../here/ref", "--out", "shared", "--eval", "../here/ev"]) == 0
    assert (there / "shared" / "config.json").is_file()
    body = json.loads((here / "ev" / "eval.json").read_text())
    body["checkpoint"]["path"] = "ref/checkpoints/step_000006"  # as evaluations recorded it before
    (here / "ev" / "eval.json").write_text(json.dumps(body))
    refused(["export", "--ckpt", "../here/ref", "--out", "shared2", "--eval", "../here/ev"], capsys,
            "scored ref/checkpoints/step_000006 (relative to the directory `evaluate` ran in",
            "export from that directory, or evaluate again")
    assert not (there / "shared2").exists()
    monkeypatch.chdir(here)  # from the directory it was made in, the old record still works
    assert main(["export", "--ckpt", "ref", "--out", str(tmp_path / "shared3"), "--eval", "ev"]) == 0
    capsys.readouterr()


# ----------------------------------------------------------------------------------------------------------------------
# rollout.json's scores; one input under two names
# ----------------------------------------------------------------------------------------------------------------------


def _drift():
    from simforcing.evaluate.results import ChunkSeries, RolloutDrift

    def row(af: float, psnr: float) -> ChunkSeries:
        return ChunkSeries({"af_pos": [af, af], "psnr": [psnr, psnr]}, {"af_pos": af, "psnr": psnr, "psnr_arm": None},
                           {"af_pos": [af] * 4, "psnr": [psnr] * 4}, {"af_pos": [[af, af]], "psnr": [[psnr, None]]})

    return RolloutDrift(run="r", checkpoint={"step": 6, "path": "r/checkpoints/step_000006"}, data="d", split="val",
                        horizon=4, chunk_frames=[2, 2], num_episodes=1, episode_ids=["val_000"],
                        sampler={"condition": "render"}, state_input="integrated", sim_chain="model", probe="p",
                        units="u", forwards_per_episode=42, rows={"rollout": row(0.03, 20.0), "restart": row(0.02, 21.0)},
                        seconds={"rollout": 1.0, "total": 2.0})


BAD_DRIFTS = [  # (what, edit, what the refusal names)
    ("a NaN mean", lambda b: b["rows"]["rollout"]["mean"].update(psnr=math.nan), "'mean.psnr' must be a finite"),
    ("an infinite chunk", lambda b: b["rows"]["rollout"]["per_chunk"]["af_pos"].__setitem__(1, math.inf),
     "'per_chunk.af_pos' must be a list of finite"),
    ("text in an episode's chunk", lambda b: b["rows"]["restart"]["per_episode_chunk"]["psnr"][0].__setitem__(0, "x"),
     "rows.restart: field 'per_episode_chunk.psnr'"),
    ("a row that is a list", lambda b: b["rows"].update(rollout=[]), "rows.rollout"),
    ("negative seconds", lambda b: b["seconds"].update(total=-1), "field 'seconds'"),
    ("forwards as text", lambda b: b.update(forwards_per_episode="42"), "field 'forwards_per_episode'"),
    ("no units", lambda b: b.pop("units"), "field 'units' is missing"),
]


@pytest.mark.parametrize("what,edit,needle", BAD_DRIFTS, ids=[w for w, _, _ in BAD_DRIFTS])
def test_a_rollout_json_with_bad_scores_is_named_by_field(what, edit, needle, tmp_path, capsys):
    """rollout.json's rows were read untyped: NaN, infinity or text in a score passed its type check into the demo's
    rollout section and plots (`fidelity point` refused only the values it reads). Now `RolloutDrift.read` names the
    field, and `fidelity point --twin` refuses the file by it (exit 2, nothing written)."""
    from simforcing.evaluate.results import RolloutDrift

    good = tmp_path / "good"
    good.mkdir()
    (good / "rollout.json").write_text(json.dumps(_drift().to_json()))
    body = _drift().to_json()
    edit(body)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rollout.json").write_text(json.dumps(body))
    with pytest.raises(ConfigError, match="malformed field"):
        RolloutDrift.read(bad, "--twin")
    refused(["fidelity", "point", "--twin", bad, "--out", tmp_path / "p"], capsys, str(bad / "rollout.json"), needle)
    assert not (tmp_path / "p").exists()
    assert RolloutDrift.read(good, "--twin") == _drift()  # the control
    assert main(["fidelity", "point", "--twin", str(good), "--out", str(tmp_path / "p")]) == 0
    capsys.readouterr()


def _said(words: list, capsys) -> str:
    """``simforcing WORDS`` in-process succeeds; its stderr."""
    assert main([str(w) for w in words]) == 0
    return capsys.readouterr().err


def test_one_world_model_evaluation_under_two_names_is_said(tmp_path, capsys):
    """`policy agreement --wm a=EVAL b=EVAL` (or a copy of EVAL as b) compares one world model with itself: two
    identical rows, a --reference difference of 0 that could be read as a result — without a word. It stays allowed
    (a control of the statistics: test_faults_edges) and is now said in a note naming both; two different
    evaluations get no note."""
    from evalgen import TASKS, evaluation

    from simforcing.policy.closed_loop.results import SIMULATOR, WORLD_MODEL, EpisodeOutcome, JudgeRecord

    judge = JudgeRecord({}, 2, "j")
    evaluation(SIMULATOR, 4, lambda p, t, s: EpisodeOutcome(s, (s + len(p)) % 2 == 0, 10), judge=judge).write(
        tmp_path / "sim")
    for name, shift in (("wm1", 0), ("wm2", 1)):
        evaluation(WORLD_MODEL, 4, lambda p, t, s: EpisodeOutcome(s, (s + len(p) + shift + TASKS.index(t)) % 3 == 0,
                                                                  10), judge=judge).write(tmp_path / name)
    shutil.copytree(tmp_path / "wm1", tmp_path / "copy")

    def agreement(a: str, b: str) -> list:
        return ["policy", "agreement", "--sim", tmp_path / "sim", "--bootstrap", "20", "--out", tmp_path / "ag",
                "--wm", f"a={tmp_path / a}", f"b={tmp_path / b}"]

    err = _said(agreement("wm1", "wm1/."), capsys)
    assert "note: --wm: 'a' and 'b' are the same folder" in err and "one world-model evaluation compared with " \
        "itself" in err
    assert "copies of one eval.json" in _said(agreement("wm1", "copy"), capsys)
    assert "note:" not in _said(agreement("wm1", "wm2"), capsys)  # the control
    assert {"a", "b"} <= set(json.loads((tmp_path / "ag" / "agreement.json").read_text())["envs"])


def test_one_fidelity_point_under_two_names_is_said(tmp_path, capsys):
    """`fidelity curve --points a=P b=P` drew one measurement as two world models without a word; now a note names
    both (the same folder or a copy of its fidelity.json); the control: two points, no note."""
    for name, core in (("p1", "5"), ("p2", "9")):
        assert main(["fidelity", "point", "--core-s", core, "--label", name, "--out", str(tmp_path / name)]) == 0
    shutil.copytree(tmp_path / "p1", tmp_path / "copy")

    def curve(a: str, b: str) -> list:
        return ["fidelity", "curve", "--points", f"a={tmp_path / a}", f"b={tmp_path / b}", "--out", tmp_path / "c"]

    assert "note: --points: 'a' and 'b' are the same folder" in _said(curve("p1", "p1"), capsys)
    assert "copies of one fidelity.json" in _said(curve("p1", "copy"), capsys)
    assert "note:" not in _said(curve("p1", "p2"), capsys)


# ----------------------------------------------------------------------------------------------------------------------
# docs/demo_timing/record.py
# ----------------------------------------------------------------------------------------------------------------------


def test_record_refuses_a_demo_with_missing_sections_unless_allowed(tmp_path):
    """record.py recorded a results.json whose jobs failed as if whole (its figures "—" in the README, not a word);
    a results.json that is not JSON, without its job seconds or with a section of the wrong type ended in a
    traceback. Each now one line naming the file; --allow-missing records the partial demo. The control: a whole
    results.json is recorded with its figures."""
    from evalgen import demo_results

    rec = record_module()
    whole = {"wall_time_s": {"data": 10.0, "total": 10.0}, **demo_results()}
    path = tmp_path / "results.json"
    partial = {k: v for k, v in whole.items() if k not in ("fewstep", "estimate")}
    path.write_text(json.dumps(partial))
    with pytest.raises(SystemExit, match=r"results.json: no fewstep, estimate section\(s\).*--allow-missing"):
        rec.read_results(path)
    _, figs = rec.read_results(path, allow_missing=True)
    assert figs["student_psnr"] is None and figs["sft_psnr"] == 23.0
    for body, needle in (("{", "results.json: Expecting"), (json.dumps({**whole, "wall_time_s": None}), "wall_time_s"),
                         (json.dumps({**whole, "summary": []}), "summary is a JSON list")):
        path.write_text(body)
        with pytest.raises(SystemExit, match=needle):
            rec.read_results(path)
    path.write_text(json.dumps(whole))
    results, figs = rec.read_results(path)
    assert results == whole and figs["student_psnr"] == 23.5 and figs["pearson_simforcing"] == 0.5


# ----------------------------------------------------------------------------------------------------------------------
# A run trained with relative paths, used from another working directory
# ----------------------------------------------------------------------------------------------------------------------


def test_a_run_given_relative_paths_opens_from_any_working_directory(tiny, tmp_path, monkeypatch, capsys):
    """`make demo` trains its runs with ``--model.vae.path=runs/demo/vae`` from the clone's root, and each run's config
    records that path as given: from any other directory the run's VAE was "not a folder" (found using the release
    demo's policies and world models from a study's folder). A run's relative VAE and probe folders that do not exist
    from the working directory are now taken from the nearest folder above the run where they do
    (``runs.folder.located``, applied wherever a run is opened for use). The controls: from the project's root the
    path stays as recorded, and a path found nowhere is named by the loader as before."""
    from simforcing.models.vae import load_vae
    from simforcing.runs.folder import located, open_run, run_config

    root, vae = tiny
    proj = tmp_path / "proj"
    shutil.copytree(vae, proj / "runs" / "demo" / "vae")
    monkeypatch.chdir(proj)
    words = pretrain_args(Path("runs/demo/s1"), (root, Path("runs/demo/vae")))
    assert main(words) == 0
    capsys.readouterr()
    assert open_run("runs/demo/s1").cfg.model.vae.path == "runs/demo/vae"  # where it was started: as recorded
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    run = proj / "runs" / "demo" / "s1"
    for cfg in (open_run(run).cfg, run_config(run)):
        assert Path(cfg.model.vae.path) == proj / "runs" / "demo" / "vae"
        assert load_vae(cfg).latent_channels == cfg.model.vae.latent_channels
    assert main(["evaluate", "--ckpt", str(run), "--data", str(root), "--split", "val", "--num-samples", "1",
                 "--out", str(tmp_path / "ev")]) == 0  # the whole command, from elsewhere
    capsys.readouterr()
    lost = open_run(run).cfg
    lost.model.vae.path = "runs/nowhere/vae"
    assert located(lost, run).model.vae.path == "runs/nowhere/vae"
    with pytest.raises(ConfigError, match="runs/nowhere/vae"):
        load_vae(lost)


def test_one_checkpoint_evaluated_from_two_directories_is_one_policy(tmp_path, capsys):
    """An evaluation records a learned policy's run folder absolute but its checkpoint as it was given: `make demo`'s
    simulator pool (made from the clone's root) names ``runs/demo/wm_eval/policies/base_500/checkpoints/...``, a
    world-model pool of the same policy made from another directory names it absolute — and `policy estimate`
    refused the pair as "not the ground truth" (a study's estimate on the release demo's pool). The policy is now
    compared by its run, its checkpoint's folder name and its step; another checkpoint of the run is still named."""
    from evalgen import edited, write_known_pool

    from simforcing.policy.agreement.statistics import policy_differences
    from simforcing.policy.closed_loop.results import PolicyEvaluation

    root, _ = write_known_pool(tmp_path / "pool")
    run = str(tmp_path / "clone" / "runs" / "demo" / "wm_eval" / "policies" / "base_500")

    def learned(checkpoint: str):
        def edit(body: dict) -> None:
            body["runs"] = {"good": {"run": run, "checkpoint": checkpoint, "step": 500, "finished": True}}
            body["learned"] = ["good"]
        return edit

    sim = edited(root / "sim", tmp_path / "sim", learned("runs/demo/wm_eval/policies/base_500/checkpoints/step_000500"))
    wm = edited(root / "wm", tmp_path / "wm", learned(run + "/checkpoints/step_000500"))
    other = edited(root / "wm", tmp_path / "other", learned(run + "/checkpoints/step_000400"))
    read = {k: PolicyEvaluation.read(v, k) for k, v in (("sim", sim), ("wm", wm), ("other", other))}
    assert policy_differences(read["wm"], read["sim"], "--ground-truth") == []
    assert "step_000400" in " ".join(policy_differences(read["other"], read["sim"], "--ground-truth"))
    assert main(["policy", "estimate", "--ground-truth", str(sim), "--wm-eval", str(wm), "--n", "10",
                 "--predictor", "verdict", "--out", str(tmp_path / "est")]) == 0
    capsys.readouterr()
    refused(["policy", "estimate", "--ground-truth", str(sim), "--wm-eval", str(other), "--n", "10", "--predictor",
             "verdict", "--out", str(tmp_path / "est2")], capsys, "not the ground truth", "step_000400")
