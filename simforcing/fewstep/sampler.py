"""The sampler of a few-step student (``sample.sampler_for`` returns it for a run with ``fewstep.steps`` > 0).

    sampler = FewStepSampler(wm)          # wm: a LoadedWorldModel of a `simforcing distill` run
    res = sampler(batch, generator)       # res.forwards = N_s + K (K for a student of an unconditioned model)

The guided sampler (``sample.GuidedSampler``) at (N_s, K, w = 1): the student's own simulation rollout gives c, then
K Euler steps of its conditional branch alone (gate 1; no CFG pair: the teacher's w is baked into the weights), with
the noise of the teacher's sampler for the same generator (ε_r, then ε_s). A student of a model trained without a
condition (``sample.effective_w`` 0: sft) runs K unconditional steps and no simulation rollout. The step count and
the guidance are the student's: asking another N_r or w is refused by name (a sweep of them needs the teacher).
"""

from __future__ import annotations

from typing import Optional

from simforcing.config import ConfigError
from simforcing.fewstep.objective import FewStepPlan
from simforcing.runs import LoadedWorldModel
from simforcing.sample import ConditionSource, GuidedSampler


def is_student(wm: LoadedWorldModel) -> bool:
    """Whether a loaded world model is a few-step student (its run's config has ``fewstep.steps`` > 0)."""
    return bool(wm.cfg.fewstep.steps)


def check_student_settings(wm: LoadedWorldModel, n_sim: Optional[int], n_real: Optional[int],
                           w: Optional[float]) -> None:
    """ConfigError naming the setting when a caller asks a student for sampler settings other than its own."""
    f = wm.cfg.fewstep
    asked = {"N_s": (n_sim, f.teacher_n_sim), "N_r": (n_real, f.steps), "w": (w, f.w)}
    for name, (got, own) in asked.items():
        if got is not None and float(got) != float(own):
            raise ConfigError(f"{wm.name} is a few-step student ({f.steps} steps at the teacher's w = {f.w:g}, N_s = "
                              f"{f.teacher_n_sim}); asked {name} = {got:g}: a student samples only at its own "
                              f"settings — sweep the sampler on its teacher (RUN/teacher.json), or distil another "
                              "student (`simforcing distill --steps K`)")


class FewStepSampler(GuidedSampler):
    """The student's K-step sampler (module docstring); ``settings()`` records the teacher's sampler it stands for."""

    name = "fewstep"

    def __init__(self, wm: LoadedWorldModel, decode_sim: bool = False, condition: Optional[ConditionSource] = None):
        plan = FewStepPlan.of(wm.cfg)
        self.plan, self.objective = plan, wm.cfg.fewstep.objective
        super().__init__(wm.model, wm.vae, wm.cfg, plan.n_sim, plan.steps, 1.0 if plan.conditioned else 0.0,
                         masker=wm.masker, decode_sim=decode_sim, condition=condition)

    def settings(self) -> dict:
        out = super().settings()
        out.update({"sampler": self.name, "steps": self.plan.steps, "w": self.plan.w, "branch": (
            "conditional" if self.plan.conditioned else "unconditional"), "objective": self.objective,
            "teacher_sampler": {"n_sim": self.plan.n_sim, "n_real": self.plan.n_real, "w": self.plan.w}})
        out.pop("w_asked", None)
        return out


def student_sampler(wm: LoadedWorldModel, n_sim: Optional[int] = None, n_real: Optional[int] = None,
                    w: Optional[float] = None, decode_sim: bool = False,
                    condition: Optional[ConditionSource] = None) -> FewStepSampler:
    """``sample.sampler_for`` of a student: its own settings (others refused), the model's shared masker."""
    check_student_settings(wm, n_sim, n_real, w)
    sampler = FewStepSampler(wm, decode_sim, condition)
    wm.masker = wm.masker or sampler.masker
    return sampler
