"""The summary of a live run: the run's steps against the simulator's plan for the same steps, in
`simulate`'s table shape (summary.md, summary.csv, summary.json) and a chart of predicted against measured
step times (chart.png).

The simulated and floor rows are charged at the workloads the tasks ran: what each task reported where
it reported one (a process or a command that sizes its own work), else what it was assigned (its series),
so a job whose workloads are only observed is compared with what really ran, not with a guess made
before the run. With a learning model, they are charged at what the model predicted before each step (a
machine that runs 10% slower today than when it was profiled is the model's to learn, not the plan's
error), the profile's total beside it (`simulated_total_profile_s`), and the live steps are compared with
its predictions as well as the profile's (`learned_step_error_pct`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core.atomic import write_text as atomic_write
from ..model.structure import learn_structure
from .runlog import step_chart


def durations_as_run(run, records: list[dict]) -> np.ndarray:
    """(tasks, levels, steps) the simulator's durations with the logged steps at the workloads the tasks
    ran (reported, else assigned); the steps not run yet keep the scenario's."""
    by_task = [{x["task"]: x for x in rec["tasks"]} for rec in records]
    ran = [[b[t].get("observed_workload", b[t]["workload"]) for b in by_task] for t in run.tasks]
    actual = np.array(run.scen.actual, dtype=np.float64, copy=True)
    w = np.clip(np.array(ran, dtype=float), *run.exp.workload_range)
    actual[:, :, : w.shape[1]] = (run.scen.true_model or run.scen.model).durations(w)
    return actual


def learned_durations_as_run(run, records: list[dict]) -> np.ndarray | None:
    """(tasks, levels, logged steps) what a learning run's model predicted for each logged step before it
    learned from it, at every CPU level, at the workloads the step ran (None where the run did not learn).
    Rebuilt by learning again from the logged measurements, as a resumed run does: the same inputs in the
    same order give the corrections the run had."""
    if not records or not all("learning" in r for r in records):
        return None
    from ..model.learning import LearnedDurations

    model = LearnedDurations(run.scen.model, list(run.tasks), run.exp.learning, run.exp.workload_range)
    before = []
    for rec in records:
        seen = rec["learning"]
        w = np.asarray(seen["workload"], dtype=np.float64)
        before.append(model.durations(w[:, None])[:, :, 0])
        model.learn(rec["step"], w, np.asarray(seen["level"]), np.asarray(seen["measured_s"], dtype=np.float64))
    return np.stack(before, axis=2)


def error_pct(measured: np.ndarray, predicted: np.ndarray) -> dict:
    """Per-step relative error of `measured` against `predicted` (both (steps,) seconds), in percent."""
    err = (measured - predicted) / predicted
    return {
        "mean": round(100 * float(err.mean()), 2),
        "mean_abs": round(100 * float(np.abs(err).mean()), 2),
        "max_abs": round(100 * float(np.abs(err).max()), 2),
    }


