"""The docs a user reads (``simforcing.docs_tables``): every table block is the rendering of its record, no user page
types a recorded figure by hand, each capability page opens with its table, the user's pages fit their line budget,
and every link — in the pages and in the code's docstrings and messages — leads to a file that exists."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from simforcing import docs_tables as D

ROOT = Path(__file__).resolve().parents[1]


def test_every_block_is_the_rendering_of_its_record():
    """`python -m simforcing.docs_tables --write` leaves nothing to change: no table on any page (docs/RESULTS.md
    included) was edited by hand or left behind by a newer record."""
    assert D.stale() == [], f"run `{D.WRITE}`"


def test_no_user_page_types_a_recorded_figure_by_hand():
    assert D.hand_quoted() == []


def test_each_capability_page_opens_with_its_table():
    """What it does, how good it is (a table from a record, with its machine, commit and date), and the command: the
    first table block within the first screen of every capability page and of the README."""
    for page in ("README.md", *D.CAPABILITY_PAGES):
        found = D.blocks((ROOT / page).read_text())
        assert found and found[0].line <= D.FIRST_SCREEN, f"{page}: no table block in its first {D.FIRST_SCREEN} lines"
    for t in D.TABLES.values():
        assert t.name in {b.name for b in D.blocks((ROOT / t.page).read_text())}, f"{t.page}: no block of {t.name}"


def test_every_captioned_table_is_on_the_results_page():
    text = (ROOT / D.RESULTS_PAGE).read_text()
    on_page = {b.name for b in D.blocks(text)}
    assert on_page == {t.name for t in D.TABLES.values() if t.caption}, on_page


def test_the_user_pages_fit_their_budget():
    lines = {p: len((ROOT / p).read_text().splitlines()) for p in D.USER_PAGES}
    assert sum(lines.values()) <= D.LINE_BUDGET, lines


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_link_of_the_docs_leads_to_a_file():
    pages = [ROOT / p for p in D.pages()]
    assert ROOT / "docs/notebook/README.md" in pages
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            path = target.split("#")[0]
            if path and not re.match(r"[a-z]+:", path) and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_every_page_the_code_names_exists():
    """Docstrings, comments, help and error messages name docs pages by their path under docs/; each is there."""
    named = set()
    for path in [*(ROOT / "simforcing").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        named |= {(m, path.name) for m in re.findall(r"docs/[\w/.-]+\.md", path.read_text())}
    assert named and [(m, f) for m, f in sorted(named) if not (ROOT / m).exists()] == []


# ----------------------------------------------------------------------------------------------------------------------
# The mechanism, on a copy of the docs
# ----------------------------------------------------------------------------------------------------------------------

@pytest.fixture()
def tree(tmp_path) -> Path:
    """README.md and docs/ (no pictures) copied: a root the generator reads and writes like the repository."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("*.png", "*.csv"))
    return tmp_path


def test_a_table_edited_by_hand_is_found_and_rewritten(tree):
    page = tree / "docs/FEWSTEP.md"
    assert D.stale(tree) == []  # the control: the copy as it is
    text = page.read_text()
    block = next(b for b in D.blocks(text) if b.name == "fewstep")
    page.write_text(text.replace(block.text, block.text.replace("| K = 1 student |", "| K = 1 student, edited |")))
    assert D.stale(tree) == ["docs/FEWSTEP.md"]
    assert D.write(tree) == ["docs/FEWSTEP.md"] and page.read_text() == text


def test_a_figure_typed_into_a_page_is_found(tree):
    page = tree / "docs/WORLD_MODELS.md"
    psnr = next(iter(D.figures_of(next(b.text for b in D.blocks(page.read_text()) if b.name == "one_window"))))
    page.write_text(page.read_text() + f"\nThe model reaches {psnr} here; in code `--x={psnr}` is not a quote.\n")
    n = len(page.read_text().splitlines())
    assert D.hand_quoted(tree) == [f"docs/WORLD_MODELS.md:{n}: {psnr}"]


