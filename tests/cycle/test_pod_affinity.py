"""Pod affinity, pod anti-affinity and topology spread: Kubernetes' documented behaviour,
scenario by scenario (InterPodAffinity and PodTopologySpread), through whole cycles."""

from __future__ import annotations

from typing import Any

import pytest

import gangsched as gs
from gangsched.config import Config
from gangsched.errors import SnapshotError
from gangsched.scheduler import open_session, schedule
from gangsched.session.pod_constraints import pod_rules
from gangsched.testing.invariants import InvariantViolation, check_cycle, check_pod_constraints

CONFIG = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}],
            [{"name": "predicates"}, {"name": "nodeorder"}],
        ],
    }
)


def node(name: str, cpu: int = 8, **labels: str) -> dict[str, Any]:
    return {
        "name": name,
        "allocatable": {"cpu": cpu, "memory": "32Gi", "pods": 110},
        "labels": labels,
    }


def job(name: str, n: int, min_available: int | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "queue": "default",
        "min_available": n if min_available is None else min_available,
        "phase": "Inqueue",
        **extra,
    }


def tasks(name: str, n: int, cpu: int = 1, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"name": f"{name}-{i}", "job": name, "request": {"cpu": cpu}, **extra} for i in range(n)
    ]


def running(name: str, job_name: str, node_name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "job": job_name,
        "request": {"cpu": 1},
        "phase": "Running",
        "node": node_name,
        **extra,
    }


def snap(
    nodes: list[dict[str, Any]], jobs: list[dict[str, Any]], ts: list[dict[str, Any]]
) -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {"nodes": nodes, "queues": [{"name": "default"}], "jobs": jobs, "tasks": ts}
    )


def term(key: str, **match: str) -> dict[str, Any]:
    return {"topology_key": key, "label_selector": {"match_labels": match}}


def run(s: gs.Snapshot, config: Config = CONFIG) -> gs.Decisions:
    d = schedule(s, config)
    check_cycle(s, d, config)
    return d


def placed(d: gs.Decisions) -> dict[str, str]:
    return {b.task: b.node for b in (*d.binds, *d.pipelined)}


RACKS = [node("n0", rack="r1"), node("n1", rack="r1"), node("n2", rack="r2"), node("n3", rack="r3")]


# -------------------------------------------------------------------- anti-affinity


def test_required_anti_affinity_inside_a_gang_spreads_its_replicas_over_racks() -> None:
    anti = {"required": [term("rack", app="web")]}
    s = snap(RACKS, [job("web", 3)], tasks("web", 3, labels={"app": "web"}, pod_anti_affinity=anti))
    where = placed(run(s))
    racks = {RACKS[int(n[1])]["labels"]["rack"] for n in where.values()}
    assert len(where) == 3 and racks == {"r1", "r2", "r3"}


def test_anti_affinity_gang_larger_than_the_racks_is_not_placed_and_says_why() -> None:
    anti = {"required": [term("rack", app="web")]}
    s = snap(RACKS, [job("web", 4)], tasks("web", 4, labels={"app": "web"}, pod_anti_affinity=anti))
    d = run(s)
    assert d.binds == ()
    msg = d.jobs["web"].message
    assert "anti-affinity with pod 'web-0' on topology rack=r1" in msg
    assert "0/4 nodes are available" in msg


def test_running_pods_anti_affinity_keeps_a_matching_pod_out_of_its_domain() -> None:
    # Symmetry: the incoming pod carries no constraint; the running one does.
    guard = running(
        "guard-0",
        "guard",
        "n0",
        labels={"app": "guard"},
        pod_anti_affinity={"required": [term("rack", app="web")]},
    )
    s = snap(
        RACKS,
        [job("guard", 1, phase="Running"), job("web", 2)],
        [guard, *tasks("web", 2, labels={"app": "web"})],
    )
    d = run(s)
    assert set(placed(d).values()) <= {"n2", "n3"}
    assert len(placed(d)) == 2
    # A pod the term does not match is not kept out.
    s2 = snap(
        RACKS[:2],
        [job("guard", 1, phase="Running"), job("db", 1)],
        [guard, *tasks("db", 1, labels={"app": "db"})],
    )
    assert placed(run(s2))["db-0"] in {"n0", "n1"}  # rack r1


