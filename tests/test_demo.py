"""`simforcing demo --quick` end to end on CPU: every job of the graph runs as its own command, and the report and
results files are complete. The numbers' ordering belongs to the full demo (docs/RESULTS.md); here only completeness."""

import json

import pytest

from simforcing.cli import main


@pytest.mark.slow
def test_demo_quick_writes_a_complete_report(tmp_path):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out), "--no-policy", "--jobs", "2"]) == 0
    res = json.loads((out / "results.json").read_text())
    for base in ("copy-first", "vae-recon"):
        for key in ("psnr", "ssim", "psnr_arm", "af_pos", "af_floor_pos"):
            assert isinstance(res["baselines"][base][key], float), (base, key)
        for key in ("lpips", "fid", "fvd"):  # no weights configured: null (eval.json gives the reason)
            assert res["baselines"][base][key] is None
    for method in ("sft", "simforcing"):
        r = res["methods"][method]["42"]
        for key in ("psnr", "ssim", "psnr_arm", "af_pos", "af_pos_moving", "af_control_pos", "latency_s"):
            assert isinstance(r[key], float), (method, key)
        assert r["forwards_per_sample"] == {"sft": 10, "simforcing": 21}[method]  # the sampler at (1, 10, 0.6)
        assert (out / method / "loss_curves.png").exists() and (out / method / "metrics.jsonl").exists()
        assert list((out / "videos" / method).glob("*.gif")) and list((out / "videos" / method).glob("*.mp4"))
        assert isinstance(res["extra_rows"][f"{method} N_r=1"]["psnr"], float)
    for name, row in res["decomposition"].items():
        assert isinstance(row["psnr"], float) and isinstance(row["af_pos"], float), name
    assert (out / "stage1" / "loss_curves.png").exists()
    few = res["fewstep"]  # the few-step student against its teacher, the same windows and episodes
    k = few["steps"]
    assert few["windows"]["forwards_per_sample"] == {"teacher": 21, "student": 1 + k}
    assert few["windows"]["psnr"]["paired"]["n"] == r["num_samples"]
    assert few["forwards_per_episode"]["student"] * 21 == few["forwards_per_episode"]["teacher"] * (1 + k)
    assert set(few["rollout"]["student"]) == {"rollout", "restart"}
    assert "in_progress" not in res  # the final report: the partial ones were rewritten as jobs finished
    assert res["estimate"] is None  # --no-policy: no policies, no estimate of their success
    fid = res["fidelity"]  # the SimForcing world model's fidelity: oracle and twin; no policies, no ranking inside
    assert fid["oracle"]["af_cm"] > 0 and set(fid["twin"]) >= {"drift_cm", "drift_db"} and fid["training"]["core_s"] > 0
    assert "inside" not in fid and "still" not in fid and fid["aims"]["pearson"]["met"] is None
    summary = res["summary"]
    assert len(summary["paired"]) == 1 and summary["paired"][0]["seed"] == 42
    assert set(summary["beats_copy"]) == {"sft", "simforcing"}
    assert {"stage1", "sweep steps", "train simforcing", "eval simforcing", "total"} <= set(res["wall_time_s"])
    cmds = res["commands"]
    assert cmds["stage1"].startswith("simforcing pretrain ") and "--train.threads=auto" in cmds["stage1"]  # both cores
    assert all(c.startswith("simforcing ") for c in cmds.values())
    assert res["sweep_steps"]["table_md"] and "Action-following error" in res["sweep_steps"]["table_md"]
    md = (out / "report.md").read_text()
    for needle in ("copy the first frame", "VAE reconstruction", "| sft (mean", "| simforcing (mean", "Checks",
                   "Where the gain is lost", "upper bound", "Loss curves", "Sweep", "Wall time", "```bash",
                   "The few-step student", "How faithful the world model is"):
        assert needle in md, needle
    html = (out / "report.html").read_text()
    assert html.count("data:image/") >= 4  # loss curves, videos and the heatmap inline
    # a second run reuses every job's output
    stamp = (out / "data" / "meta" / "info.json").stat().st_mtime_ns
    said = []
    from simforcing.demo import demo_budget, run_demo

    assert run_demo(out, None, demo_budget(True), jobs=2, policy=False, echo=said.append) == 0
    assert (out / "data" / "meta" / "info.json").stat().st_mtime_ns == stamp
    assert not [s for s in said if "started" in s], said
    again = json.loads((out / "results.json").read_text())  # every job's time survives the reuse, marked as such
    assert set(again["wall_time_reused"]) == set(res["wall_time_s"]) - {"total"}
    assert {k: v for k, v in again["wall_time_s"].items() if k != "total"} == \
        {k: v for k, v in res["wall_time_s"].items() if k != "total"}
    assert "(reused) |" in (out / "report.md").read_text()


