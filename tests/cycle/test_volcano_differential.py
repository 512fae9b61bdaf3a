"""gangsched against the real Volcano scheduler on random clusters (tools/volcano_differential.py).

The comparison needs a command that runs one session of Volcano on a snapshot; its path is
read from ``GANGSCHED_VOLCANO_ORACLE`` and the comparison is skipped without it. The cluster
generator and the divergence classes are checked whatever the environment.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import gangsched as gs

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    path = ROOT / "tools" / "volcano_differential.py"
    spec = importlib.util.spec_from_file_location("volcano_differential", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


V = _tool()

#: Clusters per configuration in the default run (the campaign runs 1,000 and more).
CLUSTERS = 30


def test_the_generator_is_deterministic_and_makes_valid_varied_clusters() -> None:
    assert V.random_cluster(7) == V.random_cluster(7)
    clusters = [gs.Snapshot.from_dict(V.random_cluster(seed)) for seed in range(60)]
    assert any(len({n.allocatable for n in s.nodes}) > 1 for s in clusters)  # mixed nodes
    assert any(len(s.nodes) > 1 and len({n.allocatable for n in s.nodes}) == 1 for s in clusters)
    assert any(q.capability for s in clusters for q in s.queues)
    assert any(q.guarantee for s in clusters for q in s.queues)
    assert any(len({q.weight for q in s.queues}) > 1 for s in clusters)
    assert any(j.min_task_member for s in clusters for j in s.jobs)
    assert any(t.best_effort for s in clusters for t in s.tasks)
    assert any(len({j.priority for j in s.jobs}) > 1 for s in clusters)
    assert any(t.phase.value == "Running" for s in clusters for t in s.tasks)


def test_features_decorate_the_same_base_cluster() -> None:
    for seed in range(40):
        base = V.random_cluster(seed)
        for features in (("node_affinity",), ("task_topology",)):
            dressed = V.random_cluster(seed, features)
            assert dressed == V.random_cluster(seed, features)
            assert [n["name"] for n in dressed["nodes"]] == [n["name"] for n in base["nodes"]]
            assert [t["request"] for t in dressed["tasks"]] == [t["request"] for t in base["tasks"]]
            gs.Snapshot.from_dict(dressed)  # valid


def test_the_affinity_generator_makes_required_and_preferred_terms_over_labels_and_names() -> None:
    clusters = [gs.Snapshot.from_dict(V.random_cluster(s, ("node_affinity",))) for s in range(80)]
    affinities = [t.node_affinity for c in clusters for t in c.tasks if t.node_affinity]
    assert all(n.labels for c in clusters for n in c.nodes)
    assert any(a.required for a in affinities) and any(a.preferred for a in affinities)
    terms = [t for a in affinities for t in a.required] + [
        p.preference for a in affinities for p in a.preferred
    ]
    ops = {r.operator for t in terms for r in t.match_expressions}
    assert ops == {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}
    assert any(t.match_fields for t in terms)
    # some pending task is kept off a node by its required terms
    assert any(
        not a.allows(n.name, n.labels)
        for c in clusters
        for t in c.tasks
        if (a := t.node_affinity) is not None and a.required
        for n in c.nodes
    )


def test_the_topology_generator_names_the_jobs_roles_and_never_contradicts_itself() -> None:
    clusters = [gs.Snapshot.from_dict(V.random_cluster(s, ("task_topology",))) for s in range(80)]
    topologies = [
        (c, j, j.task_topology) for c in clusters for j in c.jobs if j.task_topology is not None
    ]
    assert any(t.affinity for _, _, t in topologies)
    assert any(t.anti_affinity for _, _, t in topologies)
    assert any(t.task_order for _, _, t in topologies)
    for c, j, t in topologies:
        roles = {task.role for task in c.tasks if task.job == j.name}
        assert t.roles <= roles
        selfish = {g[0] for g in t.affinity if len(g) == 1}
        assert not selfish & {g[0] for g in t.anti_affinity if len(g) == 1}


def test_placements_leave_best_effort_tasks_out() -> None:
    s = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi"}}],
            "queues": [{"name": "default"}],
            "jobs": [{"name": "j", "queue": "default", "min_available": 1, "phase": "Inqueue"}],
            "tasks": [
                {"name": "j-0", "job": "j", "request": {"cpu": 1}},
                {"name": "j-1", "job": "j", "request": {}},
            ],
        }
    )
    config = gs.Config.from_volcano_yaml(V.CONFIGS["default"])
    assert V.gangsched_outcome(s, config, True) == {"j": (2, 0, 0, "Running", ("n0",))}
    assert V.gangsched_outcome(s, config) == {"j": (2, 0, 0, "Running")}


def test_a_divergence_is_classed_by_the_first_job_and_outcome_that_differ() -> None:
    ours = {"a": (1, 0, 0, "Running"), "b": (0, 0, 0, "Inqueue")}
    assert V.divergence_class(ours, {**ours, "b": (0, 1, 0, "Inqueue")}) == (
        "pipelined: gangsched<volcano"
    )
    assert V.divergence_class(ours, {**ours, "a": (1, 0, 0, "Unknown")}) == (
        "phase: gangsched Running / volcano Unknown"
    )


def test_the_class_is_the_one_most_volcano_runs_give_whatever_their_order() -> None:
    # Volcano's runs can disagree with each other (campaign cluster 449 changed class with
    # the run read first); the class is read from every run: the most frequent, ties by name.
    ours = {"a": (1, 0, 0, "Running"), "b": (0, 0, 0, "Inqueue")}
    piped = {**ours, "b": (0, 1, 0, "Inqueue")}
    phase = {**ours, "a": (1, 0, 0, "Unknown")}
    bound = {**ours, "b": (1, 0, 0, "Inqueue")}
    for runs in ([phase, piped, piped], [piped, phase, piped], [piped, piped, phase]):
        assert V.runs_class(ours, runs) == "pipelined: gangsched<volcano"
    for runs in ([phase, bound], [bound, phase]):
        assert V.runs_class(ours, runs) == "bound: gangsched<volcano"


def test_volcano_taking_a_gang_below_its_minimum_is_its_own_class() -> None:
    s = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": "n0", "allocatable": {"cpu": 4, "memory": "8Gi"}}],
            "queues": [{"name": "default"}],
            "jobs": [{"name": "g", "queue": "default", "min_available": 2, "phase": "Running"}],
            "tasks": [
                {
                    "name": f"g-{i}",
                    "job": "g",
                    "request": {"cpu": 1},
                    "phase": "Running",
                    "node": "n0",
                }
                for i in range(2)
            ],
        }
    )
    # Volcano took g below its minimum to reserve p's task, where gangsched evicted nothing:
    # the tier walk (both walk now, so this class names a walk that differs)
    ours = {"g": (0, 0, 0, "Running"), "p": (0, 0, 0, "Inqueue")}
    walked = {"g": (0, 0, 1, "Unknown"), "p": (0, 1, 0, "Inqueue")}
    assert V.divergence_class(ours, walked, s) == V.TIER_WALK
    assert V.verdict_of(V.TIER_WALK) is None
    # Volcano evicted and reserved nothing for it: this build's reclaim kept its evictions
    kept = {"g": (0, 0, 1, "Unknown"), "p": (0, 0, 0, "Inqueue")}
    assert V.divergence_class(ours, kept, s) == V.KEPT_EVICTIONS
    # gangsched took g below its minimum where Volcano did not: a symptom, which the
    # campaign names the v1.11 walk only when gangsched with this build's walk agrees
    assert V.divergence_class(walked, ours, s) == V.GANGSCHED_BREAKS
    assert V.verdict_of(V.GANGSCHED_BREAKS) is None
    assert V.verdict_of(V.WALK_ON_EMPTY) is not None
    assert V.verdict_of(V.KEPT_EVICTIONS) is not None


def test_a_class_left_with_a_later_change_emulated_has_both_verdicts() -> None:
    both = V.verdict_of(f"later: preempt-queue-allocatable; {V.ELASTIC_CLAIM}")
    assert both is not None
    assert V.LATER["preempt-queue-allocatable"] in both and V.VERDICTS[V.ELASTIC_CLAIM] in both
    assert V.verdict_of(f"later: preempt-queue-allocatable; {V.TIER_WALK}") is None
    assert V.verdict_of("later: nothing-known; evicted: gangsched<volcano") is None


def test_a_class_of_three_parts_has_a_verdict_only_when_each_part_has_one() -> None:
    three = V.verdict_of(f"later: reclaim-keep-queue; {V.RECLAIM_SHORT_QUEUE}; {V.PARTIAL_GANG}")
    assert three is not None and three.startswith("each: ")
    for part in (V.LATER["reclaim-keep-queue"], V.VERDICTS[V.RECLAIM_SHORT_QUEUE]):
        assert part in three
    assert V.verdict_of(f"later: reclaim-keep-queue; {V.RECLAIM_SHORT_QUEUE}; jobs differ") is None


def test_a_job_left_running_on_releasing_tasks_is_its_own_class() -> None:
    # every figure equal, the job's tasks evicted by both: only the phase differs
    ours = {"a": (0, 0, 1, "Running"), "b": (0, 1, 0, "Inqueue")}
    theirs = {"a": (0, 0, 1, "Pending"), "b": (0, 1, 0, "Inqueue")}
    assert V.divergence_class(ours, theirs) == V.RELEASING_SCHEDULED
    assert V.verdict_of(V.RELEASING_SCHEDULED) is not None
    # nothing evicted: a phase difference of another kind
    calm = {"a": (0, 0, 0, "Running")}
    assert V.divergence_class(calm, {"a": (0, 0, 0, "Pending")}) == (
        "phase: gangsched Running / volcano Pending"
    )


@pytest.mark.skipif(
    not os.environ.get(V.ORACLE_ENV),
    reason=f"needs the Volcano oracle command: set {V.ORACLE_ENV} to its path",
)
@pytest.mark.parametrize("config", sorted(V.CONFIGS))
def test_every_divergence_from_volcano_has_a_verdict(config: str) -> None:
    oracle = os.environ[V.ORACLE_ENV]
    missing = [f for f in V.FEATURES.get(config, ()) if f not in V.oracle_features(oracle)]
    if missing:
        pytest.skip(f"the Volcano command at {V.ORACLE_ENV} does not pass {missing} to Volcano")
    results = V.campaign(oracle, {config: V.CONFIGS[config]}, CLUSTERS, seed=11)
    res = results[config]
    assert res.clusters + res.skipped == CLUSTERS
    unjudged = {cls: res.examples[cls] for cls in res.classes if V.verdict_of(cls) is None}
    assert not unjudged, V.table(results)


def test_a_best_effort_claim_evicts_nothing() -> None:
    # Campaign cluster 11000057: q0's job j1 has two tasks placed and two best-effort tasks
    # pending while q1 holds more than its deserved share. Volcano's 2023 reclaim evicted two
    # running q1 tasks to reserve the best-effort ones; since v1.14.0 reclaim counts the node's
    # idle room, which an empty request always fits, so nothing is evicted, and backfill binds
    # them (as here).
    s = gs.Snapshot.from_dict(V.random_cluster(11000057))
    d = gs.schedule(s, gs.Config.from_volcano_yaml(V.CONFIGS["preemption"]))
    assert d.evictions == ()
    assert {"j1-2", "j1-3"} <= {b.task for b in d.binds}
    ours = V.gangsched_outcome(s, gs.Config.from_volcano_yaml(V.CONFIGS["preemption"]))
    theirs = {**ours, "j1": (2, 2, 0, "Running")}
    assert V.divergence_class(ours, theirs, s) == V.BEST_EFFORT_CLAIM


def test_a_job_with_nothing_bound_stays_inqueue() -> None:
    # Campaign cluster 582 (node affinity): j0's master fits no node (its required affinity
    # names the full node), its best-effort worker would fit. Volcano's 2023 backfill
    # allocated the worker without binding it (the gang is not ready) and reported j0
    # Running; since 15a6a5a65 (v1.13.0) a PodGroup is Running only once enough pods are
    # scheduled. gangsched binds nothing of j0 and keeps it Inqueue.
    s = gs.Snapshot.from_dict(V.random_cluster(582, ("node_affinity",)))
    d = gs.schedule(s, gs.Config.from_volcano_yaml(V.CONFIGS["affinity"]))
    assert not [b for b in d.binds if b.task.startswith("j0-")]
    assert d.jobs["j0"].phase == "Inqueue"


def test_a_gang_whose_claim_exceeds_its_queues_share_reclaims_nothing() -> None:
    # Campaign cluster 368: j0 (queue q0, two 1-GPU tasks, min_available 2) could take the
    # GPUs of j1's surplus task (queue q2, above its deserved GPUs), but q0 deserves 1.71 GPUs,
    # so its queue admits one task of the gang, not two. Volcano's 2023 reclaim evicted j1's
    # task, pipelined j0's first task and, refused the second, kept both (j0 stays below its
    # minimum); since v1.14.0 reclaim commits only a pipelined job. gangsched evicts nothing.
    # (With Volcano's tier walk, preempt first takes j1's task for j2 in q2, which Volcano's
    # 2023 preempt could not do, refusing j2's second node for want of victims, 5939cc189;
    # the reclaim shown here is read with every victim rule named.)
    s = gs.Snapshot.from_dict(V.random_cluster(368))
    conf = gs.Config.from_volcano_yaml(
        V.CONFIGS["preemption"]
        + "configurations:\n- name: preempt\n  arguments:\n    allVictimRules: true\n"
    )
    d = gs.schedule(s, conf)
    assert d.evictions == () and d.pipelined == ()
    ours = V.gangsched_outcome(s, conf)
    theirs = {**ours, "j0": (0, 1, 0, "Inqueue"), "j1": (0, 0, 1, "Running")}
    assert V.partial_gang(ours, theirs, s) == "j0"
    assert V.divergence_class(ours, theirs, s) == V.PARTIAL_GANG


def test_a_job_at_its_minimum_reclaims_nothing() -> None:
    # Campaign cluster 395: j2 (queue q1, min_available 1) has two tasks bound by allocate and
    # one pending. Volcano's 2023 reclaim took any job with pending tasks and evicted j4's
    # surplus task (queue q0) for it; since a561215e0 (v1.11.0) only a starving job reclaims.
    # gangsched claims only up to the minimum: j2 reserves nothing, nothing is evicted.
    s = gs.Snapshot.from_dict(V.random_cluster(395))
    conf = gs.Config.from_volcano_yaml(V.CONFIGS["preemption"])
    d = gs.schedule(s, conf)
    assert d.evictions == () and d.pipelined == ()
    assert sum(b.task.startswith("j2-") for b in d.binds) == 2
    ours = V.gangsched_outcome(s, conf)
    theirs = {**ours, "j2": (2, 1, 0, "Running"), "j4": (0, 0, 1, "Running")}
    assert V.elastic_claim(ours, theirs, s) == "j2"
    assert V.divergence_class(ours, theirs, s) == V.ELASTIC_CLAIM


@pytest.mark.parametrize(
    ("seed", "config", "expected"),
    [
        # Volcano's placements (its runs agree on the nodes of every job but best-effort
        # tasks). gangsched ordered a job whose role minimum only best-effort tasks could not
        # meet as not ready, where Volcano's gang job order counts tasks, and placed the jobs
        # in another order.
        (340, "affinity", {"j0": ("n0", "n2"), "j2": ("n3",), "j3": ("n0", "n3", "n3")}),
        (340, "task-topology", {"j0": ("n0", "n0"), "j2": ("n0",), "j3": ("n3", "n3", "n3")}),
        (
            821,
            "task-topology",
            {
                "j0": ("n0", "n0", "n0"),
                "j2": ("n3",),
                "j3": ("n1", "n1", "n1"),
                "j4": ("n0", "n1", "n3"),
                "j5": ("n1", "n2", "n3"),
            },
        ),
    ],
)
def test_jobs_are_placed_in_volcanos_gang_job_order_by_count(
    seed: int, config: str, expected: dict[str, tuple[str, ...]]
) -> None:
    s = gs.Snapshot.from_dict(V.random_cluster(seed, V.FEATURES[config]))
    out = V.gangsched_outcome(s, gs.Config.from_volcano_yaml(V.CONFIGS[config]), True)
    assert {job: o[4] for job, o in out.items() if o[4]} == expected


@pytest.mark.parametrize("selection", ["cheapest", "volcano"])
def test_the_tier_walk_on_every_node_at_once_decides_as_node_by_node(
    monkeypatch: pytest.MonkeyPatch, selection: str
) -> None:
    # Volcano's tier walk is run on every node at once for the built-in victim plugins (drf
    # among them, asked once for every node) and for the answers Volcano's preempt loop
    # gives that judge each node alone (its gang and drf); with that path switched off it runs
    # node by node, plugin answer by plugin answer, as Volcano. Both the search's walk
    # (victimSelection: cheapest, and reclaim) and Volcano's loop (volcano, the YAML's).
    from gangsched.actions.victims import volcano_play
    from gangsched.framework import dispatch

    conf = gs.Config.from_volcano_yaml(
        V.CONFIGS["preemption"]
        + f"configurations:\n- name: preempt\n  arguments:\n    victimSelection: {selection}\n"
    )
    evicted = at_once = 0
    walk_by_mask = dispatch._walk_by_mask

    def counted(*args: Any) -> Any:
        nonlocal at_once
        at_once += 1
        return walk_by_mask(*args)

    for seed in range(200):
        s = gs.Snapshot.from_dict(V.random_cluster(seed))
        with monkeypatch.context() as m:
            m.setattr(dispatch, "_walk_by_mask", counted)
            fast = gs.schedule(s, conf)
        with monkeypatch.context() as m:
            m.setattr(dispatch, "ONE_BY_ONE_VICTIMS", frozenset())
            m.setattr(dispatch, "GROUP_BY_GROUP_VICTIMS", frozenset())
            m.setattr(volcano_play, "_BY_NODE", frozenset())
            m.setattr(dispatch, "_walk_by_mask", None)
            plain = gs.schedule(s, conf)
        assert fast.to_dict() == plain.to_dict(), seed
        evicted += bool(fast.evictions)
    assert evicted >= 15
    assert at_once >= 100


def test_volcano_loops_drf_answer_for_many_nodes_is_each_nodes_answer() -> None:
    # The per-task drf answer about every node's candidates at once equals the rule stated
    # plainly: per (job, node), candidates in victim order, each kept while its job's share
    # after it and the earlier ones go stays at or above the preemptor's (within 1e-6).
    import numpy as np

    from gangsched.actions.victims import rules, volcano_play
    from gangsched.scheduler import open_session
    from gangsched.session.core import TaskState

    conf = gs.Config.from_volcano_yaml(V.CONFIGS["preemption"])
    kept = several = 0
    for seed in range(120):
        ssn = open_session(gs.Snapshot.from_dict(V.random_cluster(seed)), conf)
        cands = np.flatnonzero(
            (ssn.task_state == TaskState.RUNNING) | (ssn.task_state == TaskState.BOUND)
        ).astype(np.int64)
        inv = rules.inverse_totals(ssn)
        order = volcano_play._victim_ranks(ssn, cands)
        for task in np.flatnonzero(ssn.task_state == TaskState.PENDING).tolist():
            job = int(ssn.task_job[task])
            got = volcano_play._drf_answer(ssn, job, task, cands, order, inv)
            mine = float(((ssn.job_allocated[job] + ssn.task_req[task]) * inv).max(initial=0.0))
            want: list[int] = []
            groups: dict[tuple[int, int], list[int]] = {}
            for t in cands.tolist():
                groups.setdefault((int(ssn.task_job[t]), int(ssn.task_node[t])), []).append(t)
            for (j, _), group in groups.items():
                left = ssn.job_allocated[j].astype(np.int64)
                for t in sorted(group, key=order.__getitem__):
                    left = left - ssn.task_req[t]
                    theirs = float((left * inv).max(initial=0.0))
                    if mine < theirs or abs(mine - theirs) <= 1e-6:
                        want.append(t)
            assert got.tolist() == sorted(want), (seed, task)
            kept += len(want)
            several += len(want) < sum(len(g) for g in groups.values() if len(g) > 1)
    assert kept >= 200 and several >= 50
    # victim order is not the snapshot's order here (names, then sizes that differ): x's
    # candidates go x-0 (1 cpu), x-1 (4 cpu), x-2 (2 cpu) and drf keeps a prefix of them
    s = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": "n0", "allocatable": {"cpu": 16, "memory": "64Gi"}}],
            "queues": [{"name": "q"}],
            "jobs": [
                {"name": "x", "queue": "q", "min_available": 1, "phase": "Running"},
                {"name": "p", "queue": "q", "min_available": 1, "phase": "Inqueue"},
            ],
            "tasks": [
                {"name": n, "job": "x", "request": {"cpu": c}, "phase": "Running", "node": "n0"}
                for n, c in (("x-2", 2), ("x-1", 4), ("x-0", 1))
            ]
            + [{"name": "p-0", "job": "p", "request": {"cpu": 6}}],
        }
    )
    ssn = open_session(s, conf)
    x = np.flatnonzero(ssn.task_job == s.job_index["x"]).astype(np.int64)
    order = volcano_play._victim_ranks(ssn, x)
    task = s.task_index["p-0"]
    got = volcano_play._drf_answer(ssn, s.job_index["p"], task, x, order, rules.inverse_totals(ssn))
    # x holds 7 of 16 cpu; p would hold 6: x-0 goes (6 left >= 6), x-1 would leave 2
    assert [s.tasks[t].name for t in got.tolist()] == ["x-0"]


def test_the_2023_walk_diagnostic_ends_the_walk_where_this_build_did() -> None:
    # low (priority 1) runs at its minimum; high (priority 2) waits. priority answers low's
    # tasks, gang none: today's walk hands over to drf, which takes one; this build's walk
    # (its init flag) ended with no victims.
    s = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": "n0", "allocatable": {"cpu": 8, "memory": "32Gi"}}],
            "queues": [{"name": "q"}],
            "jobs": [
                {
                    "name": "low",
                    "queue": "q",
                    "min_available": 2,
                    "priority": 1,
                    "phase": "Running",
                },
                {
                    "name": "high",
                    "queue": "q",
                    "min_available": 1,
                    "priority": 2,
                    "phase": "Inqueue",
                },
            ],
            "tasks": [
                {
                    "name": f"low-{i}",
                    "job": "low",
                    "request": {"cpu": 4},
                    "phase": "Running",
                    "node": "n0",
                }
                for i in range(2)
            ]
            + [{"name": "high-0", "job": "high", "request": {"cpu": 4}}],
        }
    )
    conf = gs.Config.from_volcano_yaml(V.CONFIGS["preemption"])
    assert V.gangsched_outcome(s, conf)["low"][2] == 1
    assert V.gangsched_outcome(s, conf, walk_2023=True)["low"][2] == 0
    assert V.gangsched_outcome(s, conf)["low"][2] == 1  # the diagnostic leaves nothing behind


def test_the_2023_proportion_diagnostic_offers_nothing_of_a_queue_holding_less() -> None:
    # v's gang is at its minimum, so proportion alone chooses reclaim's victims; v holds 3Gi,
    # r's task asks 8Gi: this build's proportion (LessPartly) offered none of v's tasks.
    def task(name: str, cpu: int, memory: str, running: bool) -> dict[str, Any]:
        where = {"phase": "Running", "node": "n0"} if running else {}
        return {"name": name, "job": name[:-2], "request": {"cpu": cpu, "memory": memory}, **where}

    s = gs.Snapshot.from_dict(
        {
            "nodes": [{"name": "n0", "allocatable": {"cpu": 8, "memory": "32Gi", "pods": 110}}],
            "queues": [{"name": "r"}, {"name": "v"}],
            "jobs": [
                {"name": "v", "queue": "v", "min_available": 3, "phase": "Running"},
                {"name": "r1", "queue": "r", "min_available": 1, "phase": "Inqueue"},
            ],
            "tasks": [task(f"v-{i}", 2, "1Gi", True) for i in range(3)]
            + [task("r1-0", 4, "8Gi", False)],
        }
    )
    conf = gs.Config.from_volcano_yaml(V.CONFIGS["preemption"])
    assert V.gangsched_outcome(s, conf)["v"][2] == 1
    assert V.gangsched_outcome(s, conf, walk_2023=True)["v"][2] == 1
    assert V.gangsched_outcome(s, conf, proportion_2023=True)["v"][2] == 0
    assert V.gangsched_outcome(s, conf)["v"][2] == 1  # the diagnostic leaves nothing behind
    both = V.verdict_of(f"{V.WALK_ON_EMPTY}; {V.RECLAIM_SHORT_QUEUE}")
    assert both is not None and "975277f55" in both