@pytest.mark.parametrize("marker,why", [
    ("<!-- table nosuch: from docs/x.json -->\n<!-- end of table nosuch -->", "table 'nosuch' is not one of"),
    ("<!-- table fewstep: from docs/bench_cpu.json -->\n<!-- end of table fewstep -->", "not docs/bench_cpu.json"),
])
def test_a_block_the_generator_cannot_render_is_named(tree, marker, why):
    page = tree / "docs/FEWSTEP.md"
    page.write_text(page.read_text() + "\n" + marker + "\n")
    with pytest.raises(D.TableError, match=why) as e:
        D.write(tree)
    assert "docs/FEWSTEP.md:" in str(e.value)


def test_a_record_without_its_machine_commit_and_date_is_refused(tree):
    index = json.loads((tree / D.PROVENANCE).read_text())
    del index["docs/bench_cpu.json"]
    (tree / D.PROVENANCE).write_text(json.dumps(index))
    with pytest.raises(D.TableError, match="docs/records.json: no commit, machine and date for docs/bench_cpu.json"):
        D.render_block("bench_cpu", "docs/BENCHMARK.md", None, tree)


def test_a_demo_section_is_recorded_as_the_evaluators_record(tree):
    section = json.loads((tree / "docs/evaluators/evaluators.json").read_text())
    row = dict(section["rows"]["simforcing-fewstep"], name="evaluator-fewstep-twin", pearson=0.91)
    results = tree / "results.json"
    results.write_text(json.dumps({"summary": {}, "estimate": dict(section, rows={"evaluator-fewstep-twin": row},
                                                                    evaluator="evaluator-fewstep-twin")}))
    D.record("evaluators", results, "a test machine", commit="abc1234", date="2027-01-02", root=tree)
    assert json.loads((tree / "docs/evaluators/evaluators.json").read_text())["evaluator"] == "evaluator-fewstep-twin"
    D.write(tree)
    text = (tree / "docs/POLICY_EVALUATION.md").read_text()
    block = next(b.text for b in D.blocks(text) if b.name == "evaluators")
    assert "evaluator-fewstep-twin" in block and "0.91" in block
    assert "commit `abc1234`, a test machine, 2027-01-02" in block
    (tree / "other.json").write_text(json.dumps({"summary": {}}))
    with pytest.raises(D.TableError, match="other.json: not a demo's results.json"):
        D.record("evaluators", tree / "other.json", "m", commit="c", root=tree)
    with pytest.raises(D.TableError, match="docs_tables --record"):
        D.record("demo", results, "m", commit="c", root=tree)


def test_a_table_without_a_record_says_what_makes_it(tree):
    """The policy-transfer table before any demo's policy section was recorded: one line naming the command; once
    recorded, the section's own table."""
    record = tree / D.TABLES["transfer"].records[0]
    if record.exists():
        record.unlink()
    block = D.render_block("transfer", "docs/POLICY_TRANSFER.md", None, tree)
    assert "No record yet" in block and "--record transfer" in block
    section = {"rows": {}, "table_md": "| policy | reach | push | grasp | average |\n|---|---|---|---|---|",
               "commands": {}, "wall_time_s": {}, "runs": {}, "init": {}, "data": "d", "budget": {}, "seed": 42}
    (tree / "out.json").write_text(json.dumps({"policy": section}))
    D.record("transfer", tree / "out.json", "m", commit="c0ffee0", date="2027-01-02", root=tree)
    block = D.render_block("transfer", "docs/POLICY_TRANSFER.md", None, tree)
    assert "| policy | reach | push | grasp | average |" in block and "commit `c0ffee0`, m, 2027-01-02" in block


def test_the_command_line_lists_checks_and_refuses(capsys):
    assert D.main(["--list"]) == 0
    assert "evaluators: docs/evaluators/evaluators.json" in capsys.readouterr().out
    assert D.main(["--check"]) == 0
    with pytest.raises(SystemExit) as e:
        D.main(["--record", "evaluators", "x.json"])
    assert e.value.code == 2 and "--record needs --machine" in capsys.readouterr().err


