"""A world-model run as a shareable folder, laid out as people share world models (``simforcing export``).

    simforcing export --ckpt RUN --out DIR [--step N] [--eval EVAL_DIR ...] [--max-shard-size 2GB]
    pipe = WorldModelPipeline.from_pretrained(DIR)          # samples what WorldModelPipeline.from_run(RUN) samples

    DIR/config.json                       {"format": "simforcing.world-model", "format_version", "config" (the
                                          checkpoint's own, whole), "source" (run, kind, step), "vae", "text_encoder"}
    DIR/model-0000i-of-0000K.safetensors  the network's weights, in shards of at most ``max_shard_bytes``
    DIR/model.safetensors.index.json      {"metadata": {"total_size"}, "weight_map": {tensor: shard}}
    DIR/normalizer.json                   the action/state statistics it was trained with (when recorded)
    DIR/vae/                              a demo VAE, copied in (small); a Wan2.2 VAE is named, not copied
    DIR/README.md                         the model card: method, data, training budget, evaluations, what it expects

Loading (:func:`load_pretrained`) builds the network from the recorded config, loads every shard strictly and gives
the same ``runs.loaded.LoadedWorldModel`` a run gives (its checkpoint: the folder, with the run's kind and step), so
every caller samples it as it samples the run. The VAE and the text encoder it expects are the run's: a demo VAE travels
in the folder; a Wan VAE or a umT5 folder is found at its recorded path or given (``vae=``, ``text_encoder=``).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import load_file, save_file

from simforcing import __version__
from simforcing.config import Config, ConfigError
from simforcing.data.stats import Normalizer
from simforcing.errors import CheckpointError
from simforcing.evaluate.results import WindowEvaluation
from simforcing.models.vae import load_vae
from simforcing.models.world_model import build_world_model
from simforcing.result_files import WORLD_MODEL_EXPORT as FORMAT
from simforcing.result_files import folder_contents, read_result, tagged
from simforcing.runs.loaded import CheckpointId, LoadedWorldModel, load_world_model
from simforcing.utils import atomic_write, atomic_write_json, atomic_write_text, check_output_path

FORMAT_VERSION = 1
INDEX_FILE, NORMALIZER_FILE, CARD_FILE = "model.safetensors.index.json", "normalizer.json", "README.md"
DEFAULT_SHARD_BYTES = 2 * 1024 ** 3


def parse_size(text: str, flag: str = "--max-shard-size") -> int:
    """"2GB", "500MB", "64KB" or a byte count -> bytes."""
    units = {"KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}
    t = str(text).strip().upper()
    try:
        n = next((float(t[:-2]) * f for u, f in units.items() if t.endswith(u)), None)
        n = int(t) if n is None else int(n)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"{flag}: got {text!r}; expected a size such as 2GB, 500MB or a byte count >= 1")
    return n


# ----------------------------------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------------------------------


def shard_names(state: dict[str, torch.Tensor], max_shard_bytes: int) -> list[list[str]]:
    """The tensor names in shards of at most ``max_shard_bytes`` (a larger tensor gets a shard of its own), in the
    state dict's order."""
    shards, size = [[]], 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def write_weights(state: dict[str, torch.Tensor], out: Path, max_shard_bytes: int) -> dict:
    """The sharded safetensors files and their index; returns the index."""
    groups = shard_names(state, max_shard_bytes)
    weight_map, total = {}, 0
    for i, names in enumerate(groups, 1):
        file = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        part = {n: state[n].detach().cpu().contiguous().clone() for n in names}  # no shared storage between tensors
        atomic_write(out / file, lambda p, part=part: save_file(part, str(p), metadata={"format": "pt"}))
        weight_map.update({n: file for n in names})
        total += sum(t.numel() * t.element_size() for t in part.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    atomic_write_json(out / INDEX_FILE, index)
    return index


def export_run(run: str | Path, out: str | Path, step: Optional[int] = None, evals: tuple = (),
               max_shard_bytes: int = DEFAULT_SHARD_BYTES) -> Path:
    """Write the shareable folder of a world-model run's newest valid checkpoint (or ``step``) to ``out`` (module
    docstring); ``evals``: folders of `simforcing evaluate` of this checkpoint, whose numbers go on the model card.
    Returns ``out``."""
    out = prepare_out(out)
    wm = load_world_model(run, None, "cpu", step)
    scores = [read_one_window_eval(e, wm.checkpoint) for e in evals]  # refused before anything is written
    for old in out.glob("model-*-of-*.safetensors"):  # an earlier export's shards (prepare_out checked it is one)
        old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    cfg = copy.deepcopy(wm.cfg)
    vae = {"kind": cfg.model.vae.kind, "path": cfg.model.vae.path, "latent_channels": cfg.model.vae.latent_channels,
           "copied": cfg.model.vae.kind == "demo"}
    if vae["copied"]:
        if (out / "vae").exists():
            shutil.rmtree(out / "vae")
        shutil.copytree(cfg.model.vae.path, out / "vae")
        cfg.model.vae.path = "vae"  # relative to the folder
    state = wm.model.state_dict()
    index = write_weights(state, out, max_shard_bytes)
    if wm.normalizer is not None:
        atomic_write_json(out / NORMALIZER_FILE, wm.stats)
    source = {"run": str(Path(run).resolve()), "kind": wm.checkpoint.kind, "step": wm.checkpoint.step,
              "checkpoint": str(wm.checkpoint.path), "simforcing": __version__}
    text = {"path": cfg.model.text_encoder, "kind": "umT5 (transformers folder)" if cfg.model.text_encoder else
            "the demo's seeded small T5 (deterministic; nothing to ship)"}
    atomic_write_json(out / "config.json", tagged(FORMAT, FORMAT_VERSION, {
        "config": cfg.to_dict(), "source": source, "vae": vae, "text_encoder": text,
        "parameters": sum(t.numel() for t in state.values()), "total_size": index["metadata"]["total_size"]}))
    from simforcing.model_card import model_card  # the card reads the run's status and metrics

    atomic_write_text(out / CARD_FILE, model_card(wm, Path(run), source, vae, text, scores, index))
    return out


def prepare_out(out: str | Path) -> Path:
    """``--out`` checked before any work: a new or empty folder, or an earlier export (replaced); a folder holding
    anything else is refused by name (nothing of the user's is overwritten)."""
    out = check_output_path(out, "--out")
    if out.is_dir() and any(out.iterdir()):
        try:
            read_export(out)
        except ConfigError:
            raise ConfigError(f"--out: {out} holds {folder_contents(out)} and is not an earlier export; give a new or "
                              "empty folder") from None
    return out


def read_one_window_eval(folder: str | Path, checkpoint: CheckpointId) -> WindowEvaluation:
    """FOLDER/eval.json of `simforcing evaluate`, refused by name when it is another kind of result or scored another
    checkpoint (or none: a baseline)."""
    path = Path(folder) / "eval.json"
    res = WindowEvaluation.read(folder, "--eval")
    rec = res.checkpoint
    if rec is None:
        raise ConfigError(f"--eval: {path} is not an evaluation of a world-model checkpoint (`simforcing evaluate "
                          "--ckpt RUN`: a baseline records none)")
    if Path(str(rec.path)).resolve() != Path(checkpoint.path).resolve():
        raise ConfigError(f"--eval: {path} scored {rec.path}; the exported checkpoint is {checkpoint.path} — "
                          "give evaluations of this checkpoint only")
    return res


# ----------------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------------


def read_export(folder: str | Path) -> dict:
    """FOLDER/config.json of an exported world model, or a ConfigError naming what the folder holds instead."""
    obj, _ = read_result(Path(folder) / "config.json", FORMAT, FORMAT_VERSION, "from_pretrained")
    return obj


def load_pretrained(folder: str | Path, device: str | torch.device = "cpu", vae: Optional[str | Path] = None,
                    text_encoder: Optional[str | Path] = None, cfg: Optional[Config] = None) -> LoadedWorldModel:
    """The exported world model in ``folder`` ready to sample; ``vae`` / ``text_encoder``: folders replacing the
    recorded ones (a Wan VAE or umT5 that lives elsewhere on this machine); ``cfg``: the data/sample/eval/rollout
    settings to use instead of the recorded ones (``runs.loaded.merge_run_config``)."""
    from simforcing.runs.loaded import merge_run_config

    folder = Path(folder)
    meta = read_export(folder)
    own = Config.from_dict(meta["config"], source=str(folder / "config.json"))
    if meta["vae"].get("copied"):
        own.model.vae.path = str(folder / own.model.vae.path)
    if vae is not None:
        own.model.vae.path = str(vae)
    if text_encoder is not None:
        own.model.text_encoder = str(text_encoder)
    merged = merge_run_config(own, cfg)
    model = build_world_model(merged, device="cpu")
    model.load_state_dict(read_weights(folder), strict=True)
    stats_path = folder / NORMALIZER_FILE
    normalizer = Normalizer(json.loads(stats_path.read_text())) if stats_path.is_file() else None
    src = meta["source"]
    return LoadedWorldModel(merged, model.to(device).eval(), load_vae(merged, device), normalizer,
                            CheckpointId(folder, src.get("kind"), int(src.get("step", 0)), folder))


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the shards the index names (a missing or damaged shard: CheckpointError naming it)."""
    try:
        index = json.loads((folder / INDEX_FILE).read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"the shard index cannot be read ({e}); expected the folder `simforcing export` wrote",
                              folder / INDEX_FILE) from e
    state: dict[str, torch.Tensor] = {}
    for file in sorted(set(index["weight_map"].values())):
        try:
            state.update(load_file(str(folder / file)))
        except Exception as e:  # safetensors' own error type, a missing file: both "this shard"
            raise CheckpointError(f"the shard cannot be read ({e})", folder / file) from e
    missing = sorted(set(index["weight_map"]) - set(state))
    if missing:
        raise CheckpointError(f"the shards lack {len(missing)} tensors the index names (e.g. {missing[0]})",
                              folder / INDEX_FILE)
    return state