def test_symmetric_anti_affinity_is_explained_by_the_running_pod() -> None:
    guard = running(
        "guard-0",
        "guard",
        "n0",
        labels={"app": "guard"},
        pod_anti_affinity={"required": [term("rack", app="web")]},
    )
    s = snap(
        RACKS[:2],
        [job("guard", 1, phase="Running"), job("web", 1)],
        [guard, *tasks("web", 1, labels={"app": "web"})],
    )
    d = run(s)
    assert d.binds == ()
    assert "anti-affinity of pod 'guard-0' on topology rack=r1" in d.task_reasons["web-0"]


def test_anti_affinity_ignores_nodes_without_the_topology_key() -> None:
    nodes = [node("a", rack="r1"), node("b")]
    anti = {"required": [term("rack", app="web")]}
    s = snap(nodes, [job("web", 3)], tasks("web", 3, labels={"app": "web"}, pod_anti_affinity=anti))
    where = placed(run(s))
    # one replica on the rack, the others on the node outside every rack
    assert sorted(where.values()) == ["a", "b", "b"]


def test_anti_affinity_looks_in_the_pods_own_namespace_unless_told() -> None:
    other = running("x-0", "x", "n0", labels={"app": "web"}, namespace="other")
    anti = {"required": [term("rack", app="web")]}
    base = [node("n0", rack="r1")]
    s = snap(
        base,
        [job("x", 1, phase="Running"), job("web", 1)],
        [other, *tasks("web", 1, labels={"app": "web"}, pod_anti_affinity=anti)],
    )
    assert placed(run(s)) == {"web-0": "n0"}
    told = {"required": [{**term("rack", app="web"), "namespaces": ["other"]}]}
    s = snap(
        base,
        [job("x", 1, phase="Running"), job("web", 1)],
        [other, *tasks("web", 1, labels={"app": "web"}, pod_anti_affinity=told)],
    )
    assert placed(run(s)) == {}


def test_releasing_pods_still_count_for_anti_affinity() -> None:
    leaving = {**running("old-0", "old", "n0", labels={"app": "web"}), "phase": "Releasing"}
    anti = {"required": [term("rack", app="web")]}
    s = snap(
        RACKS[:3],
        [job("old", 1, phase="Running"), job("web", 1)],
        [leaving, *tasks("web", 1, labels={"app": "web"}, pod_anti_affinity=anti)],
    )
    assert placed(run(s)) == {"web-0": "n2"}


@pytest.mark.parametrize(
    ("expr", "lands"),
    [
        ({"key": "app", "operator": "In", "values": ["web", "api"]}, "r2"),
        ({"key": "app", "operator": "NotIn", "values": ["web"]}, "r1"),
        ({"key": "tier", "operator": "Exists"}, "r2"),
        ({"key": "tier", "operator": "DoesNotExist"}, "r1"),
    ],
)
def test_selector_expressions(expr: dict[str, Any], lands: str) -> None:
    # Rack r1 (n0, n1) is the least loaded but for the web pod on n0: the new pod goes there
    # unless its term matches the web pod.
    # A running web pod (tier=front) on rack r1; the new pod avoids what its term matches.
    other = running("w-0", "w", "n0", labels={"app": "web", "tier": "front"})
    anti = {"required": [{"topology_key": "rack", "label_selector": {"match_expressions": [expr]}}]}
    s = snap(
        RACKS[:3],
        [job("w", 1, phase="Running"), job("p", 1)],
        [other, *tasks("p", 1, pod_anti_affinity=anti)],
    )
    rack = {"n0": "r1", "n1": "r1", "n2": "r2"}
    assert rack[placed(run(s))["p-0"]] == lands


