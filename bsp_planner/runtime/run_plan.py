"""What a live run plans from: the experiment read as `simulate` reads it, its planning context on the run's
nodes, and the reconfiguration cost of its method (:class:`RunPlanning`, a part of the coordinator). A
resumed run plans from the same inputs, nodes and costs it recorded, so it makes its decisions again; the
logged steps are handed to the loop as it observed them (:meth:`RunPlanning._observation`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..zk.schema import check_task_name
from .backends import Backend
from .live_steps import observation_of
from .run_inputs import check_profile_matches, fit_profile, sha256
from .run_settings import RunSettings
from .run_store import RunStore, recorded_path
from .watchers import Watchers


class RunPlanning:
    """The coordinator's inputs and planning context: ``exp``, ``job``, ``scen``, ``ctx``, ``predictions``,
    ``tasks``, ``inputs`` (recorded in run.json), ``cluster_record`` and ``reconfigure_cost``."""

    settings: RunSettings
    store: RunStore
    run_dir: Path
    resume: bool
    backend: Backend | None
    say: Callable[[str], None]
    note: Callable[[str], None]  # what the run plans with: shown under -q too
    watchers: Watchers
    cluster_record: dict | None
    reconfigure_cost: dict

    def _load(self) -> None:
        from ..inputs.experiment import load_experiment
        from ..inputs.job import load_job
        from ..inputs.shipped import find_experiment
        from ..planners.base import make_planner

        s = self.settings
        make_planner(s.planner)  # an unknown planner fails before anything starts
        overrides = list(s.overrides) + [f"strategies={s.planner}", f"modes={s.mode}"]
        exp = load_experiment(find_experiment(s.experiment), overrides)
        assert exp.path is not None  # read from a file, never built in memory
        source_profile = str(exp.profile_path)
        check_profile_matches(exp)
        fit_profile(exp, self.run_dir, write=not self.resume, say=self.say)
        self.exp = exp
        self.job = load_job(exp.job_path)
        for t in self.job.task_names:
            check_task_name(t, self.job.path)
        self.inputs = {  # named relative to the run folder (or shipped), never by a machine's absolute path
            "experiment": recorded_path(exp.path, self.run_dir),
            "job": recorded_path(exp.job_path, self.run_dir),
            "profile": recorded_path(exp.profile_path, self.run_dir),
            "profile_source": recorded_path(source_profile, self.run_dir),
            "sha256": {
                k: sha256(p)
                for k, p in (("experiment", exp.path), ("job", exp.job_path), ("profile", exp.profile_path))
            },
        }
        self._build_scenario()

    def _build_scenario(self) -> None:
        """The planning context exactly as `simulate` builds it, on the run's nodes where it has any
        (the experiment's [[node]], or those the backend reads: :meth:`_plan_on_nodes`)."""
        from ..planners.base import make_planner
        from ..simulate.scenario import build_scenario

        s, exp = self.settings, self.exp
        self.scen = build_scenario(exp)
        self.ctx = self.scen.contexts[s.mode]
        self.predictions = None
        if s.mode in self.scen.step_sources:
            # online forecasts and/or a learning model: the context's rows are made step by step from
            # what the run observed (the same StepPredictions `simulate --online/--learn` uses)
            from ..simulate.predictions import refuse_offline
            from ..simulate.runs import step_predictions

            refuse_offline(make_planner(s.planner, exp.planner), "--online" if exp.online else "--learn")
            self.ctx, self.predictions = step_predictions(self.scen, s.mode)
            from ..forecasting.online_select import OnlineSelectSettings

            online = OnlineSelectSettings.from_dict(exp.forecast.online_select_settings())
            # refits off the decision path, used at the steps simulate uses them; a run too short to choose a
            # fitted model starts no fitting worker (it would take CPU from the tasks for nothing)
            if self.predictions.kind == "online" and self.ctx.steps > online.first_fitted_choice_steps:
                self.predictions.source.refit_in_background()
        self.tasks = self.scen.task_names

    def _plan_on_nodes(self) -> None:
        """A backend that knows its nodes (Kubernetes: each node's allocatable CPU less the other pods'
        requests) gives the run its cluster: the experiment's [[node]] tables are checked against them
        (each must name a node there with at least its cpu_millicores free), and without any the
        run plans on the backend's nodes (placement chosen from the predictions, as `simulate` does);
        a resumed run, on those it recorded. Then the planning context is built on them (node-aware
        allocators: no plan asks a node for more than it has), and the backend places every task."""
        from ..inputs.experiment import NodeSettings

        assert self.backend is not None  # made in _prepare
        recorded = self.store.meta.get("cluster") if self.resume else None
        nodes = self.backend.cluster_nodes()
        exp = self.exp
        source: str | None = "run.json"  # where the run's nodes come from
        if recorded:
            exp = dataclasses.replace(
                exp,
                node=[NodeSettings(n["name"], float(n["cpu_millicores"]), list(n["tasks"])) for n in recorded["nodes"]],
            )
        elif nodes is not None and exp.node:
            source = "experiment [[node]]"
            free = dict(nodes)
            for j, n in enumerate(exp.node):
                if n.name not in free:
                    raise InputError(
                        f"node {n.name!r} is not a schedulable node of the cluster (it has: "
                        f"{', '.join(f'{k} {v:.0f}m free' for k, v in nodes) or 'none'})",
                        path=exp.path,
                        field=f"node[{j}].name",
                    )
                if n.cpu_millicores > free[n.name] + 0.5:
                    raise InputError(
                        f"node {n.name!r} has {free[n.name]:.0f}m free (allocatable less the other pods' requests), "
                        f"less than the {n.cpu_millicores:g}m this experiment plans on it",
                        path=exp.path,
                        field=f"node[{j}].cpu_millicores",
                    )
        elif nodes is not None:
            source = f"the {self.backend.name} backend"
            usable = [(name, m) for name, m in nodes if m >= exp.cpu.min_millicores]
            exp = dataclasses.replace(exp, node=[NodeSettings(name, float(m)) for name, m in usable])
            if not usable:
                raise InputError(
                    f"no node of the cluster has the {exp.cpu.min_millicores:g}m one task needs free ("
                    f"{', '.join(f'{k} {v:.0f}m' for k, v in nodes) or 'no schedulable node'})",
                    path=exp.path,
                    field="cpu.min_millicores",
                )
        else:
            source = "experiment [[node]]" if exp.node else None
        try:
            if exp is not self.exp:  # planned on other nodes than the experiment's own: built again on them
                self.exp = exp
                self._build_scenario()
        except InputError as exc:
            if source != f"the {self.backend.name} backend" or not (exc.field or "").startswith("node"):
                raise
            raise InputError(
                f"the cluster's nodes (read by the {self.backend.name} backend) cannot hold the job: {exc.message}",
                path=exc.path,
                field=exc.field,
            ) from None
        cluster = self.scen.cluster
        self.cluster_record = None
        if cluster is None:
            return
        placement = {t: cluster.names[int(cluster.node_of[i])] for i, t in enumerate(self.tasks)}
        self.cluster_record = {
            "source": source,
            "placement": cluster.placement,
            "nodes": [
                {
                    "name": name,
                    "cpu_millicores": float(cluster.capacity_millicores[j]),
                    "tasks": [t for t, where in placement.items() if where == name],
                }
                for j, name in enumerate(cluster.names)
            ],
        }
        self.backend.place(placement)

    def cpu_of(self, level: int) -> float:
        return float(self.scen.cpu.to_millicores(level))

    def _plan_with_method_cost(self) -> None:
        """The planner's reconfiguration penalty is the cost of the method this run uses; every change a
        node-aware plan makes fits its tasks' nodes, so it is made by that method. Each method's cost is
        the experiment's [reconfigure_cost] for it, else (a resumed run) the cost the run recorded, else
        what the backend measures now, else penalty_s. The run's own method is always resolved; the
        other one where this run may use it too: a Kubernetes in-place run recreates a stress-ng task
        whose resize the kubelet refuses. Both are recorded in run.json and the summary."""
        method = self.settings.reconfigure
        assert method is not None and self.backend is not None  # resolved and made in _prepare
        before = self.store.meta.get("reconfigure_cost") if self.resume else None
        before = before if isinstance(before, dict) else {}
        other = "recreate" if method == "in-place" else "in-place"
        may_use_other = self.backend.name == "kubernetes" and method == "in-place"
        costs: dict[str, tuple[float | None, str]] = {}
        for m in (method, other):
            key = m.replace("-", "_") + "_s"  # in_place_s, recreate_s
            cost, source = self.exp.reconfigure_cost.of(m), "experiment [reconfigure_cost]"
            if cost is None and before.get(key) is not None:
                cost, source = float(before[key]), before.get(key.replace("_s", "_source"), "run.json")
            if cost is None and (m == method or may_use_other):
                cost, source = self.backend.measure_reconfigure_cost(m), f"measured by the {self.backend.name} backend"
            if cost is None and m == method:
                cost, source = float(self.exp.penalty_s), "the experiment's penalty_s"
            elif cost is None:
                source = "could not be measured" if may_use_other else "not used by this run's method"
            costs[m] = (cost, source)
        planned, source = costs[method]
        assert planned is not None  # the run's own method always has a cost (penalty_s at worst)
        self.ctx = dataclasses.replace(self.ctx, penalty_s=float(planned))
        self.reconfigure_cost = {"method": method, "planned_s": float(planned), "source": source}
        for m, (cost, src) in costs.items():
            key = m.replace("-", "_")
            self.reconfigure_cost[f"{key}_s"] = None if cost is None else float(cost)
            self.reconfigure_cost[f"{key}_source"] = src
        probe = getattr(self.backend, "in_place_probe", None) or {}
        if method == "in-place" and source.startswith("measured") and "batch_s" in probe:
            # a step's resizes go in two batches (shrinks, then grows), each one round trip however many
            # tasks change: the plan pays both, the cost of a change that moves CPU between tasks
            self.reconfigure_cost["batch_s"] = probe["batch_s"]
            self.reconfigure_cost["batches_per_reconfiguration"] = probe["batches_per_reconfiguration"]
            self.reconfigure_cost["probe_pods"] = probe["pods"]
        article = "an" if method[:1] in "aeiou" else "a"  # an in-place, a recreate
        self.note(f"planning with {article} {method} reconfiguration cost of {planned:.4g} s ({source})")

    def replan(self, loop, step: int, current: np.ndarray, why: Exception) -> np.ndarray:
        """The platform refused step's configuration (a resize the kubelet left pending, or a configuration
        that no longer fits the nodes: someone else's pod took a node's free CPU). Re-read the nodes, build
        the planning context again on what is free for the run (each task kept on its node: in place, a pod
        keeps it), hand it to the loop's planner, and return its configuration for `step` from `current`
        (tasks,). Says so (the run's output, the watchers: "deferred"/"infeasible", then "replanned") and
        records it in run.json's `replans`. Raises `why` again where the run cannot re-plan: the backend
        cannot read its nodes, or the tasks no longer fit the nodes at their minimum CPU; the run then
        stops, resumable. A run whose predictions are made step by step (online, learning) keeps them: the
        rows made so far and what its predictions learned go on in the new context. The planner decides
        from the configuration the step before ran with (as a resumed run replays it), whatever part of
        the refused change was applied (`current`: what the pods hold now)."""
        assert self.backend is not None  # made in _prepare
        refused = getattr(why, "refused", {})
        kind = getattr(why, "kind", None) or ("deferred" if refused else None)
        if kind is not None:
            self.say(f"step {step}: {getattr(why, 'message', None) or why}")
            self.watchers.noticed(kind, getattr(why, "message", None) or str(why), tasks=len(refused), step=step)
        nodes = self.backend.cluster_nodes()
        record = self.cluster_record
        if nodes is None or record is None:
            self.say(f"step {step}: cannot re-plan on the nodes (the backend cannot read them): the run stops")
            raise why
        free = {name: float(m) for name, m in nodes}
        try:
            new_nodes = self._plan_on_free(loop, free)
        except InputError as exc:
            self.say(f"step {step}: the nodes' free CPU no longer holds the tasks ({exc.message}): the run stops")
            raise why from None
        levels = loop.planner.decide(step, loop.current if loop.current is not None else current).levels
        capacity = ", ".join(f"{n.name} {n.cpu_millicores:.0f}m" for n in new_nodes)
        message = (
            f"step {step}: re-planned on the nodes' free CPU ({capacity}) after {kind or 'a refusal'}: "
            f"{self.cpu_of_levels(levels)}"
        )
        self.say(message)
        self.watchers.noticed("replanned", message, step=step, tasks=len(self.tasks))
        replans = list(self.store.meta.get("replans", [])) + [
            {"step": step, "kind": kind or "does_not_fit", "nodes": {n.name: n.cpu_millicores for n in new_nodes}}
        ]
        self.store.write_meta(replans=replans)
        return np.asarray(levels, dtype=np.int64)

    def _plan_on_free(self, loop, free: dict[str, float]) -> list:
        """The planning context built again on `free` (node -> millicores free for the run), each task on the
        node it runs on, handed to the loop's planner; the nodes (NodeSettings). InputError where the nodes
        cannot hold the tasks (at their minimum CPU)."""
        from ..inputs.experiment import NodeSettings

        assert self.cluster_record is not None  # a run on nodes
        placed = {n["name"]: list(n["tasks"]) for n in self.cluster_record["nodes"]}
        new_nodes = [NodeSettings(name, float(free.get(name, 0.0)), tasks) for name, tasks in placed.items()]
        before = self.exp
        # only what is free can be spent: a budget above the nodes' free CPU together is planned down to it
        spendable = spendable_millicores(before.cpu.budget_millicores, [n.cpu_millicores for n in new_nodes])
        cpu = dataclasses.replace(before.cpu, budget_millicores=spendable)
        self.exp = dataclasses.replace(self.exp, node=new_nodes, cpu=cpu)
        try:
            if self.predictions is None:
                self._build_scenario()
            else:
                self._continue_predictions()
        except InputError:
            self.exp = before
            raise
        self.ctx = dataclasses.replace(self.ctx, penalty_s=float(self.reconfigure_cost["planned_s"]))
        loop.planner.reset(self.ctx)
        loop.ctx = self.ctx
        loop.ahead = None  # a decision made ahead on the nodes before is made again
        return new_nodes

    def _continue_predictions(self) -> None:
        """The planning context built again on `exp`'s nodes and budget for a run whose predictions are made
        step by step, which go on in it: the rows made so far are kept (what was known before each step, one
        (tasks, levels, H) row per step), and the same predictions (the online forecaster's history and fits,
        a learning model's corrections, what the planners learn from) fill the new table's next rows. Nothing
        is fitted again, so a re-plan takes no longer than one of precomputed predictions. InputError
        where the nodes cannot hold the tasks."""
        from ..planners.base import OnlineConfigTable
        from ..simulate.scenario import planning_inputs, with_path

        assert self.predictions is not None  # a run whose predictions are made step by step
        exp, made = self.exp, self.ctx.configs
        known = int(getattr(made, "known", 0))
        try:
            _, _, placement, factory = planning_inputs(exp)
            ctx = factory((exp.steps, made.horizon))
        except InputError as exc:
            raise with_path(exc, exp) from exc
        table = ctx.configs
        assert isinstance(table, OnlineConfigTable)  # an empty table: its rows are made step by step
        table.predicted[:known] = made.predicted[:known]
        table.known = known
        ctx.extras.update(self.ctx.extras)  # what the planners learn from (observations), as it stands
        self.predictions.table = table
        self.ctx = ctx
        self.scen = dataclasses.replace(
            self.scen,
            experiment=exp,
            contexts={**self.scen.contexts, self.settings.mode: ctx},
            make_context=factory,
            placement=placement,
            cluster=None if placement is None else placement.cluster,
        )

    def replay(self, loop, records: list[dict]) -> None:
        """A resumed run's logged steps, made again by the loop (`StepLoop.replay`); at each step the run
        re-planned (run.json's `replans`), the context is built again on the nodes it re-planned on first,
        so the loop makes the decisions the run made."""
        replans = {int(r["step"]): r for r in self.store.meta.get("replans", [])} if self.resume else {}
        start = 0
        for step in sorted(s for s in replans if s < len(records)):
            loop.replay((np.asarray(r["levels"], dtype=np.int64), self._observation(r)) for r in records[start:step])
            self._plan_on_free(loop, {k: float(v) for k, v in replans[step]["nodes"].items()})
            if self.predictions is not None and getattr(self.ctx.configs, "known", 0) > step:
                # the step was decided ahead, its predictions made before it was re-planned: the re-plan
                # decided from those, as `replan` did (not made a second time)
                d = loop.planner.decide(step, loop.current)
                levels = np.asarray(d.levels, dtype=np.int64)
                plan = levels[None, :] if d.plan is None else np.asarray(d.plan, dtype=np.int64)
                loop.ahead = (int(d.action), levels, 0.0, plan)
            start = step
        loop.replay((np.asarray(r["levels"], dtype=np.int64), self._observation(r)) for r in records[start:])

    def cpu_of_levels(self, levels: np.ndarray) -> str:
        """'a 400m, b 600m' for a configuration (tasks,)."""
        return ", ".join(f"{t} {self.cpu_of(int(k)):g}m" for t, k in zip(self.tasks, levels, strict=True))

    def _observation(self, rec: dict):
        """What a logged step measured, as the loop learned from it when it ran (`live_steps.observation_of`)."""
        by_task = {x["task"]: x for x in rec["tasks"]}
        tasks = [by_task[name] for name in self.tasks]
        reports = [
            {"duration_s": x["measured_s"], **{k: x[k] for k in ("observed_workload", "next_workload") if k in x}}
            for x in tasks
        ]
        given = np.array([x["workload"] for x in tasks], dtype=np.float64)
        return observation_of(rec["step"], reports, given, rec["step_s"])

    def _given_workloads(self, t: int) -> np.ndarray:
        """What the tasks are told for step t: a task's series; a task without one, which reports its
        workloads, is told the forecast (the task knows the truth, we do not)."""
        given = self.scen.actual_workloads[:, t]
        if not self.scen.known_workloads.all() and self.predictions is not None:
            forecast = np.clip(self.predictions.expected_workloads(t)[:, 0], *self.exp.workload_range)
            given = np.where(self.scen.known_workloads, given, forecast)
        return given


def spendable_millicores(budget_millicores: float, free_millicores: list[float]) -> float:
    """What a run may spend on nodes with `free_millicores` (one per node) free for it: its budget, or their
    sum where that is less (a re-plan after someone else's pod took CPU, and the resume of such a run)."""
    return min(budget_millicores, sum(float(m) for m in free_millicores))