def test_reused_jobs_keep_the_earlier_runs_seconds(tmp_path):
    """A resumed demo: jobs it ran keep this run's seconds, jobs it skipped get the earlier results.json's; a missing
    or unreadable earlier file gives none (never an error at the end of a demo)."""
    from simforcing.demo import with_reused_timings
    from simforcing.jobs import JobResult

    results = {"a": JobResult("a", "done", 0, 5.0), "b": JobResult("b", "skipped"), "c": JobResult("c", "skipped")}
    earlier = tmp_path / "results.json"
    earlier.write_text(json.dumps({"wall_time_s": {"a": 99.0, "b": 7.5, "total": 120.0}}))
    assert with_reused_timings({"a": 5.0}, results, earlier) == ({"b": 7.5, "a": 5.0}, ["b"])
    for text in ("{not json", "[]"):
        earlier.write_text(text)
        assert with_reused_timings({"a": 5.0}, results, earlier) == ({"a": 5.0}, [])
    assert with_reused_timings({"a": 5.0}, results, tmp_path / "none.json") == ({"a": 5.0}, [])


def test_the_demo_graph_distils_a_student_and_scores_it_beside_its_teacher(tmp_path):
    """The student's jobs: distilled from the SimForcing run, then every measurement its teacher gets — the same
    windows, the long rollouts, the policy evaluation inside the world model and the agreement."""
    from simforcing.demo.plan import STUDENT, TWIN, build_plan, demo_budget, few_step

    plan = build_plan(tmp_path / "demo", None, demo_budget())
    jobs = {j.name: j for j in plan.jobs}
    k = plan.budget.fewstep.steps
    distill = plan.commands["distill simforcing"]
    assert f"--teacher {plan.runs['simforcing']}" in distill and f"--steps {k}" in distill
    assert f"--out {plan.student}" in distill and jobs["distill simforcing"].deps == ("train simforcing",)
    assert f"--ckpt {plan.student}" in plan.commands[f"eval {few_step().name}"]
    assert f"--ckpt {plan.student}" in plan.commands[f"rollout {few_step().name}"]
    wm = plan.commands[f"estimate wm pool {STUDENT}{TWIN}"]
    assert f"--wm {plan.student}" in wm and "distill simforcing" in jobs[f"estimate wm pool {STUDENT}{TWIN}"].deps
    assert f"{STUDENT}{TWIN}=" in plan.commands["pool agreement"]


def test_the_default_pool_holds_the_one_view_and_the_multi_view_world_model(tmp_path):
    """The default demo (issue 68: one multi-view world model, not two evaluators that measure the same thing): the
    data with both cameras, stage 1 continued on them from the one-view stage 1, `sft` and SimForcing on both cameras
    with the paper's steps, SimForcing's student; the pool holds copy-first, SimForcing's one-view student and its
    multi-view student, each with the twin, every one estimated (copy-first too: what the actions alone give the same
    predictor); Tab. 5's two-camera policies inside the multi-view world model beside the simulator."""
    from simforcing.demo.plan import VIEWS, build_plan, demo_budget, views_of

    plan = build_plan(tmp_path / "demo", None, demo_budget())
    jobs, cmds = {j.name: j for j in plan.jobs}, plan.commands
    assert f"--views {' '.join(VIEWS)}" in cmds["data"] and f"--views {' '.join(VIEWS)}" in cmds["data long"]
    s1 = cmds["stage1 views"]
    assert f"--init {plan.out / 'stage1'}" in s1 and "--data.views=external,wrist" in s1
    for m in ("sft", "simforcing"):
        assert f"--teacher {plan.out / 'stage1_views'}" in cmds[f"train {views_of(m)}"]
        assert f"--train.max_steps={plan.budget.stage2_steps}" in cmds[f"train {views_of(m)}"]
    assert "data evaluator" not in jobs and "distill sft" not in jobs  # --full's
    pool = {n[len("estimate wm pool "):] for n in jobs if n.startswith("estimate wm pool ")}
    assert pool == {"copy-first", "simforcing-fewstep-twin", "simforcing-views-fewstep-twin"}
    assert pool == {n[len("estimate "):] for n in jobs if n.startswith("estimate ") and "pool" not in n}
    assert "--wm-condition render" in cmds["estimate wm pool simforcing-views-fewstep-twin"]
    two = cmds["wm-eval views two-camera policies"]
    assert "--wm-condition render" in two and str(plan.students[views_of("simforcing")]) in two
    assert f"--per-task {plan.budget.policy.eval_per_task} " in two  # Tab. 5's scenes: its evaluations the truth
    assert all(f"{label}=" in two for label in plan.policy["runs"])
    assert set(jobs["wm-eval two-camera agreement"].deps) >= {f"policy eval {label}" for label in plan.policy["runs"]}
    assert "rollout sft" not in jobs and "rollout simforcing" in jobs  # sft's drift: --full
    assert "--data.views=external,wrist" in cmds[f"eval {views_of('copy-first')}"]