# -------------------------------------------------------------------- affinity


def test_required_affinity_goes_to_the_domain_of_a_matching_pod() -> None:
    nodes = [node("a", zone="z1"), node("b", zone="z2"), node("c", zone="z2")]
    db = running("db-0", "db", "c", labels={"app": "db"})
    aff = {"required": [term("zone", app="db")]}
    s = snap(
        nodes,
        [job("db", 1, phase="Running"), job("app", 2)],
        [db, *tasks("app", 2, pod_affinity=aff)],
    )
    assert set(placed(run(s)).values()) <= {"b", "c"}


def test_required_affinity_without_any_matching_pod_is_unschedulable() -> None:
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    aff = {"required": [term("zone", app="db")]}
    s = snap(nodes, [job("app", 1)], tasks("app", 1, pod_affinity=aff))
    d = run(s)
    assert d.binds == ()
    assert "pod affinity: no pod matching app=db on topology zone=z1" in d.task_reasons["app-0"]


def test_a_pod_affine_to_itself_may_go_first_and_its_group_follows() -> None:
    # No cache pod anywhere: the first goes to any node with the key (the lowest-index one
    # on a tie), the others must join its zone, where three fit.
    nodes = [node("a", cpu=3, zone="z1"), node("b", cpu=3, zone="z2"), node("c", cpu=3, zone="z2")]
    aff = {"required": [term("zone", app="cache")]}
    s = snap(
        nodes, [job("cache", 4, 1)], tasks("cache", 4, labels={"app": "cache"}, pod_affinity=aff)
    )
    d = run(s)
    assert sorted(placed(d).values()) == ["a", "a", "a"]
    why = d.task_reasons["cache-3"]
    assert "2 node(s) failed pod affinity: no pod matching app=cache on topology zone=z2" in why
    assert "1 Insufficient cpu" in why
    # A pod that does not match its own term may not go first.
    s = snap(nodes, [job("x", 1)], tasks("x", 1, labels={"app": "x"}, pod_affinity=aff))
    assert placed(run(s)) == {}


def test_affinity_refuses_nodes_lacking_the_topology_key() -> None:
    nodes = [node("a"), node("b", zone="z1")]
    aff = {"required": [term("zone", app="cache")]}
    s = snap(nodes, [job("cache", 2)], tasks("cache", 2, labels={"app": "cache"}, pod_affinity=aff))
    assert set(placed(run(s)).values()) == {"b"}
    s = snap(
        [node("a")], [job("cache", 1)], tasks("cache", 1, labels={"app": "cache"}, pod_affinity=aff)
    )
    d = run(s)
    assert "node lacks topology key zone" in d.task_reasons["cache-0"]


def test_hostname_topology_reads_the_node_name() -> None:
    anti = {"required": [term("kubernetes.io/hostname", app="web")]}
    s = snap(RACKS, [job("web", 4)], tasks("web", 4, labels={"app": "web"}, pod_anti_affinity=anti))
    assert sorted(placed(run(s)).values()) == ["n0", "n1", "n2", "n3"]


def test_pod_affinity_filter_can_be_switched_off() -> None:
    off = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [
                [{"name": "gang"}],
                [{"name": "predicates", "arguments": {"predicate.PodAffinityEnable": False}}],
            ],
        }
    )
    anti = {"required": [term("rack", app="web")]}
    s = snap(
        RACKS[:1], [job("web", 2)], tasks("web", 2, labels={"app": "web"}, pod_anti_affinity=anti)
    )
    assert len(placed(schedule(s, off))) == 2


# -------------------------------------------------------------------- gang placers


