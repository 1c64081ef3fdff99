"""Named recipes: the paper's method trained for a purpose, as data to record and settings to train with.

    simforcing data synth --out DIR --layout-train 100 --recipe evaluator     # the synthetic benchmark's operators
    simforcing train --method simforcing --recipe evaluator --teacher RUN1 --data DIR --out RUN

``evaluator`` — a world model to judge policies in (docs/POLICY_EVALUATION.md, "An evaluator"). The paper's recipe
trains on scarce, clean demonstrations: every paired episode is a competent operator, so the world model never sees
what a bad policy commands, never sees a commanded stillness and never sees a task fail — and inside it a noisy policy
looks like a clean one. The evaluator keeps SimForcing's stage 2 (from the same stage-1 checkpoint: the simulation
prior is what makes such data usable, `sft` collapses on it) and changes the data: paired episodes in the scenes the
policies act in, with noisy operators (σ ~ U(0, 5 cm) per step), pausing ones (held targets) and failed attempts
(misses, early closes, stops short of the goal) among them. On the synthetic benchmark ``data synth --recipe evaluator``
makes such episodes; on a robot, record them (GUIDE, "What data an evaluator needs").

A recipe's ``synth`` are ``data synth`` options (a given flag that the recipe also sets is refused by name: one of
the two would be ignored); its ``train`` are ``--section.field=value`` settings applied before the command line's own
(which win), for the ``method`` it names.
"""

from __future__ import annotations

from dataclasses import dataclass

from simforcing.config import ConfigError


@dataclass(frozen=True)
class Recipe:
    name: str
    method: str  # the stage-2 method it trains
    synth: tuple[tuple[str, object], ...]  # (data synth option's dest, value): the benchmark's operators
    train: tuple[str, ...] = ()  # stage-2 overrides, before the command line's

    def record(self) -> dict:
        """What the recipe sets, for provenance records (a change to the recipe remakes what it made)."""
        return {"name": self.name, "method": self.method, "synth": {k: v for k, v in self.synth},
                "train": list(self.train)}

    def synth_flags(self) -> list[str]:
        """The recipe's ``data synth`` options as command-line words."""
        out = []
        for dest, value in self.synth:
            out.append("--" + dest.replace("_", "-"))
            out += [str(v) for v in value] if isinstance(value, tuple) else [f"{value:g}" if isinstance(value, float)
                                                                          else str(value)]
        return out


EVALUATOR = Recipe(
    "evaluator", "simforcing",
    synth=(("action_noise", 0.05), ("action_noise_splits", ("train",)), ("pauses", 2), ("pause_splits", ("train",)),
           ("failures", 0.25), ("failure_splits", ("train",))))

RECIPES = {r.name: r for r in (EVALUATOR,)}


def recipe(name: str, flag: str = "--recipe") -> Recipe:
    """The recipe called ``name``, or a ConfigError naming ``flag`` and the recipes there are."""
    if name not in RECIPES:
        raise ConfigError(f"{flag}: unknown recipe {name!r}; expected one of {', '.join(RECIPES)}")
    return RECIPES[name]


def apply_synth_recipe(args, defaults: dict) -> None:
    """Set the recipe's ``data synth`` options on ``args`` (``args.recipe`` a name or None); an option given on the
    command line too (its value not ``defaults``') is refused by name."""
    if getattr(args, "recipe", None) is None:
        return
    r = recipe(args.recipe)
    for dest, value in r.synth:
        if getattr(args, dest) != defaults[dest]:
            raise ConfigError(f"--{dest.replace('_', '-')}: set by --recipe {r.name} "
                              f"({' '.join(r.synth_flags())}); give the recipe or the option, not both")
        setattr(args, dest, list(value) if isinstance(value, tuple) else value)


def train_overrides(args) -> list[str]:
    """The recipe's stage-2 settings (``args.recipe`` a name or None) to put before the command line's overrides;
    a recipe of another method than ``args.method`` is refused by name."""
    if getattr(args, "recipe", None) is None:
        return []
    r = recipe(args.recipe)
    if args.method != r.method:
        raise ConfigError(f"--recipe {r.name}: trains --method {r.method}; got --method {args.method}")
    return list(r.train)
