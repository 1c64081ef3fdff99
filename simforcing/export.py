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
import math
import shutil
from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import load_file, save_file

from simforcing.version import __version__
from simforcing.config import Config, ConfigError
from simforcing.data.stats import Normalizer
from simforcing.errors import CheckpointError
from simforcing.evaluate.results import WindowEvaluation
from simforcing.models.vae import load_vae
from simforcing.models.world_model import build_world_model
from simforcing.result_files import WORLD_MODEL_EXPORT as FORMAT
from simforcing.result_files import folder_contents, read_result, tagged
from simforcing.runs.loaded import CheckpointId, LoadedWorldModel, load_world_model
from simforcing.utils import atomic_write, atomic_write_json, atomic_write_text, check_output_path, weights_digest

FORMAT_VERSION = 1
INDEX_FILE, NORMALIZER_FILE, CARD_FILE = "model.safetensors.index.json", "normalizer.json", "README.md"
DEFAULT_SHARD_BYTES = 2 * 1024 ** 3
MAX_SHARD_BYTES = 1024 ** 4  # 1 TB: a larger "shard size" is a typo, not a plan
SHARD_SUFFIX = ".safetensors"


def parse_size(text: str, flag: str = "--max-shard-size") -> int:
    """"2GB", "500MB", "64KB" or a byte count -> bytes."""
    units = {"KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}
    t = str(text).strip().upper()
    try:
        n = next((float(t[:-2]) * f for u, f in units.items() if t.endswith(u)), None)
        n = int(t) if n is None else int(n)  # inf: OverflowError, nan: ValueError
    except (ValueError, OverflowError):
        n = 0
    if not 1 <= n <= MAX_SHARD_BYTES:
        raise ConfigError(f"{flag}: got {text!r}; expected a size such as 2GB, 500MB or a byte count from 1 to "
                          f"{MAX_SHARD_BYTES // 1024 ** 3}GB")
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
               max_shard_bytes: int = DEFAULT_SHARD_BYTES, allow_unfinished: bool = False) -> Path:
    """Write the shareable folder of a world-model run's newest valid checkpoint (or ``step``) to ``out`` (module
    docstring); ``evals``: folders of `simforcing evaluate` of this checkpoint, whose numbers go on the model card.
    Refused before anything is written: a run that is not finished (still training, stopped, killed, failed,
    diverged: ConfigError) unless ``allow_unfinished`` — then config.json's ``source`` and the model card say so —
    and weights that are not all finite (CheckpointError naming the tensor). The folder is built beside ``out`` and
    replaces it only once complete (an earlier export there is replaced as a whole). Returns ``out``."""
    from simforcing.runs.scored import ScoredRun
    from simforcing.utils import staged_folder

    out = prepare_out(out)
    wm = load_world_model(run, None, "cpu", step)
    scored = ScoredRun.of(run, wm.checkpoint.path, wm.checkpoint.step)
    if not scored.finished and not allow_unfinished:
        raise ConfigError(unfinished_refusal(run, scored, wm.checkpoint.kind))
    scores = [read_one_window_eval(e, wm.checkpoint) for e in evals]  # refused before anything is written
    state = wm.model.state_dict()
    check_finite(state, wm.checkpoint.path, "the checkpoint's weights")
    cfg = copy.deepcopy(wm.cfg)
    vae = {"kind": cfg.model.vae.kind, "path": cfg.model.vae.path, "latent_channels": cfg.model.vae.latent_channels,
           "copied": cfg.model.vae.kind == "demo", "digest": weights_digest(cfg.model.vae.path)}
    source = {"run": str(Path(run).resolve()), "kind": wm.checkpoint.kind, "step": wm.checkpoint.step,
              "checkpoint": str(wm.checkpoint.path), "simforcing": __version__, "run_state": scored.run_state,
              "total_steps": scored.total_steps, "finished": scored.finished}
    text = {"path": cfg.model.text_encoder, "kind": "umT5 (transformers folder)" if cfg.model.text_encoder else
            "the demo's seeded small T5 (deterministic; nothing to ship)"}
    with staged_folder(out, overwrite=True, what="exported world model") as tmp:
        if vae["copied"]:
            shutil.copytree(cfg.model.vae.path, tmp / "vae")
            cfg.model.vae.path = "vae"  # relative to the folder
        index = write_weights(state, tmp, max_shard_bytes)
        if wm.normalizer is not None:
            atomic_write_json(tmp / NORMALIZER_FILE, wm.stats)
        atomic_write_json(tmp / "config.json", tagged(FORMAT, FORMAT_VERSION, {
            "config": cfg.to_dict(), "source": source, "vae": vae, "text_encoder": text,
            "parameters": sum(t.numel() for t in state.values()), "total_size": index["metadata"]["total_size"]}))
        from simforcing.model_card import model_card  # the card reads the run's status and metrics

        atomic_write_text(tmp / CARD_FILE, model_card(wm, Path(run), source, vae, text, scores, index))
    return out


