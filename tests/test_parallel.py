"""Multi-process training: the global-batch split across ranks, and a 2-process FSDP2 run (gloo, CPU, torchrun)
that matches a 1-process run with the same global batch, stops on a signal sent to one rank, and resumes from its
sharded (DCP) checkpoint.

The comparison uses a deterministic flow-matching step (`det_step`) whose noise and time come from each sample's
own content: the real step functions draw per-rank noise from a generator seeded by (seed, step, rank), so a
2-process run is statistically, not bitwise, equal to a 1-process one. The real methods (stage 1 and stage 2 with its
sharded frozen teacher) also run under FSDP2 in the same launch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from simforcing import flow
from simforcing.parallel import GlobalBatchSampler

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def det_step(student, teacher, batch, cfg, gen):
    """Flow matching on z_sim with per-sample ε, τ seeded by the sample's actions (independent of the rank split)."""
    z = batch["z_sim"]
    z0, fut = z[:, :, :1], z[:, :, 1:]
    eps, tau = [], []
    for i in range(z.shape[0]):
        g = torch.Generator().manual_seed(int(batch["actions"][i].abs().sum().item() * 1e4) % (2**31))
        eps.append(torch.randn(fut.shape[1:], generator=g))
        tau.append(0.05 + 0.9 * torch.rand((), generator=g))
    eps, tau = torch.stack(eps).to(z.device), torch.stack(tau).to(z.device)  # (B, C, L, h, w), (B,)
    u = student(flow.add_noise(fut, eps, tau), tau, z0, batch["actions"], batch["state0"], batch["text"],
                text_mask=batch["text_mask"])
    loss = (u - flow.velocity_target(fut, eps)).pow(2).mean()
    return loss, {"loss": float(loss.detach()), "fm_sim": float(loss.detach())}


# ----------------------------------------------------------------------------------------------------------------------
# The split of windows across ranks
# ----------------------------------------------------------------------------------------------------------------------


def test_rank_slices_compose_the_single_process_batches():
    n, b, world = 10, 2, 2
    single = list(GlobalBatchSampler(n, b * world, order_seed=5))
    ranks = [list(GlobalBatchSampler(n, b, order_seed=5, rank=r, world_size=world)) for r in range(world)]
    assert len(single) == 3 == len(ranks[0]) == len(ranks[1])  # ceil(10 / 4)
    for k, batch in enumerate(single):
        assert ranks[0][k] + ranks[1][k] == batch
    flat = [i for batch in single for i in batch]
    assert sorted(set(flat)) == list(range(n)) and len(flat) == 12  # last batch wraps around to the start
    assert flat[10:] == flat[:2]
    assert list(GlobalBatchSampler(n, 4, order_seed=5, start=2)) == single[2:]  # resume skips done batches
    assert list(GlobalBatchSampler(n, 4, order_seed=6)) != single  # another epoch, another order


def test_small_dataset_repeats_to_fill_a_batch():
    batches = list(GlobalBatchSampler(3, 4, order_seed=0))
    assert len(batches) == 1 and sorted(batches[0][:3]) == [0, 1, 2] and batches[0][3] == batches[0][0]


# ----------------------------------------------------------------------------------------------------------------------
# 2 processes (torchrun, gloo, FSDP2) against 1
# ----------------------------------------------------------------------------------------------------------------------

WORKER = """
import os, signal, sys
sys.path.insert(0, {tests!r})
import test_parallel
from simforcing import methods
from simforcing.cli import main
from simforcing.training.step import TrainStep

args, real_out, stage2_out = sys.argv[1:-2], sys.argv[-2], sys.argv[-1]
real_step = methods.METHODS["sim_pretrain"]
methods.METHODS["sim_pretrain"] = test_parallel.det_step
original = TrainStep.__call__

def stop_on_rank0_after_step2(self, batch, step):
    out = original(self, batch, step)
    if step == 2 and os.environ["RANK"] == "0":
        signal.raise_signal(signal.SIGTERM)  # only rank 0 is signalled: every rank must stop at the same step
    return out

TrainStep.__call__ = stop_on_rank0_after_step2
first = main(["pretrain", *args])
TrainStep.__call__ = original
second = main(["pretrain", "--resume", *args])
methods.METHODS["sim_pretrain"] = real_step
out_i = args.index("--out")
real_args = args[:out_i] + ["--out", real_out] + args[out_i + 2:] + ["--train.max_steps=1"]
third = main(["pretrain", *real_args])
fourth = main(["train", "--method", "simforcing", "--teacher", real_out, "--out", stage2_out, "--no-progress",
               "--train.max_steps=1"])
print("EXIT", first, second, third, fourth, flush=True)
sys.exit(0 if (first, second, third, fourth) == (75, 0, 0, 0) else 1)
"""


