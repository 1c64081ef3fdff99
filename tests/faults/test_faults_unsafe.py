"""Unsafe input: no file or config value the project reads can run code.

Malicious files carry a pickle payload whose unpickling runs ``touch MARKER`` through os.system (the test first
proves the payload is live); every reader must refuse them with a named error and the marker must never appear.
Config values that look like code or point at a Python module are never evaluated or imported. A source scan
checks the loaders of the whole package (torch.load only with weights_only=True, no pickle, no unsafe YAML, no
eval/exec/dynamic imports of user input).
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import pickle
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from faultkit import ckpt, copy_run, pretrain_args, steps

from simforcing.cli import main
from simforcing.runs.checkpoint import CheckpointError, load_checkpoint
from simforcing.runs.folder import load_model_from_run

pytestmark = pytest.mark.faults

PACKAGE = Path(__file__).resolve().parents[2] / "simforcing"


class Payload:
    """Unpickling this runs a shell command that creates ``marker`` — what a malicious checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(self.marker)}",))


def torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def plant(folder: Path, name: str, data: bytes, drop: str | None = None) -> None:
    """Write ``folder/name`` and re-sign meta.json (the attacker controls the whole checkpoint folder)."""
    (folder / name).write_bytes(data)
    meta = json.loads((folder / "meta.json").read_text())
    if drop:
        (folder / drop).unlink()
        meta["files"].pop(drop)
    meta["files"][name] = hashlib.sha256(data).hexdigest()
    (folder / "meta.json").write_text(json.dumps(meta))


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "PWNED"


def test_the_payload_is_live(tmp_path):
    m = tmp_path / "live"
    pickle.loads(pickle.dumps(Payload(m)))
    assert m.exists()  # so an absent marker below means the payload was refused, not inert


# ----------------------------------------------------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------------------------------------------------


def test_pickle_in_train_state_is_refused_on_resume(ref, tiny, tmp_path, marker, capsys):
    run = copy_run(ref, tmp_path / "run")
    for s in (4, 6):
        state = torch.load(ckpt(run, s) / "train_state.pt", weights_only=True)
        plant(ckpt(run, s), "train_state.pt", torch_bytes({**state, "hook": Payload(marker)}))
    with pytest.raises(CheckpointError, match=r"train_state\.pt") as e:
        load_checkpoint(ckpt(run, 6))
    assert "weights" in str(e.value).lower()  # torch's weights-only unpickler said no
    with pytest.warns(UserWarning, match=r"train_state\.pt"):
        code = main(pretrain_args(run, tiny, resume=True))
    assert code == 1 and "every checkpoint is damaged" in capsys.readouterr().err
    assert not marker.exists()


def test_pickle_instead_of_safetensors_weights_is_refused(ref, tiny, tmp_path, marker, capsys):
    run = copy_run(ref, tmp_path / "run")
    for s in (4, 6):
        state = load_checkpoint(ckpt(run, s)).model_state
        plant(ckpt(run, s), "model.safetensors", torch_bytes({**state, "hook": Payload(marker)}))
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        load_checkpoint(ckpt(run, 6))
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="no valid checkpoint"):
        load_model_from_run(run)  # the sampler / evaluator path
    with pytest.warns(UserWarning, match=r"model\.safetensors"):  # stage 2 from a poisoned teacher
        code = main(["train", "--method", "sft", "--teacher", str(run), "--data", str(tiny[0]), "--out",
                     str(tmp_path / "stage2"), "--no-progress"])
    assert code == 1 and "no valid checkpoint" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt"])