def test_the_evaluator_is_trained_on_its_recipe_and_judges_the_policies_on_the_pool(tmp_path):
    """--full's evaluator: its data with the recipe's operators in the policy layouts, SimForcing's stage 2 on it
    from the one stage-1 run, its student; every world model of the pool (the students, with and without the twin)
    evaluated on the same scenes per task, estimated and agreed; the fidelity point is the evaluator student's with
    the twin. The paper's runs keep the paper's data."""
    from simforcing.demo.plan import EVALUATOR, build_plan, demo_budget
    from simforcing.recipes import EVALUATOR as RECIPE

    plan = build_plan(tmp_path / "demo", None, demo_budget(), full=True)
    jobs, cmds = {j.name: j for j in plan.jobs}, plan.commands
    data = plan.evaluator.data
    assert f"--out {data}" in cmds["data evaluator"] and f"--recipe {RECIPE.name}" in cmds["data evaluator"]
    assert f"--layout-train {plan.budget.evaluator.layout_train}" in cmds["data evaluator"]
    train = cmds[f"train {EVALUATOR}"]
    assert f"--data {data}" in train and f"--teacher {plan.out / 'stage1'}" in train and "--method simforcing" in train
    assert f"--data {plan.data}" in cmds["train simforcing"] and f"--data {plan.data}" in cmds["train sft"]
    assert set(jobs[f"distill {EVALUATOR}"].deps) == {f"train {EVALUATOR}", "data evaluator"}
    pool = {n[len("estimate wm pool "):] for n in jobs if n.startswith("estimate wm pool ")}
    assert pool >= {"copy-first", "sft-fewstep", "simforcing-fewstep", "simforcing-fewstep-twin", "evaluator-fewstep",
                    "evaluator-fewstep-twin", "simforcing-views-fewstep", "simforcing-views-fewstep-twin"}
    per_task = f"--per-task {plan.budget.wm_eval.pool_per_task_full} "
    assert all(per_task in cmds[f"estimate wm pool {n}"] for n in pool) and per_task in cmds["estimate sim pool"]
    assert "--wm-condition render" in cmds["estimate wm pool evaluator-fewstep-twin"]
    assert pool == {n[len("estimate "):] for n in jobs if n.startswith("estimate ") and "pool" not in n}
    assert f"--draws {plan.budget.wm_eval.estimate_draws}" in cmds["estimate evaluator-fewstep-twin"]
    fid = cmds["fidelity"]
    assert "--wm-name evaluator-fewstep-twin" in fid and str(plan.students[EVALUATOR]) in fid