@pytest.mark.parametrize("placer", ["greedy", "cpsat"])
def test_a_placer_gang_under_pod_constraints_is_placed_one_by_one(placer: str) -> None:
    config = Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "backfill"],
            "configurations": {"allocate": {"placer": placer}},
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [{"name": "predicates"}, {"name": "nodeorder"}],
            ],
        }
    )
    anti = {"required": [term("rack", app="web")]}
    s = snap(RACKS, [job("web", 3)], tasks("web", 3, labels={"app": "web"}, pod_anti_affinity=anti))
    d = run(s, config)
    assert len({RACKS[int(n[1])]["labels"]["rack"] for n in placed(d).values()}) == 3
    if placer == "greedy":  # without a topology, gangs go task by task, not to a placer
        assert "web" not in d.placements
        return
    # The exact placer is not asked: its answer is not claimed optimal for this gang.
    assert d.placements["web"] == gs.PlacementInfo(
        placer="cpsat", status="GREEDY", gap=None, fallback=True
    )


def test_a_hard_topology_gang_under_anti_affinity_stays_in_one_domain() -> None:
    nodes = [node(f"n{i}", rack=f"r{i}") for i in range(4)]
    hyper = [
        {"name": "s0", "tier": 1, "members": ["n0", "n1"]},
        {"name": "s1", "tier": 1, "members": ["n2", "n3"]},
    ]
    anti = {"required": [term("rack", app="web")]}
    s = gs.Snapshot.from_dict(
        {
            "nodes": nodes,
            "hypernodes": hyper,
            "queues": [{"name": "default"}],
            "jobs": [job("web", 2, network_topology={"mode": "hard", "highest_tier_allowed": 1})],
            "tasks": tasks("web", 2, labels={"app": "web"}, pod_anti_affinity=anti),
        }
    )
    d = run(s)
    assert sorted(placed(d).values()) in (["n0", "n1"], ["n2", "n3"])
    assert d.placements["web"].status == "GREEDY"
    # three replicas cannot stay apart inside one domain of two racks
    s3 = gs.Snapshot.from_dict(
        {
            **s.to_dict(),
            "jobs": [job("web", 3, network_topology={"mode": "hard", "highest_tier_allowed": 1})],
            "tasks": tasks("web", 3, labels={"app": "web"}, pod_anti_affinity=anti),
        }
    )
    d = run(s3)
    assert d.binds == ()
    assert "anti-affinity with pod" in d.jobs["web"].message


# -------------------------------------------------------------------- spread


def test_spread_do_not_schedule_keeps_zones_within_max_skew() -> None:
    nodes = [node("a", cpu=10, zone="z1"), node("b", cpu=10, zone="z2")]
    spread = [
        {"max_skew": 1, "topology_key": "zone", "label_selector": {"match_labels": {"app": "s"}}}
    ]
    s = snap(nodes, [job("s", 6)], tasks("s", 6, labels={"app": "s"}, topology_spread=spread))
    where = list(placed(run(s)).values())
    assert len(where) == 6 and where.count("a") == 3 and where.count("b") == 3


def test_spread_counts_running_pods_and_explains_the_skew() -> None:
    nodes = [node("a", cpu=10, zone="z1"), node("b", cpu=1, zone="z2")]
    old = [running(f"o-{i}", "o", "a", labels={"app": "s"}) for i in range(2)]
    spread = [
        {"max_skew": 1, "topology_key": "zone", "label_selector": {"match_labels": {"app": "s"}}}
    ]
    # z1 holds 2, z2 holds 0 and has no room: skew in z1 would be 3 > 1.
    s = snap(
        nodes,
        [job("o", 2, phase="Running"), job("s", 1)],
        [*old, *tasks("s", 1, cpu=2, labels={"app": "s"}, topology_spread=spread)],
    )
    d = run(s)
    assert d.binds == ()
    assert "topology spread: zone skew 3 > maxSkew 1" in d.task_reasons["s-0"]


