"""What an evaluation records about the run it scored (:class:`ScoredRun`) — a light module, so that reading results
does not load the model stack."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from simforcing.runs.locking import is_locked


@dataclass(frozen=True)
class ScoredRun:
    """What an evaluation records about the run it scored: the folder, checkpoint and step, the run's state
    (status.json; a run whose status says "running" while nobody holds its lock was killed: "interrupted") and
    whether it was finished; ``path``: the checkpoint as the evaluation opened it (one-window evaluations, which
    ``export`` checks). A baseline in a run's place (copy-first) records its name, no checkpoint and no state."""

    run: Optional[str]
    checkpoint: Optional[str]
    step: Optional[int]
    finished: bool
    run_state: Optional[str] = None
    total_steps: Optional[int] = None
    path: Optional[str] = None

    @classmethod
    def of(cls, run_dir: str | Path, checkpoint: str | Path, step: int) -> "ScoredRun":
        """The record of checkpoint ``checkpoint`` (at ``step``) of the run in ``run_dir``, its state read now."""
        from simforcing.runs.folder import read_status  # not at the top: that module loads the model stack

        st = read_status(run_dir)
        state = st.get("state") if isinstance(st.get("state"), str) else "unknown"  # status.json is data too
        if state == "running" and not is_locked(run_dir):
            state = "interrupted"
        total = st.get("total_steps")
        total = total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None
        return cls(str(Path(run_dir).resolve()), str(checkpoint), int(step), state == "finished", state, total)

    def to_json(self) -> dict:
        out = {"run": self.run, "checkpoint": self.checkpoint, "step": self.step}
        if self.run_state is not None:
            out.update(run_state=self.run_state, total_steps=self.total_steps)
        out["finished"] = self.finished
        return out if self.path is None else {**out, "path": self.path}

    @classmethod
    def from_json(cls, d: dict) -> "ScoredRun":
        """From ``to_json``'s dict; what an older record lacks reads as unknown (None) and unfinished (nothing said it
        finished). A field of the wrong type (a list for the checkpoint, "true" for finished) is a
        ``result_files.MalformedResult`` naming it."""
        from simforcing.result_files import typed

        opt = {"default": None}
        return cls(typed(d, "run", "str", "null", **opt), typed(d, "checkpoint", "str", "null", **opt),
                   typed(d, "step", "int", "null", **opt), typed(d, "finished", "bool", default=False),
                   typed(d, "run_state", "str", "null", **opt), typed(d, "total_steps", "int", "null", **opt),
                   typed(d, "path", "str", "null", **opt))

    def unfinished_note(self, name: str) -> Optional[str]:
        """One line saying that ``name`` scored an unfinished run (None for a finished one)."""
        if self.finished:
            return None
        total = f" of {self.total_steps}" if self.total_steps else ""
        return (f"{name}: the run was not finished ({self.run_state}) — scored its checkpoint at step "
                f"{self.step}{total} ({self.checkpoint})")
