"""Policy datasets get the world-model datasets' checks: one validator (``data check`` knows policy datasets), the
same named errors before training (paths inside the dataset, shapes of actions/states/frames, the cameras against the
video, finite values), ``--skip-bad`` / ``--data.skip_bad=true`` skip and name the bad episodes everywhere they are
accepted (``import-lerobot --wrist-camera`` too), and episodes shorter than a window are named, not dropped silently.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from datagen import INSTRUCTIONS, make_lowdim, make_policy_dataset
from faultkit import POLICY_LENGTH, policy_args, status, steps

from simforcing.cli import main
from simforcing.policy.data import write_policy_episode

pytestmark = pytest.mark.faults

# episode -> the kind ``data check`` names; in this order in splits.json (after three good episodes)
BAD = {"ep_link": "unsafe_path", "ep_few_actions": "bad_action_shape", "ep_many_actions": "video_shorter_than_actions",
       "ep_nan_action": "non_finite", "ep_inf_state": "non_finite", "ep_narrow_state": "bad_state_shape",
       "ep_wide_video": "camera_mismatch"}
SHORT = "ep_short"  # 3 frames: shorter than one 5-step window, not an error


def _add_episode(root: Path, eid: str, frames: np.ndarray, actions: np.ndarray, states: np.ndarray) -> None:
    write_policy_episode(root, eid, frames, actions, states)
    with open(root / "meta" / "episodes.jsonl", "a") as f:
        f.write(json.dumps({"episode_id": eid, "length": len(frames), "instruction": INSTRUCTIONS[0]}) + "\n")
    splits = json.loads((root / "meta" / "splits.json").read_text())
    splits["train"].append(eid)
    (root / "meta" / "splits.json").write_text(json.dumps(splits))


@pytest.fixture(scope="module")
def bad_policy(tmp_path_factory) -> Path:
    """Three good episodes (the statistics are theirs), then one bad episode of each kind in BAD, then a short one."""
    base = tmp_path_factory.mktemp("bad_policy")
    root = make_policy_dataset(base / "data", length=POLICY_LENGTH)
    rng = np.random.default_rng(5)
    T = POLICY_LENGTH

    def frames(width: int = 96, t: int = T) -> np.ndarray:
        return rng.integers(0, 255, (t, 32, width, 3), dtype=np.uint8)

    a, s = make_lowdim(T, 9)
    for eid in BAD:
        act, st, fr = a.copy(), s.copy(), frames()
        if eid == "ep_few_actions":
            act = act[:4]
        elif eid == "ep_many_actions":
            act = np.concatenate([act, act])
        elif eid == "ep_nan_action":
            act[3, 2] = np.nan
        elif eid == "ep_inf_state":
            st[5, 1] = np.inf
        elif eid == "ep_narrow_state":
            st = st[:, :6]
        elif eid == "ep_wide_video":
            fr = frames(144)
        _add_episode(root, eid, fr, act, st)
    outside = base / "outside.mp4"  # a file out of the dataset, reached through a symlink
    shutil.move(root / "episodes" / "ep_link" / "obs.mp4", outside)
    os.symlink(outside, root / "episodes" / "ep_link" / "obs.mp4")
    a3, s3 = make_lowdim(3, 10)
    _add_episode(root, SHORT, frames(t=3), a3, s3)
    return root


def test_data_check_knows_a_policy_dataset(policy_data, capsys):
    assert main(["data", "check", str(policy_data)]) == 0
    out = capsys.readouterr().out
    assert "policy, 2 cameras" in out and "dataset OK" in out


def test_bad_policy_episodes_are_named_by_data_check_and_training(bad_policy, tiny, tmp_path, capsys):
    first = next(iter(BAD))
    assert main(["data", "check", str(bad_policy)]) == 1
    err = capsys.readouterr().err
    assert f"data error [{BAD[first]}]" in err and f"episode {first}" in err and "Traceback" not in err, err
    assert main(["data", "check", str(bad_policy), "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert all(f"skipped [{kind}] episode {eid}" in out for eid, kind in BAD.items()), out
    assert f"{len(BAD)} bad episodes skipped" in out
    run = tmp_path / "refused"
    assert main(policy_args(run, bad_policy, tiny[1])) == 1  # before any step
    err = capsys.readouterr().err
    assert f"data error [{BAD[first]}]" in err and not steps(run), err


def test_policy_training_skips_and_names_bad_and_short_episodes(bad_policy, tiny, tmp_path, capsys):
    run = tmp_path / "skipping"
    assert main(policy_args(run, bad_policy, tiny[1], "--data.skip_bad=true")) == 0
    out = capsys.readouterr().out
    st = status(run)
    assert st["state"] == "finished" and st["skipped_episodes"] == len(BAD)
    assert [s["episode"] for s in st["skipped"]] == list(BAD)
    assert all(f"[{kind}]" in s["reason"] for s, kind in zip(st["skipped"], BAD.values()))
    assert st["too_short_episodes"] == 1 and st["too_short"] == [{"episode": SHORT, "length": 3}]
    assert "too_short_for_window" in out and SHORT in out


def test_cameras_named_in_info_json_must_match_the_video(policy_data, tiny, tmp_path, capsys):
    """info.json naming 3 cameras for a 2-camera video: the policy would cut the frames in 3 while evaluation cuts
    them in 2; a camera width that does not add up to the video's: both refused by name before training."""
    root = Path(shutil.copytree(policy_data, tmp_path / "three"))
    info = json.loads((root / "meta" / "info.json").read_text())
    (root / "meta" / "info.json").write_text(json.dumps({**info, "cameras": ["external", "wrist", "top"]}))
    assert main(["data", "check", str(root)]) == 1
    err = capsys.readouterr().err
    assert "[camera_mismatch]" in err and "names 3 cameras" in err, err
    assert main(policy_args(tmp_path / "run", root, tiny[1])) == 1
    assert "[camera_mismatch]" in capsys.readouterr().err and not (tmp_path / "run" / "checkpoints").exists()
    # a policy reading more cameras than the dataset has (it may read fewer: the external camera alone)
    assert main(policy_args(tmp_path / "run3", policy_data, tiny[1], "--policy.cameras=3")) == 2  # config: 1 or 2
    assert main(["data", "check", str(policy_data), "--policy.cameras=1"]) == 0
    (root / "meta" / "info.json").write_text(json.dumps({**info, "width": 40}))
    assert main(["data", "check", str(root)]) == 1
    err = capsys.readouterr().err
    assert "[camera_mismatch]" in err and "96 px wide" in err and "2 cameras of width 40" in err, err


def test_import_lerobot_wrist_camera_honours_skip_bad(tmp_path, capsys):
    from test_lerobot import CAM, WRIST, with_wrist_camera, write_lerobot_v3

    src = write_lerobot_v3(tmp_path / "src", [12, 1, 12], real=True)  # episode 1: one frame
    real = with_wrist_camera(src, tmp_path / "real")
    words = ["data", "import-lerobot", "--real", str(real), "--camera", CAM, "--wrist-camera", WRIST, "--val-fraction",
             "0", "--no-progress"]
    assert main(words + ["--out", str(tmp_path / "strict")]) == 1
    assert "[too_short_episode]" in capsys.readouterr().err and not (tmp_path / "strict").exists()
    assert main(words + ["--out", str(tmp_path / "ok"), "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert "skipped [too_short_episode] episode ep000001" in out and "1 bad episodes skipped" in out, out
    splits = json.loads((tmp_path / "ok" / "meta" / "splits.json").read_text())
    assert splits["train"] == ["ep000000", "ep000002"]