def write_summary(run, records: list[dict], prepare_ms: float) -> tuple[dict, dict[str, Path]]:
    """`run` is the coordinator (settings, ctx, scen, exp, job, tasks, inputs, run_id, run_dir); returns
    (the summary dict, the paths written)."""
    import dataclasses

    from ..core.steps import StrategyResult
    from ..planners.base import OnlineConfigTable, make_planner
    from ..planners.floor import floor_result
    from ..simulate.report import comparison_rows, to_csv, to_markdown
    from ..simulate.simulation import simulate

    k = len(records)
    mode = run.settings.mode
    name = run.settings.planner
    levels = np.array([r["levels"] for r in records], dtype=np.int64)
    step_s = np.array([r["step_s"] for r in records])
    reconf = np.array([r["reconfigured"] for r in records], dtype=bool)
    reconf_s = np.array([r["reconfig_s"] for r in records])
    measured_penalty = float(reconf_s[reconf].mean()) if reconf.any() else 0.0
    live = StrategyResult(
        strategy=f"{name} (live)",
        mode=mode,
        levels=levels,
        step_s=step_s,
        reconfigured=reconf,
        penalty_s=measured_penalty,
        decision_ms=np.array([r["decision_ms"] for r in records]),
        actions=np.array([r["action"] for r in records]),
        prepare_ms=prepare_ms,
    )
    profile_actual = durations_as_run(run, records)
    learned_actual = learned_durations_as_run(run, records)
    actual = profile_actual
    if learned_actual is not None:  # a learning run: each step charged at what its model knew before the step
        actual = profile_actual.copy()
        actual[:, :, : learned_actual.shape[2]] = learned_actual
    ctx = run.ctx
    if isinstance(ctx.configs, OnlineConfigTable):  # predictions made step by step: only those the run made
        ctx = dataclasses.replace(ctx, steps=min(ctx.steps, ctx.configs.known))
    sim_full = simulate(make_planner(name, run.exp.planner), ctx, actual[:, :, : ctx.steps], mode)
    floor_full = floor_result(ctx, actual[:, :, : ctx.steps], mode)

    def head(r: StrategyResult, label: str) -> StrategyResult:  # its first k steps (no notes, penalty_s priced)
        cut = {f: getattr(r, f)[:k] for f in ("levels", "step_s", "reconfigured", "decision_ms", "actions")}
        return StrategyResult(strategy=label, mode=r.mode, penalty_s=r.penalty_s, prepare_ms=r.prepare_ms, **cut)

    sim = head(sim_full, f"{name} (simulated)")
    sim_on_profile = None  # a learning run's plan charged at the profile's durations, as a run without --learn is
    if learned_actual is not None:
        sim_on_profile = head(
            simulate(make_planner(name, run.exp.planner), ctx, profile_actual[:, :, : ctx.steps], mode), "profile"
        )
    floor = head(floor_full, "floor")
    rows = comparison_rows([floor, sim, live])
    pred = np.array([r["predicted_step_s"] for r in records])
    slow = np.array([r["slowest_s"] for r in records])
    learned = [r.get("learned_step_s") for r in records]
    learned_pred = np.array(learned, dtype=np.float64) if all(x is not None for x in learned) else None
    barrier = np.array([r["barrier_s"] for r in records])
    observe = getattr(run.job, "sync", "barrier") == "observe"
    sync = np.array([r["sync_s"] for r in records])
    live_total = float(step_s.sum() + reconf_s[reconf].sum())
    sim_measured_penalty = float(sim.compute_s + reconf_s[reconf].sum())
    summary = {
        "run_id": run.run_id,
        "planner": name,
        "mode": mode,
        "reconfigure": run.settings.reconfigure,
        "steps_done": k,
        # the run's length: the application's own where it ended on its own, else the experiment's `steps`
        "steps": own if (own := getattr(run, "application_length", None)) is not None else run.exp.steps,
        "steps_bound": run.exp.steps,  # the experiment's `steps`: an upper bound where the application ends itself
        "steps_note": steps_note(k, run.exp.steps, own),
        "same_plan_as_simulated": bool(np.array_equal(sim.levels, levels)),
        "live_total_s": round(live_total, 4),
        "simulated_total_s": round(sim.total_s, 4),
        "simulated_total_measured_penalty_s": round(sim_measured_penalty, 4),
        "total_error_pct": round(100 * (live_total / sim.total_s - 1), 2) if sim.total_s else None,
        "total_error_measured_penalty_pct": round(100 * (live_total / sim_measured_penalty - 1), 2)
        if sim_measured_penalty
        else None,
        "compute_error_pct": round(100 * (step_s.sum() / pred.sum() - 1), 2),
        "step_error_pct": error_pct(step_s, pred),
        "slowest_task_error_pct_mean": round(100 * float(((slow - pred) / pred).mean()), 2),
        # observe mode has no barrier: the same delay is the coordinator noticing the step's last report
        ("report_to_notice_s" if observe else "barrier_s"): {
            "mean": round(float(barrier.mean()), 5),
            "p95": round(float(np.percentile(barrier, 95)), 5),
            "max": round(float(barrier.max()), 5),
        },
        "decision_latency_s": spread(
            [x["decision_latency_s"] for r in records for x in r["tasks"] if "decision_latency_s" in x]
        ),
        "previous_quota_share": spread([r["previous_quota_share"] for r in records if "previous_quota_share" in r]),
        "plan_quotas": plan_quotas(records),
        "sync_s": {"mean": round(float(sync.mean()), 5), "p95": round(float(np.percentile(sync, 95)), 5)},
        "reconfigurations": int(reconf.sum()),
        "reconfig_s_mean": round(measured_penalty, 4),
        "penalty_s_assumed": run.ctx.penalty_s,
        "reconfigure_cost": getattr(run, "reconfigure_cost", None),
        "reconfigure_measured": measured_by_method(records),
        "reconfigure_planned_vs_measured": planned_vs_measured(run.ctx.penalty_s, records),
        "replans": replans_of(records),
        "structure": structure_found(run, records),
        "restarts": int(sum(r["restarts"] for r in records)),
        "rows": rows,
    }
    if sim_on_profile is not None:
        summary["simulated_total_profile_s"] = round(sim_on_profile.total_s, 4)
        summary["total_error_profile_pct"] = (
            round(100 * (live_total / sim_on_profile.total_s - 1), 2) if sim_on_profile.total_s else None
        )
    if learned_pred is not None:  # the learning model's predictions before each step, at the workloads run
        summary["learned_compute_error_pct"] = round(100 * (step_s.sum() / learned_pred.sum() - 1), 2)
        summary["learned_step_error_pct"] = error_pct(step_s, learned_pred)
        half = k // 2
        summary["learned_step_error_pct_second_half"] = error_pct(step_s[half:], learned_pred[half:])
    names = {"md": "summary.md", "csv": "summary.csv", "json": "summary.json", "chart": "chart.png"}
    paths = {k: run.run_dir / name for k, name in (names | {"steps": "steps.csv", "jsonl": "steps.jsonl"}).items()}
    atomic_write(paths["csv"], to_csv(rows))
    atomic_write(paths["json"], json.dumps(summary, indent=2) + "\n")
    lines = [
        f"# Live run {run.run_id}",
        "",
        f"- experiment: {run.inputs['experiment']}",
        f"- job: {run.job.name} ({len(run.tasks)} tasks), planner {name}, {mode} mode, reconfigure {run.settings.reconfigure}",
        f"- steps: {summary['steps_note']}; same plan as simulated: {'yes' if summary['same_plan_as_simulated'] else 'NO'}",
        f"- total: live {live_total:.3f} s, simulated {sim.total_s:.3f} s (penalty {run.ctx.penalty_s:.4g} s per "
        "reconfiguration) "
        f"-> {summary['total_error_pct']:+.2f}%; with the measured reconfiguration cost: {sim_measured_penalty:.3f} s "
        f"-> {summary['total_error_measured_penalty_pct']:+.2f}%",
        *(
            [
                f"- the simulated rows are charged at the learned model's durations before each step; at the "
                f"profile's the same plan totals {sim_on_profile.total_s:.3f} s -> "
                f"{summary['total_error_profile_pct']:+.2f}%"
            ]
            if sim_on_profile is not None
            else []
        ),
        f"- per-step error (measured step vs predicted): mean {summary['step_error_pct']['mean']:+.2f}%, "
        f"mean |.| {summary['step_error_pct']['mean_abs']:.2f}%, max |.| {summary['step_error_pct']['max_abs']:.2f}%",
        *(
            [
                f"- per-step error against the learned model (its prediction before each step): mean "
                f"{summary['learned_step_error_pct']['mean']:+.2f}%, mean |.| "
                f"{summary['learned_step_error_pct']['mean_abs']:.2f}% (second half of the run: mean |.| "
                f"{summary['learned_step_error_pct_second_half']['mean_abs']:.2f}%); total "
                f"{summary['learned_compute_error_pct']:+.2f}% against the learned model, "
                f"{summary['compute_error_pct']:+.2f}% against the profile"
            ]
            if learned_pred is not None
            else []
        ),
        (
            "- report-to-notice delay (the step's last report to the coordinator noticing it; observe mode has no "
            "barrier)"
            if observe
            else "- barrier overhead (last task's report to release)"
        )
        + f": mean {1e3 * barrier.mean():.1f} ms, p95 {1e3 * np.percentile(barrier, 95):.1f} ms",
        *(
            [
                f"- decision latency (a task's report of a step to its quota for the next step in place, "
                f"{d['count']} {'task-steps' if summary['plan_quotas'] else 'quota changes'}): median "
                f"{1e3 * d['median']:.1f} ms, p95 {1e3 * d['p95']:.1f} ms, max {1e3 * d['max']:.1f} ms"
            ]
            if (d := summary["decision_latency_s"])
            else []
        ),
        *(
            [
                f"- quotas from the plan (the next step not decided yet when the task reported): {q['from_plan']} of "
                f"{q['placed']} ({q['written']} written in all); the decision changed {q['corrected']} in time "
                f"(report to the decision's quota: median {1e3 * q['correction_latency_s']['median']:.1f} ms, p95 "
                f"{1e3 * q['correction_latency_s']['p95']:.1f} ms) and {q['ran_on_plan']} after the task had "
                "ended its step"
                if q["correction_latency_s"]
                else f"- quotas from the plan (the next step not decided yet when the task reported): {q['from_plan']} "
                f"of {q['placed']} ({q['written']} written in all); the decision changed none in time and "
                f"{q['ran_on_plan']} after the task had ended its step",
                f"- quotas placed on the task's step signal (a datagram ahead of its report, local runs): "
                f"{q['on_signal']} of {q['placed']}; on its report: {q['placed'] - q['on_signal']}",
            ]
            if (q := summary["plan_quotas"])
            else []
        ),
        *(
            [
                f"- share of a step run on the step before's quota (steps whose quotas changed, the task most late; "
                f"{q['count']} steps): median {100 * q['median']:.1f}%, p95 {100 * q['p95']:.1f}%, max "
                f"{100 * q['max']:.1f}%; {q['over_half']} step(s) more than half"
            ]
            if (q := summary["previous_quota_share"])
            else []
        ),
        f"- reconfigurations: {int(reconf.sum())}, mean real cost {measured_penalty:.3f} s ({run.settings.reconfigure}; "
        f"planned with {run.ctx.penalty_s:.4g} s: {(getattr(run, 'reconfigure_cost', None) or {}).get('source', 'penalty_s')})",
        *(
            f"- {method}: {m['count']} measured, median {m['median_s']:.4g} s (planned with {planned_as(run, method)})"
            for method, m in summary["reconfigure_measured"].items()
        ),
        *(
            [
                f"- planned against measured cost per reconfiguration (the steps the run reconfigured itself): "
                f"planned {p['planned_s']:.4g} s, measured mean {p['measured_mean_s']:.4g} s ({p['count']} "
                f"reconfigurations, measured/planned {p['ratio']:.2f})"
                + (
                    f"; in-place batches per reconfiguration {p['batches_mean']:.2f} (at most 2: the shrinks, then "
                    f"the grows), {p['batch_s_mean']:.4g} s per batch"
                    if "batches_mean" in p
                    else ""
                )
            ]
            if (p := summary["reconfigure_planned_vs_measured"])
            else []
        ),
        *(f"- step {r['step']}: re-planned on the nodes' free CPU ({replan_text(r)})" for r in summary["replans"]),
        *([structure_text(s)] if (s := summary["structure"]) else []),
        f"- worker restarts: {summary['restarts']}",
        "",
        to_markdown(rows),
    ]
    atomic_write(paths["md"], "\n".join(lines))
    step_chart(records, paths["chart"], f"{run.run_id}: {name}, {mode}, {run.settings.reconfigure}", run.ctx.penalty_s)
    return summary, paths


