"""Every command's --help: each flag says what it does, and says its default once (argparse's "(default: ...)"
is added only where the help does not already say it and there is a default to show)."""

from __future__ import annotations

import argparse
import re

import pytest

from simforcing.cli import COMMANDS, HelpFormatter, command_parser, main, subcommand


@pytest.mark.parametrize("words,target,help_", COMMANDS, ids=[" ".join(w) for w, _, _ in COMMANDS])
def test_every_flag_has_help_and_one_default(words, target, help_):
    parser = command_parser(words, subcommand(target), help_)
    fmt = HelpFormatter(parser.prog)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flag = "/".join(action.option_strings) or action.dest
        assert (action.help or "").strip(), f"simforcing {' '.join(words)} {flag}: no help"
        text = fmt._expand_help(action)
        assert text.count("(default") <= 1, f"simforcing {' '.join(words)} {flag}: {text!r}"
        assert "(default: None)" not in text and "(default: False)" not in text, f"{flag}: {text!r}"
    page = parser.format_help()
    assert not re.search(r"\(default[^)]*\)\s*\(default", page), page


def test_rollout_help_says_the_step_default_once(capsys):
    with pytest.raises(SystemExit) as e:
        main(["rollout", "--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: the latest valid one)" in out and "(default: None)" not in out


def test_policy_eval_flags_are_grouped_by_environment(capsys):
    with pytest.raises(SystemExit):
        main(["policy", "eval", "--help"])
    sections = {block.splitlines()[0]: block for block in capsys.readouterr().out.split("\n\n") if block.strip()}
    for group, flags in (("world model (--env world-model):", ("--wm",)),
                         ("LIBERO (--env libero):", ("--suite", "--trials", "--tasks", "--gripper")),
                         ("synthetic benchmark: players and scenes (--env synthetic and world-model):",
                          ("--per-task", "--max-steps", "--scene-seed", "--layouts", "--jitter", "--judge"))):
        assert all(f"  {flag} " in sections[group] for flag in flags), sections.get(group)