def test_spread_excludes_nodes_without_the_key_and_honours_min_domains() -> None:
    nodes = [node("a", zone="z1"), node("nokey")]
    spread = [
        {"max_skew": 1, "topology_key": "zone", "label_selector": {"match_labels": {"app": "s"}}}
    ]
    s = snap(nodes, [job("s", 2, 1)], tasks("s", 2, labels={"app": "s"}, topology_spread=spread))
    # one domain: the emptiest is itself, so both land on a; never on the node without the key
    assert set(placed(run(s)).values()) == {"a"}
    with_min = [{**spread[0], "min_domains": 2}]
    s = snap(nodes, [job("s", 2, 1)], tasks("s", 2, labels={"app": "s"}, topology_spread=with_min))
    # fewer domains than min_domains: the emptiest counts as 0, so a takes only one
    assert list(placed(run(s)).values()) == ["a"]


def test_schedule_anyway_only_scores() -> None:
    nodes = [node("a", cpu=10, zone="z1"), node("b", cpu=10, zone="z2")]
    spread = [
        {
            "max_skew": 1,
            "topology_key": "zone",
            "when_unsatisfiable": "ScheduleAnyway",
            "label_selector": {"match_labels": {"app": "s"}},
        }
    ]
    s = snap(nodes, [job("s", 4)], tasks("s", 4, labels={"app": "s"}, topology_spread=spread))
    where = list(placed(run(s)).values())
    assert sorted(where) == ["a", "a", "b", "b"]


# -------------------------------------------------------------------- preferred


def test_preferred_affinity_draws_to_the_matching_domain() -> None:
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    db = running("db-0", "db", "b", labels={"app": "db"})
    pref = {"preferred": [{"weight": 100, "term": term("zone", app="db")}]}
    s = snap(
        nodes,
        [job("db", 1, phase="Running"), job("app", 1)],
        [db, *tasks("app", 1, pod_affinity=pref)],
    )
    assert placed(run(s)) == {"app-0": "b"}
    # preferred anti-affinity pushes away instead
    s = snap(
        nodes,
        [job("db", 1, phase="Running"), job("app", 1)],
        [db, *tasks("app", 1, pod_anti_affinity=pref)],
    )
    assert placed(run(s)) == {"app-0": "a"}


# -------------------------------------------------------------------- cost and records


def test_a_snapshot_without_pod_constraints_builds_no_rules() -> None:
    s = snap(RACKS, [job("web", 2)], tasks("web", 2, labels={"app": "web"}))
    ssn = open_session(s, CONFIG)
    assert pod_rules(ssn) is None


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        (
            "pod_anti_affinity",
            {"required": [{"label_selector": {}}]},
            "pod_anti_affinity.required[0].topology_key",
        ),
        (
            "pod_affinity",
            {
                "required": [
                    {
                        "topology_key": "z",
                        "label_selector": {
                            "match_expressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]
                        },
                    }
                ]
            },
            "pod_affinity.required[0].label_selector.match_expressions[0].operator",
        ),
        ("pod_affinity", {}, "pod_affinity"),
        (
            "pod_affinity",
            {"preferred": [{"weight": 0, "term": {"topology_key": "z"}}]},
            "pod_affinity.preferred[0].weight",
        ),
        ("topology_spread", [{"max_skew": 0, "topology_key": "z"}], "topology_spread[0].max_skew"),
        ("topology_spread", [{"max_skew": 1}], "topology_spread[0].topology_key"),
        (
            "topology_spread",
            [{"max_skew": 1, "topology_key": "z", "when_unsatisfiable": "Maybe"}],
            "topology_spread[0].when_unsatisfiable",
        ),
        ("labels", {"app": 3}, "labels"),
    ],
)
def test_malformed_pod_constraints_are_refused_naming_the_field(
    field: str, value: Any, path: str
) -> None:
    t = {"name": "t", "job": "j", field: value}
    with pytest.raises(SnapshotError) as err:
        gs.Task.from_dict(t)
    assert err.value.field is not None and err.value.field.startswith(path)


