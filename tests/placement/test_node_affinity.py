"""Node affinity as Kubernetes defines it: required terms OR-ed, expressions AND-ed, the six
operators, ``matchFields`` on the node name, preferred weights scored like kube's NodeAffinity
plugin (normalised to 0..100 by the largest sum), and PreferNoSchedule taints scored like
kube's TaintToleration plugin. The records, the snapshot interchange, the manifests, the
vectorized masks, the explanations and every action's decisions."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gangsched as gs
from gangsched.config import Config
from gangsched.io.k8s import load_objects
from gangsched.io.volcano import dump_manifests
from gangsched.model.affinity import (
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
)
from gangsched.session.affinity_masks import preferred_sum, required_mask, requirement_mask
from gangsched.testing import InvariantViolation, check_cycle, check_node_affinity, reference
from gangsched.testing.strategies import snapshots

# ---------------------------------------------------------------------------------------------
# Builders


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def required(
    *terms: list[dict[str, Any]], fields: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    out = [{"match_expressions": t} for t in terms]
    if fields:
        out.append({"match_fields": fields})
    return {"required": out}


def node(name: str, cpu: int = 8, **labels: str) -> dict[str, Any]:
    return {"name": name, "allocatable": {"cpu": cpu, "memory": "32Gi"}, "labels": labels}


def snapshot(nodes: list[dict[str, Any]], *tasks: dict[str, Any]) -> gs.Snapshot:
    jobs = [
        {"name": t["job"], "min_available": 1, "phase": t.get("job_phase", "Inqueue")}
        for t in tasks
    ]
    unique = list({j["name"]: j for j in jobs}.values())
    return gs.Snapshot.from_dict(
        {
            "nodes": nodes,
            "queues": [{"name": "default"}],
            "jobs": unique,
            "tasks": [{k: v for k, v in t.items() if k != "job_phase"} for t in tasks],
        }
    )


def task(
    name: str, affinity: dict[str, Any] | None = None, cpu: int = 1, **extra: Any
) -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "job": name.rsplit("-", 1)[0], "request": {"cpu": cpu}}
    if affinity is not None:
        t["node_affinity"] = affinity
    return {**t, **extra}


def binds(d: gs.Decisions) -> dict[str, str]:
    return {b.task: b.node for b in d.binds}


# ---------------------------------------------------------------------------------------------
# The operators, node by node (Kubernetes' label selector rules)


@pytest.mark.parametrize(
    ("op", "values", "label", "expected"),
    [
        ("In", ("a", "b"), "a", True),
        ("In", ("a", "b"), "c", False),
        ("In", ("a",), None, False),  # In needs the label
        ("NotIn", ("a",), "b", True),
        ("NotIn", ("a",), "a", False),
        ("NotIn", ("a",), None, True),  # an absent label is not in any set
        ("Exists", (), "", True),
        ("Exists", (), None, False),
        ("DoesNotExist", (), None, True),
        ("DoesNotExist", (), "x", False),
        ("Gt", ("3",), "4", True),
        ("Gt", ("3",), "3", False),  # strictly greater
        ("Gt", ("3",), "x", False),  # a label that is no integer never compares
        ("Gt", ("3",), None, False),
        ("Lt", ("-2",), "-3", True),
        ("Lt", ("10",), "+9", True),  # Go's ParseInt takes a sign
        ("Lt", ("10",), "10", False),
        ("Gt", ("7",), "010", True),  # decimal, leading zeros allowed
    ],
)
def test_operators_follow_kubernetes(
    op: str, values: tuple[str, ...], label: str | None, expected: bool
) -> None:
    req = NodeSelectorRequirement(key="k", operator=op, values=values)
    assert req.matches(label) is expected
    labels = {} if label is None else {"k": label}
    term = NodeSelectorTerm(match_expressions=(req,))
    assert NodeAffinity(required=(term,)).allows("n", labels) is expected


def test_required_terms_are_ored_and_expressions_anded() -> None:
    nodes = [
        node("n0", zone="a", disk="ssd"),
        node("n1", zone="a", disk="hdd"),
        node("n2", zone="b", disk="hdd"),
        node("n3", zone="c"),
    ]
    # (zone a AND disk ssd) OR (zone b): n0 or n2; least-requested ties go to the lower index.
    aff = required([expr("zone", "In", "a"), expr("disk", "In", "ssd")], [expr("zone", "In", "b")])
    d = gs.schedule(snapshot(nodes, task("j-0", aff, cpu=6), task("k-0", aff, cpu=6)))
    assert sorted(binds(d).values()) == ["n0", "n2"]


def test_match_fields_selects_nodes_by_name() -> None:
    nodes = [node("n0"), node("n1"), node("n2")]
    only_n2 = required(fields=[expr("metadata.name", "In", "n2")])
    not_n0 = required(fields=[expr("metadata.name", "NotIn", "n0")])
    d = gs.schedule(snapshot(nodes, task("j-0", only_n2), task("k-0", not_n0, cpu=6)))
    assert binds(d) == {"j-0": "n2", "k-0": "n1"}


def test_selector_and_affinity_must_both_hold() -> None:
    nodes = [node("n0", zone="a", pool="x"), node("n1", zone="b", pool="y")]
    t = task("j-0", required([expr("zone", "In", "a")]), node_selector={"pool": "y"})
    d = gs.schedule(snapshot(nodes, t))
    assert d.binds == ()


# ---------------------------------------------------------------------------------------------
# Explanations name the constraint


def test_explanation_names_the_failed_expression() -> None:
    nodes = [node("n0", zone="c"), node("n1", zone="a", rank="1"), node("n2", zone="b")]
    aff = required([expr("zone", "In", "a", "b"), expr("rank", "Gt", "5")])
    d = gs.schedule(snapshot(nodes, task("j-0", aff)))
    msg = d.jobs["j"].message
    assert "1 node(s) didn't match Pod's node affinity: zone In [a, b]" in msg
    assert "2 node(s) didn't match Pod's node affinity: rank Gt 5" in msg
    assert msg.startswith("1/1 tasks in gang unschedulable: 0/3 nodes are available")


def test_explanation_of_several_terms_names_them_all() -> None:
    aff = required([expr("zone", "In", "x")], [expr("gpu", "Exists")])
    d = gs.schedule(snapshot([node("n0", zone="a")], task("j-0", aff)))
    assert "node affinity: (zone In [x]) or (gpu Exists)" in d.jobs["j"].message


# ---------------------------------------------------------------------------------------------
# Preferred terms: kube's NodeAffinity score, normalised 0..100, weighted 2 by default


def _scores(snap: gs.Snapshot, config: Config | None = None) -> dict[str, np.ndarray]:
    ssn = gs.open_session(snap, config)
    rows = np.arange(len(snap.nodes), dtype=np.intp)
    return {k: np.asarray(v) for k, v in ssn.points.node_scores(ssn.templates[0], rows).items()}


def test_preferred_weights_are_summed_and_normalised_like_kube() -> None:
    nodes = [node("n0", zone="a"), node("n1", zone="b", ssd="1"), node("n2", zone="b")]
    aff = {
        "preferred": [
            {"weight": 30, "preference": {"match_expressions": [expr("zone", "In", "b")]}},
            {"weight": 20, "preference": {"match_expressions": [expr("ssd", "Exists")]}},
        ]
    }
    cfg = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [
                [
                    {
                        "name": "nodeorder",
                        "arguments": {
                            "leastrequested.weight": 0,
                            "balancedresource.weight": 0,
                            "nodeaffinity.weight": 1,
                        },
                    }
                ]
            ],
        }
    )
    got = _scores(snapshot(nodes, task("j-0", aff)), cfg)["nodeorder"]
    # sums 0, 50, 30 -> 100 * s // 50 (integer, as kube's DefaultNormalizeScore)
    assert got.tolist() == [0.0, 100.0, 60.0]


def test_preference_outweighs_a_spread_with_the_default_weights() -> None:
    # n0 is empty, n1 half full: least-requested prefers n0, the preference n1.
    nodes = [node("n0", zone="a"), node("n1", zone="b")]
    pref = {
        "preferred": [{"weight": 1, "preference": {"match_expressions": [expr("zone", "In", "b")]}}]
    }
    busy = task("busy-0", cpu=4, phase="Running", node="n1", job_phase="Running")
    d = gs.schedule(snapshot(nodes, busy, task("j-0", pref)))
    assert binds(d) == {"j-0": "n1"}
    d = gs.schedule(snapshot(nodes, busy, task("j-0")))
    assert binds(d) == {"j-0": "n0"}


def test_taint_toleration_score_uses_kube_integer_normalisation() -> None:
    soft = [{"key": f"k{i}", "value": "v", "effect": "PreferNoSchedule"} for i in range(3)]
    nodes = [
        {**node("n0"), "taints": soft[:1]},
        {**node("n1"), "taints": soft},
        node("n2"),
    ]
    cfg = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [
                [
                    {
                        "name": "nodeorder",
                        "arguments": {"leastrequested.weight": 0, "balancedresource.weight": 0},
                    }
                ]
            ],
        }
    )
    got = _scores(snapshot(nodes, task("j-0")), cfg)["nodeorder"]
    # kube: 100 - 100 * count // most, times the weight 3: 100 - 33 = 67, 0, 100
    assert got.tolist() == [3 * 67.0, 0.0, 3 * 100.0]


# ---------------------------------------------------------------------------------------------
# Validation: typed errors naming the task and the field


@pytest.mark.parametrize(
    ("aff", "field", "words"),
    [
        (
            required([expr("zone", "Like", "a")]),
            "node_affinity.required[0].match_expressions[0].operator",
            "unknown operator 'Like'",
        ),
        (
            required([expr("rank", "Gt", "three")]),
            "node_affinity.required[0].match_expressions[0].values[0]",
            "Gt needs an integer",
        ),
        (
            required([expr("rank", "Lt", "1", "2")]),
            "node_affinity.required[0].match_expressions[0].values",
            "exactly one value",
        ),
        ({"required": [{}]}, "node_affinity.required[0]", "empty term"),
        ({"required": []}, "node_affinity.required", "no node"),
        ({}, "node_affinity", "empty node affinity"),
        (
            required([expr("zone", "In")]),
            "node_affinity.required[0].match_expressions[0].values",
            "at least one",
        ),
        (
            required([expr("zone", "Exists", "a")]),
            "node_affinity.required[0].match_expressions[0].values",
            "takes no values",
        ),
        (
            required(fields=[expr("metadata.labels", "In", "x")]),
            "node_affinity.required[0].match_fields[0].key",
            "unknown field",
        ),
        (
            required(fields=[expr("metadata.name", "Exists")]),
            "node_affinity.required[0].match_fields[0].operator",
            "unknown operator",
        ),
        (
            {
                "preferred": [
                    {"weight": 0, "preference": {"match_expressions": [expr("a", "Exists")]}}
                ]
            },
            "node_affinity.preferred[0].weight",
            "1..100",
        ),
        (
            {"preferred": [{"weight": 5}]},
            "node_affinity.preferred[0].preference",
            "missing",
        ),
        (
            {"required": [{"match_expressions": [{"key": "a", "operator": "In", "value": ["x"]}]}]},
            "node_affinity.required[0].match_expressions[0]",
            "unknown field",
        ),
    ],
)
def test_invalid_affinity_is_a_typed_error_naming_the_field(
    aff: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(gs.SnapshotError) as info:
        snapshot([node("n0")], task("j-0", aff))
    err = info.value
    assert (err.kind, err.name, err.field) == ("task", "j-0", field)
    assert words in err.detail


def test_records_built_in_code_are_checked_too() -> None:
    bad = NodeAffinity(
        required=(
            NodeSelectorTerm(
                match_expressions=(NodeSelectorRequirement(key="k", operator="Gt", values=("x",)),)
            ),
        )
    )
    with pytest.raises(
        gs.SnapshotError, match=r"node_affinity\.required\[0\]\.match_expressions\[0\]\.values\[0\]"
    ):
        gs.Task(name="t", job="j", node_affinity=bad)


def test_interchange_round_trips_node_affinity() -> None:
    aff = {
        "required": [
            {"match_expressions": [expr("zone", "NotIn", "a"), expr("rank", "Lt", "9")]},
            {"match_fields": [expr("metadata.name", "In", "n0")]},
        ],
        "preferred": [
            {"weight": 7, "preference": {"match_expressions": [expr("ssd", "DoesNotExist")]}}
        ],
    }
    snap = snapshot([node("n0")], task("j-0", aff), task("k-0"))
    doc = snap.to_dict()
    assert doc["tasks"][0]["node_affinity"] == aff
    assert "node_affinity" not in doc["tasks"][1]  # absent when there is none
    back = gs.Snapshot.from_dict(json.loads(json.dumps(doc)))
    assert back.tasks == snap.tasks


# ---------------------------------------------------------------------------------------------
# Manifests


def _k8s_node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "A100", **labels}},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"}
        },
    }


_MANIFEST_AFFINITY: dict[str, Any] = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 5,
                "preference": {"matchExpressions": [{"key": "rack", "operator": "Exists"}]},
            }
        ],
    }
}

_EXPECTED = NodeAffinity(
    required=(
        NodeSelectorTerm(
            match_expressions=(NodeSelectorRequirement(key="zone", operator="In", values=("b",)),)
        ),
        NodeSelectorTerm(
            match_fields=(
                NodeSelectorRequirement(key="metadata.name", operator="In", values=("n2",)),
            )
        ),
    ),
    preferred=(
        PreferredSchedulingTerm(
            weight=5,
            preference=NodeSelectorTerm(
                match_expressions=(NodeSelectorRequirement(key="rack", operator="Exists"),)
            ),
        ),
    ),
)


def _pod_spec(affinity: dict[str, Any], gpu: int = 0) -> dict[str, Any]:
    res: dict[str, Any] = {"requests": {"cpu": "1"}}
    if gpu:
        res["limits"] = {"nvidia.com/gpu": gpu}
    return {
        "schedulerName": "volcano",
        "affinity": affinity,
        "containers": [{"name": "c", "image": "x", "resources": res}],
    }


def _workloads(affinity: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = _pod_spec(affinity)
    return {
        "Pod": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": spec,
            "status": {"phase": "Pending"},
        },
        "Job": {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "vj", "namespace": "default"},
            "spec": {
                "schedulerName": "volcano",
                "tasks": [{"name": "w", "replicas": 2, "template": {"spec": spec}}],
            },
        },
        "PyTorchJob": {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {
                "name": "pt",
                "namespace": "default",
                "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
            },
            "spec": {
                "runPolicy": {"schedulingPolicy": {"queue": "default"}},
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": {"spec": spec}},
                    "Worker": {"replicas": 2, "template": {"spec": spec}},
                },
            },
        },
    }


@pytest.mark.parametrize("kind", ["Pod", "Job", "PyTorchJob"])
def test_manifests_carry_node_affinity_and_dump_writes_it_back(kind: str) -> None:
    workload = _workloads(_MANIFEST_AFFINITY)[kind]
    nodes = [_k8s_node("n0", zone="a"), _k8s_node("n1", zone="b"), _k8s_node("n2", zone="c")]
    cluster = load_objects([*nodes, workload])
    tasks = cluster.snapshot.tasks
    assert tasks and all(t.node_affinity == _EXPECTED for t in tasks)
    d = gs.schedule(cluster.snapshot)
    assert {b.node for b in d.binds} <= {"n1", "n2"}
    assert d.binds
    back = load_objects(dump_manifests(cluster.snapshot)).snapshot
    assert [t.node_affinity for t in back.tasks] == [t.node_affinity for t in tasks]


def test_gpu_model_constraint_stays_a_gpu_model_next_to_other_expressions() -> None:
    aff = copy.deepcopy(_MANIFEST_AFFINITY)
    terms = aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"] = [
        {
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["b"]},
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100"]},
            ]
        }
    ]
    pod = _workloads(aff)["Pod"]
    pod["spec"] = _pod_spec(aff, gpu=1)
    cluster = load_objects([_k8s_node("n0", zone="b"), pod])
    (t,) = cluster.snapshot.tasks
    assert t.gpu_request is not None and t.gpu_request.models == ("A100",)
    assert t.node_affinity is not None
    assert t.node_affinity.required == (
        NodeSelectorTerm(
            match_expressions=(NodeSelectorRequirement(key="zone", operator="In", values=("b",)),)
        ),
    )
    back = load_objects(dump_manifests(cluster.snapshot)).snapshot
    assert back.tasks == cluster.snapshot.tasks


def test_invalid_manifest_affinity_names_the_manifest_path() -> None:
    aff = copy.deepcopy(_MANIFEST_AFFINITY)
    req = aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    req["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] = "Gt"
    with pytest.raises(gs.SnapshotError) as info:
        load_objects([_k8s_node("n0"), _workloads(aff)["Job"]])
    assert info.value.field == (
        "spec.tasks[0].template.spec.affinity.nodeAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]."
        "matchExpressions[0].values[0]"
    )
    assert "Gt needs an integer" in info.value.detail


# ---------------------------------------------------------------------------------------------
# Vectorized masks agree with the records' rules, node by node

_KEYS = ("zone", "rank", "ssd")
_VALUES = ("a", "b", "1", "7", "-3", "x9")


@st.composite
def requirements(draw: st.DrawFn) -> NodeSelectorRequirement:
    op = draw(st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")))
    key = draw(st.sampled_from(_KEYS))
    if op in ("In", "NotIn"):
        values = tuple(draw(st.lists(st.sampled_from(_VALUES), min_size=1, max_size=3)))
    elif op in ("Gt", "Lt"):
        values = (str(draw(st.integers(-5, 9))),)
    else:
        values = ()
    return NodeSelectorRequirement(key=key, operator=op, values=values)


@st.composite
def terms(draw: st.DrawFn, names: list[str]) -> NodeSelectorTerm:
    exprs = tuple(draw(st.lists(requirements(), max_size=3)))
    fields: tuple[NodeSelectorRequirement, ...] = ()
    if draw(st.booleans()) or not exprs:
        op = draw(st.sampled_from(("In", "NotIn")))
        fields = (
            NodeSelectorRequirement(
                key="metadata.name", operator=op, values=(draw(st.sampled_from(names)),)
            ),
        )
    return NodeSelectorTerm(match_expressions=exprs, match_fields=fields)


@st.composite
def affinities(draw: st.DrawFn, names: list[str]) -> NodeAffinity:
    req = tuple(draw(st.lists(terms(names), max_size=3)))
    pref = tuple(
        PreferredSchedulingTerm(weight=draw(st.integers(1, 100)), preference=t)
        for t in draw(st.lists(terms(names), min_size=0 if req else 1, max_size=3))
    )
    return NodeAffinity(required=req, preferred=pref)


@st.composite
def labelled_nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 6))
    out = []
    for i in range(n):
        labels = {k: draw(st.sampled_from(_VALUES)) for k in _KEYS if draw(st.booleans())}
        out.append(node(f"n{i}", cpu=8, **labels))
    return out


@given(data=st.data())
def test_vector_masks_match_the_records_rules(data: st.DataObject) -> None:
    nodes = data.draw(labelled_nodes())
    names = [n["name"] for n in nodes]
    aff = data.draw(affinities(names))
    snap = gs.Snapshot.from_dict(
        {"nodes": nodes, "queues": [{"name": "default"}], "jobs": [], "tasks": []}
    )
    arrays = gs.open_session(snap).arrays
    recs = snap.nodes
    assert required_mask(arrays, aff).tolist() == [aff.allows(x.name, x.labels) for x in recs]
    assert preferred_sum(arrays, aff).tolist() == [aff.preference(x.name, x.labels) for x in recs]
    for t in aff.required:
        for r in t.match_expressions:
            got = requirement_mask(arrays, r, field=False).tolist()
            assert got == [r.matches(x.labels.get(r.key)) for x in recs]


# ---------------------------------------------------------------------------------------------
# Every action's decisions keep required node affinity

_ALL_ACTIONS = Config.from_dict(
    {
        "actions": ["enqueue", "allocate", "preempt", "reclaim", "backfill"],
        "tiers": [
            [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}],
            [
                {"name": "drf"},
                {"name": "predicates"},
                {"name": "proportion"},
                {"name": "nodeorder"},
                {"name": "binpack"},
            ],
        ],
    }
)


@st.composite
def snapshots_with_affinity(draw: st.DrawFn, *, topology: bool = True) -> gs.Snapshot:
    base = draw(snapshots(max_nodes=4, max_jobs=4, max_tasks_per_job=3, topology=topology))
    doc = base.to_dict()
    zones = ("a", "b", "c")
    for n in doc["nodes"]:
        n["labels"] = {**n.get("labels", {}), "zone": draw(st.sampled_from(zones))}
        if draw(st.booleans()):
            n["labels"]["rank"] = str(draw(st.integers(0, 9)))
    names = [n["name"] for n in doc["nodes"]]
    by_job: dict[str, NodeAffinity | None] = {}
    for t in doc["tasks"]:
        if t.get("phase", "Pending") != "Pending":
            continue
        if t["job"] not in by_job:
            by_job[t["job"]] = draw(st.none() | affinities(names))
        aff = by_job[t["job"]]
        if aff is None:
            continue
        zone = NodeSelectorRequirement(
            key="zone", operator="In", values=(draw(st.sampled_from(zones)),)
        )
        aff = NodeAffinity(
            required=(*aff.required, NodeSelectorTerm(match_expressions=(zone,))),
            preferred=aff.preferred,
        )
        t["node_affinity"] = aff.to_dict()
    return gs.Snapshot.from_dict(doc)


@given(snapshots_with_affinity())
def test_every_action_keeps_required_node_affinity(snap: gs.Snapshot) -> None:
    d = gs.schedule(snap, _ALL_ACTIONS)
    check_cycle(snap, d, _ALL_ACTIONS)  # includes check_node_affinity
    check_node_affinity(snap, d)
    again = gs.schedule(snap, _ALL_ACTIONS)
    assert json.dumps(again.to_dict(), sort_keys=True) == json.dumps(d.to_dict(), sort_keys=True)


def test_the_checker_catches_a_bind_outside_the_affinity() -> None:
    snap = snapshot(
        [node("n0", zone="a"), node("n1", zone="b")],
        task("j-0", required([expr("zone", "In", "b")])),
    )
    d = gs.schedule(snap)
    assert binds(d) == {"j-0": "n1"}
    moved = gs.Decisions.from_dict(
        {**d.to_dict(), "binds": [{**d.binds[0].to_dict(), "node": "n0"}]}
    )
    with pytest.raises(InvariantViolation, match=r"node affinity keeps out \(zone In \[b\]\)"):
        check_node_affinity(snap, moved)


@st.composite
def preference_clusters(draw: st.DrawFn) -> gs.Snapshot:
    """Equal nodes with drawn labels and pending gangs with drawn affinity: where the
    tasks land is decided by the affinity and the spread."""
    nodes = draw(labelled_nodes())
    names = [n["name"] for n in nodes]
    jobs, tasks = [], []
    for j in range(draw(st.integers(1, 4))):
        jobs.append({"name": f"j{j}", "min_available": 1, "phase": "Inqueue"})
        aff = draw(st.none() | affinities(names))
        for i in range(draw(st.integers(1, 3))):
            t: dict[str, Any] = {"name": f"j{j}-{i}", "job": f"j{j}", "request": {"cpu": 3}}
            if aff is not None:
                t["node_affinity"] = aff.to_dict()
            tasks.append(t)
    return gs.Snapshot.from_dict(
        {"nodes": nodes, "queues": [{"name": "default"}], "jobs": jobs, "tasks": tasks}
    )


@settings(max_examples=80)
@given(snapshots_with_affinity(topology=False) | preference_clusters())
def test_the_plain_reference_scheduler_agrees(snap: gs.Snapshot) -> None:
    """The reference scheduler (Python loops over tasks and nodes, the records' own rules)
    binds the same tasks to the same nodes under Volcano's default configuration."""
    fast = gs.schedule(snap, Config.default())
    plain = reference.schedule(snap, Config.default())
    assert [(b.task, b.node, b.gpu_indices) for b in fast.binds] == [
        (b.task, b.node, b.gpu_indices) for b in plain.binds
    ]
    assert [(p.task, p.node) for p in fast.pipelined] == [(p.task, p.node) for p in plain.pipelined]


# ---------------------------------------------------------------------------------------------
# The exact placers get the required terms as node masks


@pytest.mark.parametrize("placer", ["greedy", "cpsat"])
def test_exact_placers_honour_required_affinity(placer: str) -> None:
    from gangsched.placement import GreedyPlacer
    from gangsched.placement.cpsat import CpSatPlacer

    chosen = (
        GreedyPlacer() if placer == "greedy" else CpSatPlacer(time_limit_s=5.0, workers=1, seed=0)
    )
    nodes = [node(f"n{i}", cpu=4, zone="a" if i < 2 else "b") for i in range(4)]
    tasks = [task(f"j-{i}", required([expr("zone", "In", "b")]), cpu=2) for i in range(4)]
    snap = gs.Snapshot.from_dict(
        {
            "nodes": nodes,
            "queues": [{"name": "default"}],
            "jobs": [{"name": "j", "min_available": 4, "phase": "Inqueue"}],
            "tasks": tasks,
        }
    )
    d = gs.schedule(snap, placer=chosen)
    assert sorted(binds(d).values()) == ["n2", "n2", "n3", "n3"]
    info = d.placements.get("j")
    if placer == "cpsat" and info is not None:
        assert info.status in ("OPTIMAL", "FEASIBLE")


# ---------------------------------------------------------------------------------------------
# Evaluations carried to the next cycle


def test_a_relabelled_node_stops_the_carry_of_preferred_scores() -> None:
    """Preferred scores are normalised by the best node: when labels change, the scores of
    unchanged nodes change too, so a carried evaluation would mix two scales (here it would
    pick n1, whose record changed, over n3)."""
    from gangsched.scheduler import run_cycle

    def pref(key: str, weight: int, *values: str) -> dict[str, Any]:
        op = "In" if values else "Exists"
        return {"weight": weight, "preference": {"match_expressions": [expr(key, op, *values)]}}

    aff = {"preferred": [pref("zone", 10, "b"), pref("ssd", 90), pref("fast", 15)]}

    def snap(ssd: bool, cpu1: int) -> gs.Snapshot:
        labels: list[dict[str, str]] = [
            {"zone": "a"},
            {"zone": "b"},
            {"zone": "a"},
            {"zone": "a", "fast": "1"},
        ]
        if ssd:
            labels[0]["ssd"] = "1"
        nodes = [node(f"n{i}", cpu=cpu1 if i == 1 else 8, **lab) for i, lab in enumerate(labels)]
        return snapshot(nodes, task("j-0", aff))

    cfg = Config.from_dict(
        {
            "actions": ["allocate"],
            "tiers": [
                [
                    {"name": "predicates"},
                    {
                        "name": "nodeorder",
                        "arguments": {"leastrequested.weight": 0, "balancedresource.weight": 0},
                    },
                ]
            ],
        }
    )
    _, first = run_cycle(snap(True, 8), cfg)
    second = snap(False, 9)  # n0 loses its ssd label, n1 grows
    carried, ssn = run_cycle(second, cfg, previous=first)
    fresh = gs.schedule(second, cfg)
    assert binds(fresh) == {"j-0": "n3"}
    assert binds(carried) == binds(fresh)
    assert ssn.evaluator.carried == 0