def spread(values: list[float]) -> dict | None:
    """count, median, p95, max (and how many exceed 0.5) of `values`; None where there are none."""
    if not values:
        return None
    v = np.asarray(values, dtype=np.float64)
    return {
        "count": int(v.size),
        "median": round(float(np.median(v)), 5),
        "p95": round(float(np.percentile(v, 95)), 5),
        "max": round(float(v.max()), 5),
        "over_half": int((v > 0.5).sum()),
    }


def plan_quotas(records: list[dict]) -> dict | None:
    """Observe mode, in place (`quota_ahead.plan_timing`): how many task-steps' quotas were placed, from the
    plan, written; how many the decision corrected in time (and how late: `spread`), how many ran on a
    plan's quota the decision changed. None where no quota was placed on a report."""
    placed = [x for r in records for x in r["tasks"] if "quota_from" in x]
    if not placed:
        return None
    return {
        "placed": len(placed),
        "from_plan": sum(x["quota_from"] == "plan" for x in placed),
        "on_signal": sum(x.get("quota_on") == "signal" for x in placed),
        "written": sum(bool(x["quota_written"]) or "corrected_at" in x or "replanned_at" in x for x in placed),
        "corrected": sum("corrected_at" in x for x in placed),
        "correction_latency_s": spread([x["correction_latency_s"] for x in placed if "correction_latency_s" in x]),
        "ran_on_plan": sum(bool(x.get("ran_on_plan")) for x in placed),
    }


