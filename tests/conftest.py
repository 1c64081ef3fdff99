"""Shared test set-up: one torch thread per test process (tiny CPU models run faster and deterministically),
offscreen MuJoCo rendering."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
# one thread in this process and every command a test starts (train.threads=auto then has nothing to adapt)
os.environ["OMP_NUM_THREADS"] = "1"

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    torch.set_num_threads(1)
    yield
