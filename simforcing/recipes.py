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
from typing import Optional

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
    """Set the recipe's ``data synth`` options on ``args`` (``args.recipe`` a name or None), then the ``defaults`` of
    those still None (not given). An option the recipe sets that was given too — even at its default value:
    `--recipe evaluator --pauses 0` once took the recipe's 2 pauses without a word — is refused by name."""
    if getattr(args, "recipe", None) is not None:
        r = recipe(args.recipe)
        for dest, value in r.synth:
            if getattr(args, dest) is not None:
                raise ConfigError(f"--{dest.replace('_', '-')}: set by --recipe {r.name} "
                                  f"({' '.join(r.synth_flags())}); give the recipe or the option, not both")
            setattr(args, dest, list(value) if isinstance(value, tuple) else value)
    for dest, value in defaults.items():
        if getattr(args, dest) is None:
            setattr(args, dest, value)


# where a dataset's info.json "synth" record keeps each ``data synth`` operator option (``data.synthetic.generate``)
RECORDED_AS = {"action_noise": ("action_noise", "sigma_max"), "action_noise_splits": ("action_noise", "splits"),
               "pauses": ("pauses", "per_episode"), "pause_splits": ("pauses", "splits"),
               "failures": ("failures", "fraction"), "failure_splits": ("failures", "splits")}


def check_recipe_data(name: Optional[str], root) -> None:
    """With ``--recipe NAME`` on a stage-2 run: a synthetic dataset (info.json ``synth``) must have been made with the
    recipe's operators (``train --recipe evaluator`` on data without them trained the paper's recipe under the
    evaluator's name); ConfigError naming the first option it was made without. Recorded data keeps no such record:
    said in a note (record it with the recipe's operators, GUIDE "What data an evaluator needs")."""
    import sys

    from simforcing.data.format import read_info, read_splits

    if name is None:
        return
    r = recipe(name)
    synth = read_info(root).get("synth")
    if not isinstance(synth, dict):
        print(f"note: --recipe {r.name}: {root} is recorded data (no synthetic record); its episodes must show the "
              "recipe's operators (noisy, pausing, failing) — nothing here can check that", file=sys.stderr)
        return
    for dest, value in r.synth:
        section, key = RECORDED_AS[dest]
        record = synth.get(section)
        got = record.get(key) if isinstance(record, dict) else None
        want = list(value) if isinstance(value, tuple) else value
        if got != want:
            raise ConfigError(f"--recipe {r.name}: {root} was made with {dest} {got!r}, the recipe's data has "
                              f"{want!r}; train it on data made by `simforcing data synth --recipe {r.name}`, or "
                              "leave out --recipe")
    made = synth.get("num_train"), synth.get("layout_train") or 0
    held = len(read_splits(root)["train"])
    if isinstance(made[0], int) and isinstance(made[1], int) and held != sum(made):
        raise ConfigError(f"--recipe {r.name}: {root}'s train split holds {held} episodes, but `data synth --recipe "
                          f"{r.name}` made {sum(made)} (meta/info.json synth.num_train {made[0]} + layout_train "
                          f"{made[1]}): episodes were added or removed since, and only those it made show the recipe's "
                          "operators — make the dataset again with `simforcing data synth --recipe "
                          f"{r.name}`, or leave out --recipe")


def train_overrides(args) -> list[str]:
    """The recipe's stage-2 settings (``args.recipe`` a name or None) to put before the command line's overrides;
    a recipe of another method than ``args.method`` is refused by name."""
    if getattr(args, "recipe", None) is None:
        return []
    r = recipe(args.recipe)
    if args.method != r.method:
        raise ConfigError(f"--recipe {r.name}: trains --method {r.method}; got --method {args.method}")
    return list(r.train)
