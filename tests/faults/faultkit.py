"""Helpers of the fault-injection suite (``pytest -m faults``); the fixtures live in conftest.py.

Every test attacks the real commands (``simforcing ...`` as a subprocess where a signal must hit another process,
``simforcing.cli.main([...])`` in-process otherwise) on the demo preset at a tiny size: one layer of width 32,
5-frame windows of 32×48 frames, batch 2, 6 steps, a checkpoint every 2 steps, the last 2 kept.

The reference run (fixture ``ref`` in conftest.py) is what every interrupted-and-resumed run must reproduce
exactly: the same losses in metrics.jsonl and bit-identical final weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch

TINY = ["--model.num_layers=1", "--model.num_attention_heads=2", "--model.attention_head_dim=16",
        "--model.ffn_dim=64", "--model.freq_dim=32", "--model.action_hidden=32", "--model.action_ffn_dim=64",
        "--data.frames=5", "--data.windows_per_episode=2", "--train.batch_size=2", "--train.log_every=1",
        "--train.ckpt_every=2", "--train.keep_last=2", "--train.max_steps=6"]
EPISODE_LENGTH = 13
FAULT_ENV = "SIMFORCING_FAULT"


def record_module():
    """docs/demo_timing/record.py, the demo timing recorder (a script, not a package module), loaded by its path."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "docs" / "demo_timing" / "record.py"
    spec = importlib.util.spec_from_file_location("demo_timing_record", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def refused(words: list, capsys, *needles: str, code: int = 2) -> str:
    """``simforcing WORDS`` in-process exits ``code`` with one named error holding ``needles`` (no traceback);
    its stderr."""
    from simforcing.cli import main

    rc = main([str(w) for w in words])
    err = capsys.readouterr().err
    assert rc == code and "Traceback" not in err, f"{words}: exit {rc}\n{err}"
    assert all(n in err for n in needles), f"{words}:\n{err}"
    return err


def pretrain_args(run: Path, tiny: tuple[Path, Path], *extra: str, resume: bool = False) -> list[str]:
    """Command-line words of ``simforcing pretrain`` on the tiny config (without the leading ``simforcing``)."""
    root, vae = tiny
    return (["pretrain", "--out", str(run), "--data", str(root), "--no-progress", *TINY, f"--model.vae.path={vae}"]
            + (["--resume"] if resume else []) + list(extra))


POLICY_TINY = [o for o in TINY if not o.startswith("--train.max_steps")] + ["--train.max_steps=2",
                                                                          "--train.ckpt_every=1"]
POLICY_LENGTH = 12  # frames of the tiny policy dataset's episodes (5-frame windows: 5 steps)


def policy_args(run: Path, data: Path, vae: Path, *extra: str, setting: str = "action_only", init: str = "base",
                resume: bool = False) -> list[str]:
    """Command-line words of ``simforcing policy train`` on the tiny config (2 steps, a checkpoint each)."""
    return (["policy", "train", "--setting", setting, "--init", str(init), "--data", str(data), "--out", str(run),
             "--no-progress", *POLICY_TINY, f"--model.vae.path={vae}"] + (["--resume"] if resume else [])
            + list(extra))


def quiet_eval_args(out: Path, *runs: str) -> list[str]:
    """``simforcing policy eval`` of ``runs`` on the smallest closed loop (1 scene per task, 2 steps, no baselines)."""
    return ["policy", "eval", "--runs", *runs, "--out", str(out), "--per-task", "1", "--max-steps", "2",
            "--no-baselines"]


def losses(run: Path) -> list[tuple[int, float]]:
    """(step, loss) of every row of RUN/metrics.jsonl, in file order."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [(r["step"], r["loss"]) for r in rows]


def status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def steps(run: Path) -> list[int]:
    """Steps of the finished checkpoint folders (``step_N``), oldest first."""
    from simforcing.runs.checkpoint import list_checkpoints

    return [s for s, _ in list_checkpoints(run)]


def ckpt(run: Path, step: int) -> Path:
    return run / "checkpoints" / f"step_{step:06d}"


def tmp_dirs(run: Path) -> list[str]:
    """Names of leftover temporary folders in RUN/checkpoints."""
    d = run / "checkpoints"
    return sorted(p.name for p in d.glob(".tmp-*")) if d.is_dir() else []


def digest(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``folder`` (to prove a checkpoint was left byte-identical)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def copy_run(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst))


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    """Poll ``predicate`` every 50 ms; fail naming ``what`` (and the process output if it died) on timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if predicate():
                return
        except (OSError, ValueError, KeyError):  # a file being written
            pass
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"the process exited ({proc.returncode}) before {what}:\n{out}")
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def checkpointed(run: Path, step: int) -> Callable[[], bool]:
    """True once checkpoint ``step`` is finished and the loop has recorded it (so the next step has begun)."""
    return lambda: status(run).get("reason") == f"checkpoint step_{step:06d}"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all threads) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_holding(proc: subprocess.Popen, timeout: float, window: float = 0.5) -> None:
    """Wait until ``proc`` uses (almost) no CPU for ``window`` seconds: it sits in a fault hook's hold (sleep@N or
    ckpt_sleep@N), i.e. in the middle of the step or of the checkpoint write. Without /proc: sleep ``2·window``."""
    if not Path(f"/proc/{proc.pid}/stat").exists():
        time.sleep(2 * window)
        return
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        before = cpu_seconds(proc.pid)
        time.sleep(window)
        if proc.poll() is None and cpu_seconds(proc.pid) - before <= 0.05 * window:
            return
    raise AssertionError(f"the process did not settle in the fault hook's hold within {timeout:.0f} s")


def spawn(args: list[str], fault: str, cwd: Path) -> subprocess.Popen:
    """Start the real ``simforcing`` console script with SIMFORCING_FAULT set; stdout and stderr merged.

    The child gets this process's torch thread count: CPU results are bit-exact only for equal thread counts (the
    summation order of a matmul depends on it), and runs of both processes are compared bit for bit."""
    exe = Path(sys.executable).with_name("simforcing")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "simforcing"]
    threads = str(torch.get_num_threads())
    env = dict(os.environ, **{FAULT_ENV: fault, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})
    return subprocess.Popen(cmd + args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=60)




def disk_full(monkeypatch, name: str, after: int = 0) -> list[str]:
    """Writes of a file called ``name`` fail with ENOSPC, as on a full disk, once ``after`` of them have succeeded.

    Covers every way the package writes: an atomic write fails at its rename (``os.replace``), a direct or appending
    write at ``open``; ``name == "tb"`` makes TensorBoard's record writer fail instead. Returns the paths refused."""
    import builtins
    import errno
    import io

    failed: list[str] = []
    seen = {"n": 0}

    def full(path) -> bool:
        seen["n"] += 1
        if seen["n"] > after:
            failed.append(str(path))
            return True
        return False

    def enospc(path) -> OSError:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    if name == "tb":
        from tensorboard.summary.writer.record_writer import RecordWriter

        original_write = RecordWriter.write

        def write(self, data):
            if full("tb"):
                raise enospc("tb/events.out.tfevents")
            return original_write(self, data)

        monkeypatch.setattr(RecordWriter, "write", write)
        return failed

    real_replace, real_open = os.replace, builtins.open

    def replace(src, dst, *a, **k):
        if Path(dst).name == name and full(dst):
            raise enospc(dst)
        return real_replace(src, dst, *a, **k)

    def open_(file, mode="r", *a, **k):
        if isinstance(file, (str, Path)) and Path(file).name == name and any(c in mode for c in "wax+") \
                and full(file):
            raise enospc(file)
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)
    return failed