def steps_note(done: int, bound: int, own: int | None) -> str:
    """How many steps ran, and of what: "30, the application's own length (the experiment's steps = 400 is
    its upper bound)" or "12 of 400"."""
    if own is not None:
        return f"{done}, the application's own length (the experiment's steps = {bound} is its upper bound)"
    return f"{done} of {bound}"


def measured_by_method(records: list[dict]) -> dict[str, dict]:
    """What the run's real changes cost, by how they happened (reconfig_method: in-place, recreate, or a
    resumed run's start): count, median and mean seconds."""
    by: dict[str, list[float]] = {}
    for r in records:
        if r.get("reconfigured") and r.get("reconfig_method"):
            by.setdefault(r["reconfig_method"], []).append(float(r["reconfig_s"]))
    return {
        m: {"count": len(v), "median_s": round(float(np.median(v)), 4), "mean_s": round(float(np.mean(v)), 4)}
        for m, v in sorted(by.items())
    }


def planned_vs_measured(planned_s: float, records: list[dict]) -> dict | None:
    """What the plan charged per reconfiguration against what the run's own reconfigurations (not a
    resumed run's start, not one re-planned after the platform refused it) really cost: count, planned,
    measured mean, their ratio, and, for in-place batches, batches per reconfiguration and seconds per
    batch. None where the run reconfigured nothing."""
    own = [r for r in records if r.get("reconfigured") and r.get("reconfig_method") != "start" and "replanned" not in r]
    if not own:
        return None
    measured = float(np.mean([float(r["reconfig_s"]) for r in own]))
    out = {
        "count": len(own),
        "planned_s": round(float(planned_s), 4),
        "measured_mean_s": round(measured, 4),
        "ratio": round(measured / planned_s, 3) if planned_s > 0 else None,
    }
    batches = [r["resize_batches"] for r in own if r.get("resize_batches")]
    if batches:
        out["batches_mean"] = round(float(np.mean([len(b) for b in batches])), 3)
        out["batch_s_mean"] = round(float(np.mean([x["seconds"] for b in batches for x in b])), 4)
    return out