def test_pod_constraints_round_trip_through_the_snapshot_format() -> None:
    t = {
        "name": "t",
        "job": "j",
        "labels": {"app": "web"},
        "namespace": "prod",
        "pod_affinity": {
            "required": [term("zone", app="db")],
            "preferred": [{"weight": 5, "term": {**term("rack", app="x"), "namespaces": ["a"]}}],
        },
        "pod_anti_affinity": {
            "required": [
                {
                    "topology_key": "rack",
                    "label_selector": {
                        "match_expressions": [{"key": "app", "operator": "In", "values": ["web"]}]
                    },
                }
            ]
        },
        "topology_spread": [
            {
                "max_skew": 2,
                "topology_key": "zone",
                "when_unsatisfiable": "DoNotSchedule",
                "label_selector": {"match_labels": {"app": "web"}},
                "min_domains": 3,
            }
        ],
    }
    task = gs.Task.from_dict(t)
    again = gs.Task.from_dict(task.to_dict())
    assert again == task
    assert task.to_dict()["topology_spread"] == t["topology_spread"]


# -------------------------------------------------------------------- the checker


def test_the_checker_catches_each_broken_rule() -> None:
    anti = {"required": [term("rack", app="web")]}
    s = snap(RACKS, [job("web", 2)], tasks("web", 2, labels={"app": "web"}, pod_anti_affinity=anti))
    bad = gs.Decisions.from_dict(
        {"binds": [{"task": "web-0", "node": "n0"}, {"task": "web-1", "node": "n1"}]}
    )
    with pytest.raises(InvariantViolation, match="anti-affinity with pod"):
        check_pod_constraints(s, bad)
    aff = {"required": [term("zone", app="db")]}
    s = snap([node("a", zone="z1")], [job("app", 1)], tasks("app", 1, pod_affinity=aff))
    bad = gs.Decisions.from_dict({"binds": [{"task": "app-0", "node": "a"}]})
    with pytest.raises(InvariantViolation, match="pod affinity"):
        check_pod_constraints(s, bad)
    spread = [
        {"max_skew": 1, "topology_key": "zone", "label_selector": {"match_labels": {"app": "s"}}}
    ]
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    s = snap(nodes, [job("s", 2)], tasks("s", 2, labels={"app": "s"}, topology_spread=spread))
    bad = gs.Decisions.from_dict(
        {"binds": [{"task": "s-0", "node": "a"}, {"task": "s-1", "node": "a"}]}
    )
    with pytest.raises(InvariantViolation, match="skew 2 > maxSkew 1"):
        check_pod_constraints(s, bad)


def test_pod_affinity_score_follows_its_nodeorder_weight() -> None:
    # b holds the db pod, so a is less loaded: with podaffinity.weight 0 the resource scores
    # pick a; with Volcano's default (2) the preferred term's 100 points pick b.
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    db = running("db-0", "db", "b", labels={"app": "db"})
    pref = {"preferred": [{"weight": 1, "term": term("zone", app="db")}]}
    s = snap(
        nodes,
        [job("db", 1, phase="Running"), job("app", 1)],
        [db, *tasks("app", 1, pod_affinity=pref)],
    )

    def config(weight: float) -> Config:
        return Config.from_dict(
            {
                "actions": ["allocate"],
                "tiers": [
                    [{"name": "gang"}],
                    [
                        {"name": "predicates"},
                        {"name": "nodeorder", "arguments": {"podaffinity.weight": weight}},
                    ],
                ],
            }
        )

    assert placed(run(s, config(0))) == {"app-0": "a"}
    assert placed(run(s, config(2))) == {"app-0": "b"}