def test_stage_1_holds_both_cores_and_the_judge_follows(tmp_path):
    """On two slots stage 1 holds both (the governor's threads: two on a quiet machine), and nothing made before it
    holds a core it waits for: the policy benchmark's data, and so the success judge, come after it. With one stage-1
    thread the judge's inputs are made right after the demo's data, so the judge trains beside stage 1."""
    from simforcing.demo.plan import build_plan, demo_budget

    plan = build_plan(tmp_path / "demo", None, demo_budget(), jobs=2)
    jobs = {j.name: j for j in plan.jobs}
    assert jobs["stage1"].slots == jobs["stage1"].threads == 2
    assert "--train.threads=auto" in plan.commands["stage1"]
    assert set(jobs["policy data"].deps) == {"data", "stage1"} and set(jobs["judge"].deps) == {"data", "policy data"}
    # every one-window score needs the probe: after SimForcing's stage 2, before sft's and the student's
    assert jobs["train simforcing"].priority > jobs["probe"].priority > max(jobs["train sft"].priority,
                                                                             jobs["distill simforcing"].priority)
    # the one-window table's scores before the multi-view runs' stage 2 (the table is the demo's first answer)
    table = ("eval copy-first", "eval vae-recon", "eval sft", "eval simforcing")
    assert min(jobs[n].priority for n in table) > max(jobs["train sft-views"].priority,
                                                      jobs["train simforcing-views"].priority)
    one = demo_budget()
    one.stage1_threads = 1
    jobs = {j.name: j for j in build_plan(tmp_path / "one", None, one, jobs=2).jobs}
    assert jobs["stage1"].slots == jobs["stage1"].threads == 1
    assert jobs["policy data"].deps == ("data",)
    assert jobs["policy data"].priority > jobs["stage1"].priority  # made first: vae is 8 s, the data a minute
    wide = {j.name: j for j in build_plan(tmp_path / "wide", None, demo_budget(), jobs=4).jobs}
    assert wide["stage1"].slots == 2 and wide["policy data"].deps == ("data",)  # two slots left beside stage 1


def test_the_report_is_rewritten_as_jobs_finish(tmp_path):
    """Mid-run the demo writes what the finished jobs hold, marked in progress, keeps the earlier run's times of the
    jobs it reuses, and never stops the demo when a partial report cannot be written."""
    from simforcing.demo import PartialReport
    from simforcing.demo.plan import build_plan, demo_budget
    from simforcing.jobs import JobResult

    plan = build_plan(tmp_path / "demo", None, demo_budget(True), policy=False)
    names = [j.name for j in plan.jobs]
    results = {n: JobResult(n, "not run") for n in names}
    results[names[0]] = JobResult(names[0], "done", 0, 12.0)
    results[names[1]] = JobResult(names[1], "skipped")
    said = []
    PartialReport(plan, {names[1]: 7.5, "total": 99.0}, said.append)(names[0], results)
    res = json.loads((plan.out / "results.json").read_text())
    assert res["in_progress"] == {"done": 2, "jobs": len(names), "last": names[0]}
    assert res["wall_time_s"] == {names[1]: 7.5, names[0]: 12.0} and res["wall_time_reused"] == [names[1]]
    assert f"In progress: 2 of {len(names)} jobs done" in (plan.out / "report.md").read_text() and not said
    broken = PartialReport(plan, {}, said.append)
    broken.plan = None  # whatever goes wrong: one line, the demo goes on
    broken(names[0], results)
    broken(names[0], results)
    assert len(said) == 1 and "the report could not be written" in said[0]


def test_the_schedule_summary_names_the_chain_that_bounds_the_wall_time():
    """Two slots: a and c start at once, b waits for a, d for c's slot, e for b and d (d ends last of them): the
    chain is c -> d -> e and the slots sat idle 2·50 − 80 = 20 s (b ended at 30, nothing could start until 40...)."""
    from simforcing.demo.schedule import schedule_summary

    spans = {"a": (0, 10), "b": (10, 30), "c": (0, 25), "d": (25, 40), "e": (40, 50)}
    deps = {"b": ("a",), "e": ("b", "d")}
    s = schedule_summary(spans, deps, slots=2)
    assert [(j, why) for j, why, _ in s.chain] == [("c", "start"), ("d", "slot of c"), ("e", "after d")]
    assert [sec for *_, sec in s.chain] == [25, 15, 10]
    assert (s.wall_s, s.busy_s, s.idle_s) == (50, 80, 20)
    two = schedule_summary({"x": (0, 10)}, {}, slots=2, job_slots={"x": 2})
    assert two.idle_s == 0 and two.chain == [("x", "start", 10)]
