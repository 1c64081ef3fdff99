"""The policy dataset's format: real-only episodes with two (or more) cameras side by side, actions, states.

    DATASET/
      meta/info.json         {"format": "simforcing-policy", "version": 1, "fps", "height", "width" (per camera),
                              "cameras": [external, wrist], "action_dim", "state_dim", "source"}
      meta/episodes.jsonl    {"episode_id", "length" (frames T), "instruction", "task" (optional)}
      meta/splits.json       {"train": [ids], "val": [ids], "sim_pool": []}
      meta/stats.json        min–max of actions and states over train (``simforcing.data.stats``)
      episodes/<id>/obs.mp4  (T, height, cameras·width, 3): [external | wrist]
      episodes/<id>/lowdim.npz  actions float32 (T−1, A), states float32 (T, S)
      text_cache/            instruction embeddings (``simforcing data embed-text``)

It lives in ``data/`` beside the paired format so that one validator (``data.check``) knows both; the dataset of
training windows is ``simforcing.policy.data.PolicyWindowDataset``. Every path goes through ``format.episode_file``
(a plain id, nothing that links out of the dataset).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simforcing.data.format import (DataError, episode_dir, episode_file, load_npz_field, meta_dir, read_json,
                                    write_video)
from simforcing.utils import atomic_write, atomic_write_json

FORMAT = "simforcing-policy"
VERSION = 1
VIDEO = "obs.mp4"
LOWDIM = "lowdim.npz"
INT_FIELDS = ("fps", "height", "width", "action_dim", "state_dim")


def is_policy_dataset(root: str | Path) -> bool:
    """Whether ``root``'s info.json says it is a policy dataset (False when it cannot be read)."""
    try:
        return json.loads((meta_dir(root) / "info.json").read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def write_policy_episode(root: str | Path, episode_id: str, frames: np.ndarray, actions: np.ndarray,
                         states: np.ndarray, fps: int = 10) -> None:
    """frames uint8 (T, H, 2W, 3) [external | wrist], actions (T−1, A), states (T, S)."""
    d = episode_dir(root, episode_id)
    d.mkdir(parents=True, exist_ok=True)
    write_video(d / VIDEO, frames, fps)

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, actions=np.asarray(actions, np.float32), states=np.asarray(states, np.float32))

    atomic_write(d / LOWDIM, save)


def write_policy_meta(root: str | Path, info: dict, episodes: list[dict], splits: dict[str, list[str]]) -> None:
    m = meta_dir(root)
    m.mkdir(parents=True, exist_ok=True)
    atomic_write_json(m / "info.json", {"format": FORMAT, "version": VERSION, **info})
    text = "".join(json.dumps(e) + "\n" for e in episodes)
    atomic_write(m / "episodes.jsonl", lambda p: p.write_text(text))
    atomic_write_json(m / "splits.json", {"train": list(splits.get("train", [])), "val": list(splits.get("val", [])),
                                          "sim_pool": []})


def read_policy_info(root: str | Path, cameras: int = 2) -> dict:
    """meta/info.json of a policy dataset: DataError when it is another format (``bad_meta``), a field has the wrong
    type (``bad_meta``) or it names fewer than ``cameras`` cameras (``missing_camera``; a policy reads the first
    ``policy.cameras`` of them: external, then wrist)."""
    path = meta_dir(root) / "info.json"
    info = read_json(path, "dataset info")
    if info.get("format") != FORMAT:
        hint = (" (a paired sim/real world-model dataset: a policy needs real episodes with two cameras; write one "
                "with `simforcing data synth-policy` or `data import-lerobot --real DIR --camera KEY --wrist-camera "
                "KEY`)") if info.get("format") == "simforcing-paired" else ""
        raise DataError(f"field 'format' is {info.get('format')!r}; expected {FORMAT!r}{hint}", path=path,
                        kind="bad_meta")
    for name in INT_FIELDS:
        v = info.get(name)
        if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
            raise DataError(f"field {name!r} is {v!r}; expected a positive integer", path=path, kind="bad_meta")
    cams = info.get("cameras") or []
    if not isinstance(cams, list) or not all(isinstance(c, str) for c in cams):
        raise DataError(f"field 'cameras' is {cams!r}; expected a list of camera names", path=path, kind="bad_meta")
    if len(cams) < cameras:
        what = "two cameras (external + wrist) side by side" if cameras == 2 else f"{cameras} camera(s)"
        raise DataError(f"field 'cameras' is {cams!r}; the policy observes {what}; import the wrist camera too "
                        "(--wrist-camera), or train on the external camera alone (--policy.cameras=1)", path=path,
                        kind="missing_camera")
    return info


def read_policy_lowdim(root: str | Path, episode_id: str) -> tuple[np.ndarray, np.ndarray]:
    """(actions (T−1, A), states (T, S)); a missing states column is DataError kind ``missing_states``."""
    p = episode_file(root, episode_id, LOWDIM)
    actions = load_npz_field(p, "actions", episode_id)
    try:
        states = load_npz_field(p, "states", episode_id)
    except DataError as e:
        if e.kind != "missing_field":
            raise
        raise DataError("field 'states' is missing: the policy needs the proprio state of every frame (the state "
                        "token); import it with --state-key", episode_id, p, kind="missing_states") from e
    return actions, states