def structure_found(run, records: list[dict]) -> dict | None:
    """Which tasks waited for which inside a step, as the tasks' own clocks show it (each report's
    started_at / finished_at, `model.structure.learn_structure`), beside the job's declared `after`: both
    by name (a task -> the tasks it waits for). None where a task reported no clock or under 3 steps ran."""
    if len(records) < 3 or not all("started_at" in x and "finished_at" in x for r in records for x in r["tasks"]):
        return None
    start = np.array([[x["started_at"] for x in r["tasks"]] for r in records], dtype=np.float64)
    end = np.array([[x["finished_at"] for x in r["tasks"]] for r in records], dtype=np.float64)
    learned = learn_structure(start, end).names(run.tasks)
    declared = run.ctx.structure.names(run.tasks) if run.ctx.structure is not None else {}
    return {"learned": learned, "declared": declared, "steps": len(records), "agrees": learned == declared}


def structure_text(s: dict) -> str:
    def waits(graph: dict[str, list[str]]) -> str:
        return "; ".join(f"{t} after {', '.join(p)}" for t, p in graph.items()) or "none (independent tasks)"

    found = f"- waits inside a step, from the tasks' own clocks ({s['steps']} steps): {waits(s['learned'])}"
    if s["agrees"]:
        return found + "; as the job declares"
    return found + (
        f"; the job declares {waits(s['declared'])}: planned and simulated on the declared waits"
        + (" (declare these with `after = [...]` on the waiting task, docs/tasks.md)" if s["learned"] else "")
    )


def replans_of(records: list[dict]) -> list[dict]:
    """The steps the run re-planned on the nodes' free CPU (the platform refused their configuration)."""
    return [
        {"step": r["step"], "kind": r["replanned"].get("kind"), "refused": r["replanned"].get("refused", {})}
        for r in records
        if r.get("replanned")
    ]


def replan_text(r: dict) -> str:
    """'deferred: b on node-a Deferred' for one of :func:`replans_of`."""
    refused = ", ".join(f"{t} on {x['node']} {x['reason']}" for t, x in r["refused"].items())
    return f"{r['kind']}: {refused}" if refused else str(r["kind"])


def planned_as(run, method: str) -> str:
    """The cost the run planned `method` with, for the summary's text."""
    cost = (getattr(run, "reconfigure_cost", None) or {}).get(method.replace("-", "_") + "_s")
    return "-" if cost is None else f"{cost:.4g} s"