def unfinished_refusal(run: str | Path, scored, kind: Optional[str]) -> str:
    """Why an unfinished run is not exported, and what would work (continue it, or ``--allow-unfinished``)."""
    from simforcing.runs.folder import resume_command

    total = f" of {scored.total_steps} planned" if scored.total_steps else ""
    try:
        cont = f"continue it (`{resume_command(run, kind, Config.load(Path(run) / 'config.json'))}`) and export it then"
    except (ConfigError, OSError, ValueError):
        cont = "finish it and export it then"
    return (f"--ckpt: {run} was not finished (run state {scored.run_state}): its checkpoint at step {scored.step}"
            f"{total} is not a finished model; {cont}, or pass --allow-unfinished to export it as it is (config.json "
            "and the model card then say it is unfinished)")


def check_finite(state: dict[str, torch.Tensor], where: str | Path, what: str) -> None:
    """CheckpointError naming the tensors of ``state`` that hold NaN or inf (a diverged or damaged checkpoint whose
    files still match their hashes)."""
    bad = [name for name, t in state.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise CheckpointError(f"{what} hold NaN or inf in {len(bad)} of {len(state)} tensors (e.g. {bad[0]}): not a "
                              "model anyone can sample; use an earlier checkpoint (--step N)", where)


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
        where = ("" if Path(str(rec.path)).is_absolute() else
                 " (relative to the directory `evaluate` ran in, as earlier versions recorded it; export from that "
                 "directory, or evaluate again: the path is now recorded absolute)")
        raise ConfigError(f"--eval: {path} scored {rec.path}{where}; the exported checkpoint is "
                          f"{Path(checkpoint.path).resolve()} — give evaluations of this checkpoint only")
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
    settings to use instead of the recorded ones (``runs.loaded.merge_run_config``).

    The folder is checked before anything is loaded into a network (:func:`check_export`): config.json's sections
    present and typed, its config valid, a copied VAE inside the folder; the index naming safetensors shards inside
    the folder only; every tensor's name and shape those of the network the config describes; every weight finite.
    A folder that fails is a CheckpointError naming the file and what is wrong (a folder that is not an export: a
    ConfigError naming what it is)."""
    import warnings

    from simforcing.runs.loaded import merge_run_config

    folder = Path(folder)
    meta = read_export(folder)
    own, source = check_export(folder, meta)
    if vae is not None:
        own.model.vae.path = str(vae)
    check_export_vae(folder, meta["vae"], own.model.vae.path, vae is not None)
    if text_encoder is not None:
        own.model.text_encoder = str(text_encoder)
    merged = merge_run_config(own, cfg)
    files = check_index(folder)
    check_shapes(folder, files, merged)
    state = read_weights(folder, files)
    check_finite(state, folder, "the exported weights")
    model = build_world_model(merged, device="cpu")
    model.load_state_dict(state, strict=True)
    normalizer = read_normalizer(folder, merged)
    if source.get("finished") is False:
        warnings.warn(f"{folder}: exported from a run that was not finished (run state {source.get('run_state')}, "
                      f"step {source['step']}); its predictions are those of a model still in training", stacklevel=3)
    return LoadedWorldModel(merged, model.to(device).eval(), load_vae(merged, device), normalizer,
                            CheckpointId(folder, source.get("kind"), source["step"], folder))


def check_export_vae(folder: Path, recorded: dict, path: Optional[str], given: bool) -> None:
    """The VAE an export is loaded with holds the weights its run was trained with (config.json ``vae.digest``,
    ``utils.weights_digest``; an export from before the field is not checked): ``vae=`` another VAE is a ConfigError,
    a copied VAE whose weights changed a CheckpointError, each naming both."""
    digest = recorded.get("digest")
    if digest is not None and not isinstance(digest, str):
        raise _malformed(folder, "config.json", f"vae.digest must be a string (the VAE's weights digest); got "
                         f"{digest!r:.40}")
    now = weights_digest(path) if digest and path else None
    if now is None or now == digest:
        return
    what = f"{path} holds another VAE (weights digest {now}) than the run was trained with ({digest})"
    if given:
        raise ConfigError(f"vae: {what}; give the VAE the run was trained with ({recorded.get('path')})")
    raise _malformed(folder, "vae" if recorded.get("copied") else "config.json", what)


def _malformed(folder: Path, file: str, what: str) -> CheckpointError:
    return CheckpointError(f"{what}; expected the folder `simforcing export` wrote (export the run again)",
                           folder / file)


def check_export(folder: Path, meta: dict) -> tuple[Config, dict]:
    """(the recorded config, its ``source``) of config.json, every section checked: ``config`` an object that is a
    valid config, ``source`` an object with the checkpoint's ``step`` (an integer >= 0) and ``kind``, ``vae`` an
    object saying whether the VAE was ``copied`` (then it lies inside the folder). CheckpointError naming what is
    wrong."""
    for key in ("config", "source", "vae"):
        if not isinstance(meta.get(key), dict):
            got = "nothing" if key not in meta else f"a JSON {type(meta[key]).__name__}"
            raise _malformed(folder, "config.json", f"section {key!r} must be an object; got {got}")
    if "text_encoder" in meta and not isinstance(meta["text_encoder"], (dict, type(None))):
        raise _malformed(folder, "config.json", "section 'text_encoder' must be an object")
    source = meta["source"]
    step = source.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise _malformed(folder, "config.json", f"source.step must be an integer >= 0; got {step!r}")
    if not isinstance(source.get("kind"), (str, type(None))):
        raise _malformed(folder, "config.json", f"source.kind must be a string; got {source.get('kind')!r}")
    try:
        own = Config.from_dict(meta["config"], source=str(folder / "config.json")).validate()
    except ConfigError as e:
        raise _malformed(folder, "config.json", f"its config is not a valid simforcing config ({e})") from e
    copied = meta["vae"].get("copied")
    if not isinstance(copied, bool):
        raise _malformed(folder, "config.json", f"vae.copied must be true or false; got {copied!r}")
    if copied:
        rel = own.model.vae.path
        path = inside(folder, rel) if isinstance(rel, str) else None
        if path is None or not path.is_dir():
            raise _malformed(folder, "config.json", f"config.model.vae.path {rel!r} must name the VAE folder copied "
                             "into this folder (vae/)")
        own.model.vae.path = str(path)
    return own, source


def inside(folder: Path, rel: str) -> Optional[Path]:
    """``folder / rel`` when ``rel`` is a relative path that stays inside ``folder`` once symbolic links are resolved;
    None otherwise (an absolute path, ``..``, a link leading out)."""
    if not rel or Path(rel).is_absolute() or "\\" in rel:
        return None
    root = folder.resolve()
    path = (folder / rel).resolve()
    return folder / rel if path != root and root in path.parents else None


def check_index(folder: Path) -> dict[str, list[str]]:
    """{shard file: tensor names} of the index, checked: a JSON object whose ``weight_map`` maps tensor names to
    ``*.safetensors`` files inside the folder (plain names: no path leads out of it, also not by a link) that exist.
    CheckpointError naming the index (or the shard) otherwise."""
    path = folder / INDEX_FILE
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"the shard index cannot be read ({e}); expected the folder `simforcing export` wrote",
                              path) from e
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        got = (f"a JSON {type(index).__name__}" if not isinstance(index, dict) else
               "no weight_map" if "weight_map" not in index else f"weight_map {type(wmap).__name__} {wmap!r:.40}")
        raise _malformed(folder, INDEX_FILE, f"expected an object whose weight_map maps every tensor to its shard; "
                         f"got {got}")
    files: dict[str, list[str]] = {}
    for name, file in wmap.items():
        if not isinstance(file, str):
            raise _malformed(folder, INDEX_FILE, f"weight_map[{name!r}] must be a shard file name; got {file!r}")
        files.setdefault(file, []).append(name)
    for file in files:
        if "/" in file or inside(folder, file) is None:
            raise _malformed(folder, INDEX_FILE, f"weight_map names {file!r}, which is not a file of this folder; "
                             "every shard must lie in the exported folder itself (no path, no link out of it)")
        if not file.endswith(SHARD_SUFFIX):
            raise _malformed(folder, INDEX_FILE, f"weight_map names {file!r}; only safetensors shards "
                             f"(*{SHARD_SUFFIX}) are read")
        if not (folder / file).is_file():
            raise CheckpointError("the shard the index names is missing", folder / file)
    return files


def check_shapes(folder: Path, files: dict[str, list[str]], cfg: Config) -> None:
    """Every tensor of the shards (read from their headers, nothing loaded) is one the index maps to that shard and
    one of the network ``cfg`` describes, of its shape — before any network is built or weight read: an edited
    config.json (other layers, widths) or shards of another model are a CheckpointError naming the tensor."""
    from safetensors import safe_open

    want = {k: tuple(v.shape) for k, v in build_world_model(cfg, meta=True).state_dict().items()}
    got: dict[str, tuple] = {}
    for file, names in sorted(files.items()):
        try:
            with safe_open(str(folder / file), framework="pt") as sf:
                held = {k: tuple(sf.get_slice(k).get_shape()) for k in sf.keys()}
        except Exception as e:  # safetensors' own error type, a truncated header: both "this shard"
            raise CheckpointError(f"the shard cannot be read ({e})", folder / file) from e
        if set(held) != set(names):
            odd = sorted(set(held) ^ set(names))[0]
            raise CheckpointError(f"the shard holds other tensors than the index maps to it (e.g. {odd}); the index "
                                  "and the shards are of different exports", folder / file)
        got.update(held)
    m = cfg.model
    arch = (f"model.num_layers {m.num_layers}, num_attention_heads {m.num_attention_heads}, attention_head_dim "
            f"{m.attention_head_dim}, ffn_dim {m.ffn_dim}")
    for name, shape in want.items():
        if name not in got:
            raise _malformed(folder, "config.json", f"the network it describes ({arch}) has tensor {name}, which no "
                             "shard holds: config.json was edited, or the shards are of another model")
        if got[name] != shape:
            raise _malformed(folder, "config.json", f"tensor {name} is {list(got[name])} in the shards; the network "
                             f"config.json describes ({arch}) needs {list(shape)}: config.json was edited, or the "
                             "shards are of another model")
    extra = sorted(set(got) - set(want))
    if extra:
        raise _malformed(folder, "config.json", f"the shards hold {len(extra)} tensors the network it describes "
                         f"({arch}) does not have (e.g. {extra[0]}): config.json was edited, or the shards are of "
                         "another model")


def read_weights(folder: Path, files: Optional[dict[str, list[str]]] = None) -> dict[str, torch.Tensor]:
    """Every tensor of the shards the index names (:func:`check_index`; a damaged shard: CheckpointError naming
    it)."""
    files = check_index(folder) if files is None else files
    state: dict[str, torch.Tensor] = {}
    for file in sorted(files):
        try:
            state.update(load_file(str(folder / file)))
        except Exception as e:  # safetensors' own error type, a missing file: both "this shard"
            raise CheckpointError(f"the shard cannot be read ({e})", folder / file) from e
    missing = sorted({n for names in files.values() for n in names} - set(state))
    if missing:
        raise CheckpointError(f"the shards lack {len(missing)} tensors the index names (e.g. {missing[0]})",
                              folder / INDEX_FILE)
    return state


def read_normalizer(folder: Path, cfg: Config) -> Optional[Normalizer]:
    """normalizer.json (None when the export has none), checked: min/max lists of finite numbers, as many as the
    config's action and state dims (CheckpointError naming the file)."""
    path = folder / NORMALIZER_FILE
    if not path.is_file():
        return None
    try:
        stats = json.loads(path.read_text())
        if not isinstance(stats, dict):
            raise ValueError(f"a JSON {type(stats).__name__}, not an object")
        norm = Normalizer(stats)
        norm.check_dims(cfg.data.action_dim, cfg.data.state_dim, NORMALIZER_FILE)
        for key in ("action", "state"):
            for end in ("min", "max"):
                if not all(math.isfinite(float(v)) for v in stats[key][end]):
                    raise ValueError(f"{key}.{end} holds NaN or inf")
    except (OSError, ValueError, TypeError) as e:  # DataError is a ValueError
        raise CheckpointError(f"the normalisation statistics cannot be used ({e}); expected the action/state "
                              "min/max the run was trained with", path) from e
    return norm