def test_required_affinity_needs_one_pod_matching_all_its_terms() -> None:
    # Two terms on the same zone: a pod with app=db and a pod with tier=cache in z1 do not
    # make it (neither matches both); one pod with both labels in z2 does.
    nodes = [node("a", zone="z1"), node("b", zone="z1"), node("c", zone="z2"), node("d", zone="z2")]
    aff = {"required": [term("zone", app="db"), term("zone", tier="cache")]}
    others = [
        running("db-0", "db", "a", labels={"app": "db"}),
        running("cache-0", "db", "b", labels={"tier": "cache"}),
    ]
    s = snap(
        nodes,
        [job("db", 2, phase="Running"), job("x", 1)],
        [*others, *tasks("x", 1, pod_affinity=aff)],
    )
    assert placed(run(s)) == {}
    both = running("both-0", "both", "d", labels={"app": "db", "tier": "cache"})
    s = snap(
        nodes,
        [job("db", 2, phase="Running"), job("both", 1, phase="Running"), job("x", 1)],
        [*others, both, *tasks("x", 1, pod_affinity=aff)],
    )
    assert placed(run(s))["x-0"] in {"c", "d"}


def test_anti_affinity_and_affinity_together_pick_the_one_rack_left() -> None:
    # With a db in r1 and r2 and a web in r1: affine to db, anti-affine to web -> r2 only.
    db = [
        running("db-0", "db", "n0", labels={"app": "db"}),
        running("db-1", "db", "n2", labels={"app": "db"}),
    ]
    web = running("web-0", "web", "n1", labels={"app": "web"})
    spec: dict[str, Any] = {
        "pod_affinity": {"required": [term("rack", app="db")]},
        "pod_anti_affinity": {"required": [term("rack", app="web")]},
    }
    s = snap(
        RACKS,
        [job("db", 2, phase="Running"), job("web", 1, phase="Running"), job("x", 1)],
        [*db, web, *tasks("x", 1, **spec)],
    )
    assert placed(run(s)) == {"x-0": "n2"}


def test_a_running_pods_anti_affinity_sends_a_placer_gang_one_by_one() -> None:
    config = Config.from_dict(
        {
            "actions": ["enqueue", "allocate", "backfill"],
            "configurations": {"allocate": {"placer": "cpsat"}},
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [{"name": "predicates"}, {"name": "nodeorder"}],
            ],
        }
    )
    guard = running(
        "guard-0",
        "guard",
        "n0",
        labels={"app": "g"},
        pod_anti_affinity={"required": [term("rack", app="web")]},
    )
    s = snap(
        RACKS,
        [job("guard", 1, phase="Running"), job("web", 2)],
        [guard, *tasks("web", 2, labels={"app": "web"})],
    )
    d = run(s, config)
    assert set(placed(d).values()) <= {"n2", "n3"} and len(placed(d)) == 2
    assert d.placements["web"].status == "GREEDY"


def test_counts_read_through_the_change_log_equal_counts_made_afresh() -> None:
    from gangsched.session.arrays import pod_label_keys
    from gangsched.session.pod_constraints import PodRules
    from gangsched.session.statement import Statement

    anti = {
        "required": [term("rack", app="web")],
        "preferred": [{"weight": 3, "term": term("zone", app="web")}],
    }
    spread = [
        {"max_skew": 1, "topology_key": "zone", "label_selector": {"match_labels": {"app": "web"}}}
    ]
    nodes = [node(f"n{i}", rack=f"r{i // 2}", zone=f"z{i // 4}") for i in range(8)]
    old = [running(f"old-{i}", "old", f"n{2 * i}", labels={"app": "web"}) for i in range(2)]
    s = snap(
        nodes,
        [job("old", 2, phase="Running"), job("web", 3, 1)],
        [
            *old,
            *tasks("web", 3, labels={"app": "web"}, pod_anti_affinity=anti, topology_spread=spread),
        ],
    )
    ssn = open_session(s, CONFIG)
    rules = pod_rules(ssn)
    assert rules is not None
    tmpl = next(t for t in ssn.templates if s.tasks[t.tasks[0]].job == "web")
    tr = rules.of(tmpl)
    assert tr is not None
    rules.mask(tr)  # every counter read once

    def fresh_equal() -> None:
        again = PodRules(ssn, pod_label_keys(s) or ())
        other = again.of(tmpl)
        assert other is not None
        mine = [c for _, c in (*tr.anti, *tr.carried)] + [sp.counter for sp in tr.spread]
        mine += [c for c, _ in tr.scored]
        theirs = [c for _, c in (*other.anti, *other.carried)] + [sp.counter for sp in other.spread]
        theirs += [c for c, _ in other.scored]
        for a, b in zip(mine, theirs, strict=True):
            assert a.read(ssn).tolist() == b.read(ssn).tolist()

    stmt = Statement(ssn)
    web = [s.task_index[f"web-{i}"] for i in range(3)]
    assert stmt.allocate(web[0], s.node_index["n5"], ())
    fresh_equal()
    stmt.evict(s.task_index["old-0"], "test")
    fresh_equal()
    assert stmt.pipeline(web[1], s.node_index["n7"], ())
    fresh_equal()
    stmt.discard()
    fresh_equal()