def test_the_windows_and_rollouts_of_both_pairings_are_read_from_their_files(tmp_path):
    """docs/evaluator_study/rollouts.py reads each eval.json and rollout.json through their typed readers (nothing
    typed): the drift is the rollout's mean action error less the restarted one's, in cm, as computed here from the
    files; the table shows one row per pairing and world model. A spec that is not PAIRING|MODEL[|CONDITION]=FOLDER,
    or a rollout without its restarted row, is refused by name before anything is written."""
    import importlib.util

    from fidelitygen import window_eval, world_model
    from simforcing.evaluate.results import ChunkSeries, RolloutDrift, WindowEvaluation

    def drift(folder: Path, rows: dict) -> Path:
        def series(af, psnr: float) -> ChunkSeries:
            return ChunkSeries({"af_pos": [af, af], "psnr": [psnr, psnr]}, {"af_pos": af, "psnr": psnr},
                               {"af_pos": [af] * 4, "psnr": [psnr] * 4}, {"af_pos": [[af, af]], "psnr": [[psnr, psnr]]})
        folder.mkdir()
        r = RolloutDrift(run="r", checkpoint={"step": 1}, data="d", split="val", horizon=4, chunk_frames=[2, 2],
                         num_episodes=3, episode_ids=["a", "b", "c"], sampler={"condition": "render"},
                         state_input="integrated", sim_chain="continue", probe="p", units="m", forwards_per_episode=4,
                         rows={k: series(*v) for k, v in rows.items()}, seconds={"total": 1.0})
        (folder / "rollout.json").write_text(json.dumps(r.to_json()))
        return folder

    spec = importlib.util.spec_from_file_location("pairing_rollouts", ROOT / "docs" / "evaluator_study" / "rollouts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    own = drift(tmp_path / "own", {"rollout": (0.1234, 20.5), "restart": (0.0834, 23.25), "sim chain": (None, 21.5)})
    twin = drift(tmp_path / "twin", {"rollout": (0.11, 21.0), "restart": (0.08, 23.0), "sim chain": (None, 33.5)})
    scene = drift(tmp_path / "scene", {"rollout": (0.15, 19.0), "restart": (0.125, 22.0)})
    ev = window_eval(tmp_path / "eval", world_model(tmp_path / "run"), af=0.082, psnr=23.75)
    assert WindowEvaluation.read(ev, "the test").scores.psnr == 23.75
    out = tmp_path / "rollouts.json"
    assert mod.main(["--out", str(out), "--window", f"arm|SimForcing={ev}", f"arm|SimForcing|own chain={own}",
                     f"arm|SimForcing|twin={twin}", f"scene|sft|own chain={scene}"]) == 0
    body = json.loads(out.read_text())
    assert body["windows"][0]["action_error_cm"] == pytest.approx(8.2)
    r = body["rollouts"]
    assert r[0]["drift_cm"] == pytest.approx(100 * (0.1234 - 0.0834)) and r[2]["drift_cm"] == pytest.approx(2.5)
    assert r[1]["condition_psnr"] == 33.5 and r[2]["condition_psnr"] is None
    table = D.render_pairing_rollouts((out,), None).splitlines()
    assert table[2] == "| arm | SimForcing | 23.75 / 8.20 | 20.50 / 12.34 / 4.00 | 21.00 / 11.00 / 3.00 | 21.50 / 33.50 |"
    assert table[3] == "| scene | sft | — | 19.00 / 15.00 / 2.50 | — | — / — |"
    for bad, needle in ((f"moon|x|twin={own}", "PAIRING|MODEL|CONDITION=FOLDER"), (f"arm|x|fog={own}", "one of own"),
                        (f"arm|x={own}", "one of arm, scene")):
        with pytest.raises(SystemExit, match=re.escape(needle)):
            mod.main(["--out", str(tmp_path / "no.json"), bad])
    norestart = drift(tmp_path / "norestart", {"rollout": (0.1, 20.0)})
    with pytest.raises(SystemExit, match="no 'restart' row"):
        mod.main(["--out", str(tmp_path / "no.json"), f"arm|m|twin={norestart}"])
    assert not (tmp_path / "no.json").exists()