@pytest.mark.slow
def test_two_process_fsdp2_matches_one_process_and_resumes_from_dcp(tmp_path, monkeypatch):
    from test_train import TINY, make_tiny_data, tiny_cfg

    from simforcing import methods
    from simforcing.runs.checkpoint import list_checkpoints, load_checkpoint
    from simforcing.runs.folder import load_model_from_run
    from simforcing.train import train_run

    root, vae = make_tiny_data(tmp_path)
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER.format(tests=str(TESTS)))
    run2, real2, stage2 = tmp_path / "fsdp", tmp_path / "fsdp_real", tmp_path / "fsdp_stage2"
    args = ["--out", str(run2), "--no-progress", *TINY, f"--data.root={root}", f"--model.vae.path={vae}",
            "--train.max_steps=3", "--train.batch_size=2", "--train.ckpt_every=10",
            "--model.gradient_checkpointing=true"]  # the FSDP path wraps each layer with activation checkpointing
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.pop("SIMFORCING_FAULT", None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(worker), *args, str(real2), str(stage2)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    # the 1-process reference: global batch 4 in one process, same deterministic step
    monkeypatch.setitem(methods.METHODS, "sim_pretrain", det_step)
    ref = tmp_path / "ref"
    result = train_run(tiny_cfg(root, vae, "--train.max_steps=3", "--train.batch_size=4", "--train.ckpt_every=10"),
                       ref, "pretrain", progress=False)
    assert result["state"] == "finished"

    def rows(run):
        return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]

    two, one = rows(run2), rows(ref)
    assert [r["step"] for r in two] == [1, 2, 3]  # steps 1-2 before the stop, 3 after the resume
    for a, b in zip(two, one):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5, rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], abs=1e-5, rel=1e-4)
        assert a["lr"] == pytest.approx(b["lr"])
    assert [s for s, _ in list_checkpoints(run2)] == [2, 3]
    meta = load_checkpoint(run2 / "checkpoints/step_000003", weights=False, train_state=False).meta
    assert meta["sharded"] and meta["world_size"] == 2 and any(f.startswith("dcp/") for f in meta["files"])
    _, model2, _ = load_model_from_run(run2)  # DCP shards read back in one process
    _, model1, _ = load_model_from_run(ref)
    w1 = model1.state_dict()
    for k, v in model2.state_dict().items():
        torch.testing.assert_close(v, w1[k], atol=1e-5, rtol=1e-4, msg=k)
    # the real step functions under FSDP2: stage 1, then stage 2 with a sharded frozen teacher
    for run in (real2, stage2):
        st = json.loads((run / "status.json").read_text())
        assert st["state"] == "finished" and st["step"] == 1
    assert "md_real" in rows(stage2)[0]


RESUME_WORKER = """
import os, signal, sys
sys.path.insert(0, {tests!r})
import test_parallel
from simforcing import methods
from simforcing.cli import main
from simforcing.training.step import TrainStep

methods.METHODS["sim_pretrain"] = test_parallel.det_step
mode, args = sys.argv[1], sys.argv[2:]
if mode == "stop2":  # SIGTERM after step 2 (rank 0 only): a checkpoint at step 2, exit code 75
    original = TrainStep.__call__

    def stop(self, batch, step):
        out = original(self, batch, step)
        if step == 2 and os.environ.get("RANK", "0") == "0":
            signal.raise_signal(signal.SIGTERM)
        return out

    TrainStep.__call__ = stop
    sys.exit(0 if main(["pretrain", *args]) == 75 else 1)
sys.exit(main(["pretrain", "--resume", *args]))
"""


@pytest.mark.slow
def test_resume_across_world_sizes(tmp_path, monkeypatch):
    """A checkpoint of 1 process resumes in 2 (broadcast into the shards) and one of 2 processes in 1 (DCP read
    without a process group): steps 3-4 after the resume equal those of a 1-process run with the same global batch
    (step 4 also checks the restored optimizer state: it depends on the AdamW update of step 3). The 1-process runs
    are this process's (`simforcing pretrain` as the 1-process worker runs it: the same step, the same stop after step
    2); only the 2-process ones are torchrun launches."""
    from test_train import TINY, _raise_sigterm_at, make_tiny_data

    from simforcing import methods
    from simforcing.cli import main

    root, vae = make_tiny_data(tmp_path)
    worker = tmp_path / "resume_worker.py"
    worker.write_text(RESUME_WORKER.format(tests=str(TESTS)))
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.pop("SIMFORCING_FAULT", None)
    monkeypatch.delenv("SIMFORCING_FAULT", raising=False)

    def launch(nproc: int, mode: str, out: Path) -> None:
        args = [mode, "--out", str(out), "--no-progress", *TINY, f"--data.root={root}", f"--model.vae.path={vae}",
                "--train.max_steps=4", "--train.ckpt_every=10", f"--train.batch_size={4 // nproc}"]  # global 4
        if nproc == 1:  # in this process: what RESUME_WORKER does in one
            with monkeypatch.context() as m:
                m.setitem(methods.METHODS, "sim_pretrain", det_step)
                if mode == "stop2":
                    _raise_sigterm_at(m, 2)  # SIGTERM after step 2: a checkpoint at step 2, exit code 75
                    assert main(["pretrain", *args[1:]]) == 75
                elif out.name == "two_to_one":  # the per-rank batch of the checkpoint's config was 2
                    with pytest.warns(UserWarning, match="changed config fields: train.batch_size"):
                        assert main(["pretrain", "--resume", *args[1:]]) == 0
                else:
                    assert main(["pretrain", "--resume", *args[1:]]) == 0
            return
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(worker)]
        proc = subprocess.run(cmd + args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    def rows(run: Path) -> list[dict]:
        return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]

    runs = {"ref": (1, 1), "one_to_two": (1, 2), "two_to_one": (2, 1)}
    for name, (before, after) in runs.items():
        launch(before, "stop2", tmp_path / name)
        launch(after, "resume", tmp_path / name)
    ref = rows(tmp_path / "ref")
    assert [r["step"] for r in ref] == [1, 2, 3, 4]
    for name in ("one_to_two", "two_to_one"):
        got = rows(tmp_path / name)
        assert [r["step"] for r in got] == [1, 2, 3, 4], name
        for a, b in zip(got, ref):
            assert a["loss"] == pytest.approx(b["loss"], abs=1e-5, rel=1e-5), (name, a["step"])
            assert a["grad_norm"] == pytest.approx(b["grad_norm"], abs=1e-5, rel=1e-4), (name, a["step"])
        st = json.loads((tmp_path / name / "status.json").read_text())
        assert st["state"] == "finished" and st["step"] == 4
