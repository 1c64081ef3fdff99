"""A training run's folder (``--out``): the checks before any work (read-only: a refused run writes nothing), its
claim (the lock, the checks again under it, the run record) and the files that say how the run started.

    folder = RunFolder(path, stage, resume)
    folder.check(cfg)                         # read-only, before any work
    log = folder.claim(cfg, dist)             # rank 0 locks, checks again, records the run; every rank learns it
    folder.write_started(cfg, start)          # config.json (and stage 2's teacher.json), once the run has started
    folder.write_init(report)                 # init.json: what a fresh start took from another run
    folder.release()
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import simforcing.parallel as parallel
from simforcing.config import Config, ConfigError
from simforcing.runs.checkpoint import list_checkpoints, remove_stale_temp
from simforcing.runs.folder import (CONFIG_FILE, INIT_FILE, RUN_RECORD, STAGE_KIND, TEACHER_FILE, check_not_foreign,
                                    check_same_vae,
                                    is_run_folder, new_run_record, newest_readable, read_run_record, require_kind,
                                    trained_config)
from simforcing.runs.loaded import check_same_pairing, data_pairing, trained_pairing
from simforcing.runs.locking import FolderLock, lock_folder
from simforcing.training.checks import check_resume_config
from simforcing.training.runlog import RunLog
from simforcing.training.stage import Stage, Start
from simforcing.utils import atomic_write_json, atomic_write_text
from simforcing.warmstart import InitReport


class RunFolder:
    """The ``--out`` folder of one run of ``stage``; ``resume``: the run continues the checkpoints it holds."""

    def __init__(self, path: Path, stage: Stage, resume: bool):
        self.path, self.stage, self.resume = Path(path), stage, resume
        self.has_checkpoints = False  # what the last check found
        self.lock: Optional[FolderLock] = None
        self.run_id: Optional[str] = None  # run.json's, once claimed

    @property
    def label(self) -> str:
        """"simforcing pretrain" and the like: the lock's holder and the prefix of the run's messages."""
        return f"simforcing {self.stage.name}"

    def check(self, cfg: Config) -> None:
        """What the folder holds decides whether the run may start: someone else's files (never overwritten),
        checkpoints without --resume (refused), or on --resume the run it continues (same kind, same architecture as
        the config its newest checkpoint was trained with). Read-only; run again under the lock."""
        self.has_checkpoints = bool(list_checkpoints(self.path))
        check_not_foreign(self.path)
        if self.has_checkpoints and not self.resume:
            raise ConfigError(f"--out: {self.path} already holds checkpoints; pass --resume to continue it or "
                              "choose another folder")
        if self.resume and is_run_folder(self.path):
            require_kind(self.path, (STAGE_KIND[self.stage.name],), "--out", f"resume_{self.stage.name}")
        if self.resume and self.has_checkpoints:
            self._check_resume_compatible(cfg)

    def _check_resume_compatible(self, cfg: Config) -> None:
        """The newest checkpoint whose metadata reads is the reference (``runs.folder.trained_config``)."""
        ref = newest_readable(self.path)
        if ref is None:
            return  # every checkpoint is damaged: resume.find_checkpoint fails with the named error
        theirs, differs = trained_config(self.path, ref)
        if differs:
            warnings.warn(f"{self.path / CONFIG_FILE} differs from the config {ref.path.name} was trained with "
                          f"in {', '.join(differs[:8])}; the resume is checked against the checkpoint's own config",
                          stacklevel=4)
        check_resume_config(cfg, theirs, self.stage, self.path)
        check_same_vae(cfg, self.path, ref, "a resumed run goes on in the latents it was trained in — resume with "
                       "--model.vae.path set to that VAE (or a copy of it), or train a new run with this one")
        check_same_pairing(self.path, trained_pairing(theirs, ref.meta),
                           data_pairing(cfg, None if cfg.data.latent_cache else cfg.data.root), cfg.data.root,
                           "a resumed run goes on in the simulation domain it was trained in")

    def claim(self, cfg: Config, dist: parallel.DistInfo) -> RunLog:
        """Take the folder's lock (rank 0; the other ranks learn the outcome), check the folder again now that no
        other writer can change it, record the run and remove a crashed writer's temporary checkpoint folders.
        Returns the run's log (rank 0 writes; the others hold a silent one)."""
        error = None
        if dist.is_main:
            try:
                self.lock = lock_folder(self.path, self.label)
                self.check(cfg)
                self.run_id = self._record_run()
                remove_stale_temp(self.path)
            except Exception as e:  # noqa: BLE001 - every rank must learn rank 0's outcome, whatever it is
                error = e
        error = parallel.broadcast_object(error)
        self.run_id = parallel.broadcast_object(self.run_id)
        if error is not None:
            raise error
        return RunLog(self.path, dist.is_main)

    def _record_run(self) -> str:
        """RUN/run.json: a new record, or on --resume the run's own (its kind added when it predates kinds)."""
        record = read_run_record(self.path) if self.resume else None
        if record is None or "kind" not in record:
            record = {**new_run_record(self.stage.name), **(record or {})}
            atomic_write_json(self.path / RUN_RECORD, record)
        return record["run_id"]

    def write_started(self, cfg: Config, start: Start) -> None:
        """The run has started: config.json, and for a run taught by a teacher teacher.json (run, checkpoint, step)."""
        cfg.save(self.path / CONFIG_FILE)
        if start.teacher is not None:
            atomic_write_json(self.path / TEACHER_FILE, {"run": str(start.teacher_run.resolve()),
                                                         "checkpoint": str(start.teacher.path),
                                                         "step": start.teacher.step})

    def write_init(self, report: InitReport) -> None:
        """RUN/init.json: what a fresh start took (``warmstart.InitReport``)."""
        atomic_write_text(self.path / INIT_FILE, report.to_json() + "\n")

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
