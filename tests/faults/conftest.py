"""Fixtures of the fault-injection suite (helpers and the tiny config: faultkit.py).

Session-scoped and never modified by a test (copy them first):
- ``tiny``: (dataset root, a fixed demo VAE folder with the preset's latent channels) — 2 train, 1 val, 2 sim-only
  episodes of 13 frames (8 windows, 4 steps per epoch, so 6 steps cross an epoch);
- ``ref``: an uninterrupted 6-step ``pretrain`` run of the tiny config; its metrics.jsonl and checkpoints (steps 4
  and 6) are what every interrupted-and-resumed run must reproduce exactly;
- ``stage2``: a 1-step ``train --method sft`` run from ``ref``;
- ``policy_data``: a tiny policy dataset (3 train episodes of 12 frames, two cameras side by side);
- ``policy_run``: a finished 2-step ``policy train --setting action_only --init base`` run on it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
for p in (HERE, HERE.parent):  # faultkit.py and tests/datagen.py, also when this folder runs alone
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from datagen import make_dataset, make_policy_dataset  # noqa: E402
from faultkit import EPISODE_LENGTH, POLICY_LENGTH, losses, policy_args, pretrain_args, steps  # noqa: E402


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    from simforcing.config import load_config
    from simforcing.models.vae import DEMO_MEAN_CHANNELS, DEMO_RESIDUAL_DIM, DemoVAE

    base = tmp_path_factory.mktemp("faults_tiny")
    root = make_dataset(base / "data", num_train=2, num_val=1, num_pool=2, length=EPISODE_LENGTH)
    vae = base / "vae"
    c = load_config("demo").model.vae.latent_channels  # a fixed (unfitted) demo VAE with the preset's channels
    basis = torch.eye(DEMO_RESIDUAL_DIM)[:, : c - DEMO_MEAN_CHANNELS]  # (192, K) orthonormal columns
    DemoVAE(basis, torch.zeros(c), torch.ones(c)).save(vae)
    return root, vae


@pytest.fixture(scope="session")
def ref(tiny, tmp_path_factory) -> Path:
    """The uninterrupted reference run (6 steps, checkpoints 4 and 6 kept)."""
    from simforcing.cli import main

    run = tmp_path_factory.mktemp("faults_ref") / "ref"
    assert main(pretrain_args(run, tiny)) == 0
    assert [s for s, _ in losses(run)] == [1, 2, 3, 4, 5, 6] and steps(run) == [4, 6]
    return run


@pytest.fixture(scope="session")
def stage2(tiny, ref, tmp_path_factory) -> Path:
    from simforcing.cli import main

    run = tmp_path_factory.mktemp("faults_stage2") / "stage2"
    assert main(["train", "--method", "sft", "--teacher", str(ref), "--data", str(tiny[0]), "--out", str(run),
                 "--no-progress", "--train.max_steps=1"]) == 0
    return run


@pytest.fixture(scope="session")
def policy_data(tmp_path_factory) -> Path:
    return make_policy_dataset(tmp_path_factory.mktemp("faults_policy") / "data", length=POLICY_LENGTH)


@pytest.fixture(scope="session")
def policy_run(tiny, policy_data, tmp_path_factory) -> Path:
    from simforcing.cli import main

    run = tmp_path_factory.mktemp("faults_policy_run") / "policy"
    assert main(policy_args(run, policy_data, tiny[1])) == 0
    return run