def test_other_weight_formats_are_never_read(ref, tmp_path, marker, name):
    run = copy_run(ref, tmp_path / "run")
    state = load_checkpoint(ckpt(run, 6)).model_state
    plant(ckpt(run, 6), name, torch_bytes({**state, "hook": Payload(marker)}), drop="model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        load_checkpoint(ckpt(run, 6))
    with pytest.raises(CheckpointError):
        load_model_from_run(run, step=6)
    assert not marker.exists()


# ----------------------------------------------------------------------------------------------------------------------
# Dataset and model files
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def data_copy(tiny, tmp_path) -> Path:
    return Path(shutil.copytree(tiny[0], tmp_path / "ds"))


def test_pickled_npz_column_is_refused(data_copy, tiny, tmp_path, marker, capsys):
    lowdim = data_copy / "episodes/train_000/lowdim.npz"
    with np.load(lowdim) as z:
        states = z["states"]
    np.savez(lowdim, actions=np.array([Payload(marker)], dtype=object), states=states)
    assert main(["data", "check", str(data_copy)]) == 1
    err = capsys.readouterr().err
    assert "[unreadable_file]" in err and "lowdim.npz" in err and "train_000" in err and "pickle" in err, err
    assert main(pretrain_args(tmp_path / "run", (data_copy, tiny[1]))) == 1
    assert not marker.exists()


def test_pickled_text_embedding_is_refused(data_copy, marker, capsys):
    from datagen import INSTRUCTIONS, embedding_file

    embedding_file(data_copy, INSTRUCTIONS[0]).write_bytes(pickle.dumps(Payload(marker)))
    assert main(["data", "check", str(data_copy)]) == 1
    err = capsys.readouterr().err
    assert "[bad_text_embedding]" in err and ".safetensors" in err, err
    assert not marker.exists()


def test_pickled_vae_weights_are_refused(tiny, tmp_path, marker, capsys):
    vae = Path(shutil.copytree(tiny[1], tmp_path / "vae"))
    (vae / "vae.safetensors").write_bytes(torch_bytes({"basis": torch.zeros(192, 16), "hook": Payload(marker)}))
    run = tmp_path / "run"
    assert main(pretrain_args(run, tiny, f"--model.vae.path={vae}")) == 2
    err = capsys.readouterr().err
    assert "model.vae.path" in err and "vae.safetensors" in err, err
    assert steps(run) == [] and not marker.exists()


# ----------------------------------------------------------------------------------------------------------------------
# Config values are data, never code
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def evil_module(tmp_path, monkeypatch, marker) -> Path:
    """tmp/evilmod.py, importable as ``evilmod``; importing it creates the marker."""
    path = tmp_path / "mods" / "evilmod.py"
    path.parent.mkdir()
    path.write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    monkeypatch.syspath_prepend(str(path.parent))
    sys.modules.pop("evilmod", None)
    return path


CODE = "__import__('evilmod')"


def test_config_values_are_never_imported_or_evaluated(tiny, ref, tmp_path, evil_module, marker, capsys):
    py = str(evil_module)
    attempts = [
        pretrain_args(tmp_path / "r1", tiny, f"--model.weights={py}"),
        pretrain_args(tmp_path / "r2", tiny, "--model.weights=evilmod"),
        pretrain_args(tmp_path / "r3", tiny, f"--model.action_expert_weights={py}"),
        pretrain_args(tmp_path / "r4", tiny, f"--model.vae.path={py}"),
        pretrain_args(tmp_path / "r5", tiny, f"--data.latent_cache={evil_module.parent}"),
        pretrain_args(tmp_path / "r6", tiny, f"--data.sim_background={CODE}"),
        pretrain_args(tmp_path / "r7", tiny, f"--model.vae.kind={CODE}"),
        ["pretrain", "--preset", CODE, "--data", str(tiny[0]), "--out", str(tmp_path / "r8")],
        ["pretrain", "--config", py, "--data", str(tiny[0]), "--out", str(tmp_path / "r9")],
        ["train", "--method", "sft", "--teacher", str(ref), "--out", str(tmp_path / "r10"), f"--train.method={CODE}"],
        ["data", "check", str(tiny[0]), f"--data.text_cache={evil_module.parent}"],
    ]
    for words in attempts:
        try:
            code = main(words)
        except Exception as e:  # noqa: BLE001 - a raised error is a refusal too; what matters is the marker
            code = f"{type(e).__name__}: {e}"
        assert code != 0, f"{words} succeeded with a code-like value"
        assert not marker.exists(), f"{words} ran the module"
    capsys.readouterr()
    assert "evilmod" not in sys.modules


# ----------------------------------------------------------------------------------------------------------------------
# Source scan of every loader in the package
# ----------------------------------------------------------------------------------------------------------------------


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else (f"{ast.unparse(f.value)}.{f.attr}"
                                                         if isinstance(f, ast.Attribute) else "")
            yield name, node


def _kw(node: ast.Call, name: str):
    for k in node.keywords:
        if k.arg == name:
            return ast.unparse(k.value)
    return None


def scan(files: list[Path], base: Path = PACKAGE.parent) -> list[str]:
    """Every unsafe load or dynamic evaluation in ``files``, as 'file:line: what' (paths relative to ``base``)."""
    problems = []
    own = {n.name for path in files for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)}
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(base)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for m in mods:
                    if m.split(".")[0] in ("pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "joblib",
                                           "runpy"):
                        problems.append(f"{rel}:{node.lineno}: imports {m}")
        for name, node in _calls(tree):
            where = f"{rel}:{node.lineno}: {ast.unparse(node)[:80]}"
            short = name.rsplit(".", 1)[-1]
            if name in ("eval", "exec", "compile", "__import__") or short in ("unsafe_load", "full_load",
                                                                              "spec_from_file_location",
                                                                              "exec_module", "run_path"):
                problems.append(f"{where} (dynamic code)")
            elif name == "torch.load" and _kw(node, "weights_only") != "True":
                problems.append(f"{where} (torch.load without weights_only=True)")
            elif name in ("np.load", "numpy.load") and _kw(node, "allow_pickle") not in (None, "False"):
                problems.append(f"{where} (np.load with pickles)")
            elif name in ("yaml.load", "yaml.load_all") and "Safe" not in str(_kw(node, "Loader")) and not (
                    len(node.args) > 1 and "Safe" in ast.unparse(node.args[1])):
                problems.append(f"{where} (yaml.load without SafeLoader)")
            elif short == "import_module" and rel.as_posix() != "simforcing/cli.py":
                problems.append(f"{where} (dynamic import)")
            elif _kw(node, "trust_remote_code") not in (None, "False"):
                problems.append(f"{where} (trust_remote_code)")
            elif (short == "from_pretrained" and name.split(".")[0] not in own  # ours pass it on themselves
                  and _kw(node, "local_files_only") != "True"):
                problems.append(f"{where} (from_pretrained may download)")
    return problems


def test_the_scan_finds_unsafe_loaders(tmp_path):
    bad = tmp_path / "simforcing" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("import pickle, yaml, torch, numpy as np\nyaml.load(open('c'))\ntorch.load('x')\n"
                   "torch.load('x', weights_only=False)\nnp.load('a', allow_pickle=True)\neval('1')\n"
                   "yaml.load(open('c'), Loader=yaml.SafeLoader)\ntorch.load('x', weights_only=True)\n")
    found = scan([bad], base=tmp_path)
    assert len(found) == 6, found  # pickle import, yaml.load, 2 torch.load, np.load, eval; the safe ones pass


def test_no_module_loads_pickles_unsafe_yaml_or_evaluates_input():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20
    assert scan(files) == []


def test_cli_imports_only_registered_modules():
    from simforcing.cli import COMMANDS

    tree = ast.parse((PACKAGE / "cli.py").read_text())
    calls = [node for name, node in _calls(tree) if name.endswith("import_module")]
    assert [ast.unparse(c.args[0]) for c in calls] == ["module_name"]  # from the COMMANDS table only
    assert all(m.startswith("simforcing.") for _, m, _ in COMMANDS)
    assert main(["evilmod"]) == 2 and "evilmod" not in sys.modules