def test_a_trial_that_relaxes_topology_still_keeps_pod_constraints() -> None:
    # The victim search's "would it fit anywhere?" and enqueue's admission trials leave the
    # gang's topology rule out, never a pod's own rules: a node the running guard's
    # anti-affinity keeps the web pod off is refused whatever the trial relaxes.
    from gangsched.session.gate import Rule

    guard = running(
        "guard-0",
        "guard",
        "n0",
        labels={"app": "guard"},
        pod_anti_affinity={"required": [term("rack", app="web")]},
    )
    s = snap(
        RACKS,
        [job("guard", 1, phase="Running"), job("web", 1)],
        [guard, *tasks("web", 1, labels={"app": "web"})],
    )
    ssn = open_session(s, CONFIG)
    web, n1, n2 = s.task_index["web-0"], s.node_index["n1"], s.node_index["n2"]
    for relax in (
        frozenset(),
        frozenset({Rule.TOPOLOGY}),
        frozenset({Rule.TOPOLOGY, Rule.CAPABILITY}),
    ):
        why = ssn.gate.refuse(web, n1, (), pipelined=False, relax=relax)
        assert why is not None and why.rule is Rule.POD_CONSTRAINT, relax
        assert ssn.gate.refuse(web, n2, (), pipelined=False, relax=relax) is None


def test_a_job_affine_to_pods_placed_in_the_same_cycle_is_admitted_with_them() -> None:
    # db and web are both Pending; web must share a rack with a db pod. Enqueue's shape
    # check is about shape: web is admitted in the cycle that places db, and allocate puts it
    # beside db in that same cycle.
    s = snap(
        RACKS,
        [job("db", 1, creation=0, phase="Pending"), job("web", 1, creation=1, phase="Pending")],
        [
            *tasks("db", 1, cpu=8, labels={"app": "db"}),
            *tasks(
                "web", 1, labels={"app": "web"}, pod_affinity={"required": [term("rack", app="db")]}
            ),
        ],
    )
    d = run(s)
    assert d.jobs["web"].phase in ("Inqueue", "Running"), d.jobs["web"].message
    where = placed(d)
    rack = {"n0": "r1", "n1": "r1", "n2": "r2", "n3": "r3"}
    assert rack[where["web-0"]] == rack[where["db-0"]]


@pytest.mark.parametrize(
    "constraint",
    [
        {"pod_anti_affinity": {"required": [term("rack", app="db")]}},
        {"pod_affinity": {"required": [term("rack", app="db")]}},
        {"topology_spread": [{"max_skew": 1, "topology_key": "rack", "label_selector": {}}]},
    ],
    ids=["anti-affinity", "affinity", "spread"],
)
def test_pod_constraints_on_a_cluster_without_nodes_leave_the_job_pending(
    constraint: dict[str, Any],
) -> None:
    s = snap([], [job("db", 1)], tasks("db", 1, labels={"app": "db"}, **constraint))
    d = run(s)
    assert not d.binds and not d.pipelined
    assert d.jobs["db"].pending == 1 and d.jobs["db"].message
