"""Explanations that explain: a queue refusal names its limit with the numbers, an sla hold
shows in the reasons of the jobs it touches, an inner queue's status covers its subtree, and
the decisions say what the placer answered (status, gap, fallback) per job."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import gangsched as gs
from _preemption_helpers import TIERS, config, job, node, pending, running, snap
from gangsched.cli import main
from gangsched.config import Config
from gangsched.decisions import PLACEMENT_STATUSES, Decisions, PlacementInfo
from gangsched.errors import SnapshotError
from gangsched.placement import CpSatPlacer, Status

GPU = "nvidia.com/gpu"
ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot.yaml")
Obj = dict[str, Any]

PROPORTION = Config.from_dict({"actions": ["enqueue", "allocate"], "tiers": TIERS})
CAPPED: list[Obj] = [{"name": "capped", "capability": {"cpu": 8}}]


def _capacity(*, hierarchy: bool) -> Config:
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [
                [{"name": "priority"}, {"name": "gang"}],
                [
                    {"name": "drf"},
                    {"name": "predicates"},
                    {"name": "capacity", "enableHierarchy": hierarchy},
                    {"name": "nodeorder"},
                ],
            ],
        }
    )


def _cpu_snapshot(queues: list[Obj], held: dict[str, str], asks: dict[str, int]) -> gs.Snapshot:
    """One 64-cpu node; per queue in ``held`` a running task of that many cpu, per queue in
    ``asks`` a new job ``new-<queue>`` asking that many cpu."""
    jobs: list[Obj] = []
    tasks: list[Obj] = []
    for q, cpu in held.items():
        jobs.append({"name": f"run-{q}", "queue": q, "phase": "Running"})
        tasks.append(
            {
                "name": f"run-{q}-0",
                "job": f"run-{q}",
                "request": {"cpu": cpu},
                "phase": "Running",
                "node": "n0",
            }
        )
    for q, ask in asks.items():
        jobs.append({"name": f"new-{q}", "queue": q, "creation": 1})
        tasks.append({"name": f"new-{q}-0", "job": f"new-{q}", "request": {"cpu": ask}})
    nodes = [{"name": "n0", "allocatable": {"cpu": 64, "memory": "256Gi"}}]
    return gs.Snapshot.from_dict({"nodes": nodes, "queues": queues, "jobs": jobs, "tasks": tasks})


# ------------------------------------------------------------------ queue refusals


def test_queue_refusal_names_the_capability_with_the_numbers() -> None:
    s = _cpu_snapshot(
        [{"name": "capped", "capability": {"cpu": 8}}], {"capped": "7500m"}, {"capped": 1}
    )
    d = gs.schedule(s, PROPORTION)
    assert d.task_reasons["new-capped-0"] == (
        "queue 'capped' cannot take this task now: cpu 7500m allocated + 1 requested > capability 8"
    )
    assert "capability 8" in d.jobs["new-capped"].message


def test_queue_refusal_names_the_deserved_share_with_the_numbers() -> None:
    # 8 cpu between a (asks 3 + 2) and b (asks 4): a deserves 4, holds 3, asks 2 more.
    s = _cpu_snapshot([{"name": "a"}, {"name": "b"}], {"a": "3"}, {"a": 2, "b": 4})
    nodes = [{"name": "n0", "allocatable": {"cpu": 8, "memory": "256Gi"}}]
    s = gs.Snapshot.from_dict({**s.to_dict(), "nodes": nodes})
    d = gs.schedule(s, PROPORTION)
    assert d.queues["a"].deserved["cpu"] == 4000
    assert d.task_reasons["new-a-0"] == (
        "queue 'a' cannot take this task now: cpu 3 allocated + 2 requested > deserved 4"
    )


def test_queue_refusal_names_the_real_capability_left_by_guarantees() -> None:
    # g is guaranteed 60 of the 64 cores: a may hold at most the 4 left.
    queues: list[dict[str, Any]] = [{"name": "a"}, {"name": "g", "guarantee": {"cpu": 60}}]
    d = gs.schedule(_cpu_snapshot(queues, {}, {"a": 5}), PROPORTION)
    assert d.queues["a"].real_capability["cpu"] == 4000
    assert d.task_reasons["new-a-0"] == (
        "queue 'a' cannot take this task now: cpu 0 allocated + 5 requested > realCapability 4"
    )


def test_queue_refusal_names_a_closed_queue() -> None:
    queues = [{"name": "shut", "state": "Closed"}]
    s = gs.Snapshot.from_dict(
        {
            **_cpu_snapshot(queues, {}, {"shut": 1}).to_dict(),
            "jobs": [{"name": "new-shut", "queue": "shut", "phase": "Inqueue"}],
        }
    )
    for cfg in (PROPORTION, _capacity(hierarchy=False)):
        d = gs.schedule(s, cfg)
        assert d.task_reasons["new-shut-0"] == (
            "queue 'shut' cannot take this task now: the queue is Closed"
        )


def test_overused_queue_reason_shows_what_it_holds_against_its_share() -> None:
    # 8 cpu between a (holds 4, asks 1 more) and b (asks 4): a deserves 4 and holds it.
    s = _cpu_snapshot([{"name": "a"}, {"name": "b"}], {"a": "4"}, {"a": 1, "b": 4})
    nodes = [{"name": "n0", "allocatable": {"cpu": 8, "memory": "256Gi"}}]
    d = gs.schedule(gs.Snapshot.from_dict({**s.to_dict(), "nodes": nodes}), PROPORTION)
    assert d.jobs["new-a"].reason == "QueueOverused"
    assert d.jobs["new-a"].message == "queue 'a' is overused: cpu 4 allocated >= deserved 4"


def test_capacity_refusal_names_the_capability_with_the_numbers() -> None:
    s = _cpu_snapshot(CAPPED, {"capped": "6"}, {"capped": 3})
    d = gs.schedule(s, _capacity(hierarchy=False))
    assert d.task_reasons["new-capped-0"] == (
        "queue 'capped' cannot take this task now: cpu 6 allocated + 3 requested > capability 8"
    )


def _org_snapshot() -> gs.Snapshot:
    # org (capability 8 GPUs) over team-a and team-b; team-b runs 6 GPUs, team-a asks 3.
    nodes = [
        {
            "name": "n0",
            "allocatable": {"cpu": 64, "memory": "256Gi"},
            "gpus": {"count": 16, "model": "A100"},
        }
    ]
    queues = [
        {"name": "org", "capability": {GPU: 8}},
        {"name": "team-a", "parent": "org"},
        {"name": "team-b", "parent": "org"},
    ]
    jobs = [
        {"name": "busy", "queue": "team-b", "phase": "Running"},
        {"name": "new", "queue": "team-a"},
    ]
    tasks = [
        {
            "name": "busy-0",
            "job": "busy",
            "request": {"cpu": 2},
            "gpu_request": {"count": 6},
            "phase": "Running",
            "node": "n0",
            "gpu_indices": [0, 1, 2, 3, 4, 5],
        },
        {"name": "new-0", "job": "new", "request": {"cpu": 1}, "gpu_request": {"count": 3}},
    ]
    return gs.Snapshot.from_dict({"nodes": nodes, "queues": queues, "jobs": jobs, "tasks": tasks})


def test_capacity_refusal_names_the_ancestor_whose_limit_is_reached() -> None:
    d = gs.schedule(_org_snapshot(), _capacity(hierarchy=True))
    assert d.binds == ()
    assert d.task_reasons["new-0"] == (
        "queue 'team-a' cannot take this task now: "
        "ancestor 'org': nvidia.com/gpu 6 allocated + 3 requested > capability 8"
    )


class _Gate:
    """A queue plugin that refuses every task and cannot say why."""

    name = "gate"

    def __init__(self, arguments: object) -> None:
        pass

    def allocatable(self, ssn: object, queue: int, tmpl: object) -> bool:
        return False


def _gated(first: str, reg: gs.Registry) -> Config:
    plugins = [{"name": "gate"}, {"name": "proportion"}]
    if first == "proportion":
        plugins.reverse()
    return Config.from_dict(
        {
            "actions": ["enqueue", "allocate"],
            "tiers": [[{"name": "priority"}, {"name": "gang"}], [*plugins, {"name": "predicates"}]],
        },
        plugins=reg.plugins,
    )


@pytest.mark.parametrize("first", ["proportion", "gate"])
def test_refusal_reason_comes_from_the_plugin_that_refused(first: str) -> None:
    # The allocatable point stops at the first plugin (tier order) that says no: that plugin
    # explains, and a plugin without an allocatable_reason is named.
    reg = gs.default_registry()
    reg.register_plugin("gate", _Gate)
    s = _cpu_snapshot(CAPPED, {"capped": "6"}, {"capped": 3})
    d = gs.schedule(s, _gated(first, reg), registry=reg)
    assert d.task_reasons["new-capped-0"] == "queue 'capped' cannot take this task now: " + (
        "cpu 6 allocated + 3 requested > capability 8"
        if first == "proportion"
        else "plugin 'gate' refuses it"
    )


def test_allocatable_reason_is_none_when_the_queue_takes_the_task() -> None:
    from gangsched.scheduler import open_session

    s = _cpu_snapshot(CAPPED, {"capped": "6"}, {"capped": 2})
    for cfg, name in ((PROPORTION, "proportion"), (_capacity(hierarchy=False), "capacity")):
        ssn = open_session(s, cfg)
        t = s.task_index["new-capped-0"]
        tmpl = ssn.templates[int(ssn.template_of[t])]
        plugin = ssn.plugin(name)
        assert plugin is not None and plugin.allocatable(ssn, 0, tmpl)
        assert plugin.allocatable_reason(ssn, 0, tmpl) is None


# ------------------------------------------------------------------ inner queue status


def test_parent_queue_status_aggregates_its_subtree() -> None:
    d = gs.schedule(_org_snapshot(), _capacity(hierarchy=True))
    org, a, b = d.queues["org"], d.queues["team-a"], d.queues["team-b"]
    assert b.allocated == {"cpu": 2000, GPU: 6000} and b.allocated_gpu == 6.0
    assert a.pending_resources == {"cpu": 1000, GPU: 3000} and a.pending_gpu == 3.0
    assert org.allocated == {"cpu": 2000, GPU: 6000}
    assert org.allocated_gpu == 6.0
    assert org.pending_resources == {"cpu": 1000, GPU: 3000} and org.pending_gpu == 3.0
    assert org.request == {"cpu": 3000, GPU: 9000}
    # job counts stay the queue's own: jobs live in leaves
    assert (org.running, org.pending + org.inqueue) == (0, 0)
    # flat capacity: no aggregation (a parent is just a name)
    flat = gs.schedule(_org_snapshot(), _capacity(hierarchy=False))
    assert flat.queues["org"].allocated == {}


# ------------------------------------------------------------------ sla holds

SLA = config(
    "enqueue",
    "allocate",
    "backfill",
    tiers=[[*TIERS[0], {"name": "sla", "arguments": {"sla-waiting-time": "10m"}}], TIERS[1]],
)


def _held(extra_jobs: list[Obj], extra_tasks: list[Obj], **kw: Any) -> gs.Snapshot:
    # Two 4-GPU nodes, each half used; "big" (waited 1000 s > 10 m) needs both whole.
    jobs = [job("s1", 1, walltime=100), job("s2", 1, walltime=300)]
    jobs += [job("big", 2, phase="Inqueue", age=1000), *extra_jobs]
    tasks = running("s1", [("n0", [0, 1])], gpus=2) + running("s2", [("n1", [0, 1])], gpus=2)
    tasks += pending("big", 2, gpus=4) + extra_tasks
    return snap([node("n0"), node("n1")], jobs, tasks, **kw)


def test_sla_hold_is_named_in_the_held_jobs_reason() -> None:
    d = gs.schedule(_held([], []), SLA)
    assert [h.job for h in d.holds] == ["big"]
    note = "sla: waited 1000 s (sla-waiting-time 600 s); node(s) n0, n1 held for it"
    assert note + ", expected to fit in 300 s" in d.jobs["big"].message
    for t in ("big-0", "big-1"):
        assert note in d.task_reasons[t]


def test_sla_hold_is_named_in_the_blocked_jobs_reasons() -> None:
    jobs = [
        job("long", 1, phase="Inqueue", age=10, walltime=500),
        job("open", 1, phase="Inqueue", age=10),
    ]
    d = gs.schedule(_held(jobs, pending("long", 1) + pending("open", 1)), SLA)
    assert d.task_reasons["long-0"] == (
        "0/2 nodes are available: 2 node(s) held for starving job 'big' "
        "(it should start in 300 s, before this job's walltime of 500 s ends)."
    )
    assert "held for starving job 'big' (it should start in 300 s and this job declares " in (
        d.jobs["open"].message
    )


def test_sla_hold_is_named_when_a_placer_explains_the_refusal() -> None:
    # A hard-topology job goes through the placer, whose reason knows nothing of predicates:
    # the hold is still named.
    racks = [{"name": "rack", "tier": 1, "members": ["n0", "n1"]}]
    hard = {"mode": "hard", "highest_tier_allowed": 1}
    jobs = [job("topo", 1, phase="Inqueue", age=10, walltime=500, network_topology=hard)]
    d = gs.schedule(_held(jobs, pending("topo", 1), hypernodes=racks), SLA)
    assert "topo-0" not in {b.task for b in d.binds}
    why = d.task_reasons["topo-0"]
    assert "node(s) held for starving job 'big' (it should start in 300 s" in why
    assert d.placements["topo"].placer == "greedy"


# ------------------------------------------------------------------ placer status and gap


def _gang_snapshot() -> gs.Snapshot:
    return gs.Snapshot.from_dict(
        {
            "nodes": [
                {"name": f"n{i}", "allocatable": {"cpu": 8, "memory": "32Gi"}} for i in range(6)
            ],
            "hypernodes": [
                {"name": "r0", "tier": 1, "members": ["n0", "n1", "n2"]},
                {"name": "r1", "tier": 1, "members": ["n3", "n4", "n5"]},
            ],
            "queues": [{"name": "default"}],
            "jobs": [
                {
                    "name": "g",
                    "queue": "default",
                    "min_available": 4,
                    "network_topology": {"mode": "hard", "highest_tier_allowed": 1},
                },
                {"name": "plain", "queue": "default"},
            ],
            "tasks": [{"name": f"g-{i}", "job": "g", "request": {"cpu": 2}} for i in range(4)]
            + [{"name": "plain-0", "job": "plain", "request": {"cpu": 1}}],
        }
    )


def test_cpsat_time_out_fallback_reports_no_gap() -> None:
    # A deterministic work budget too small for any search: the solver times out and the
    # greedy answer is used. Its gap to the bound is unknown, not 0.0 (which means optimal).
    d = gs.schedule(_gang_snapshot(), placer=CpSatPlacer(max_deterministic_time=1e-9))
    assert len([b for b in d.binds if b.task.startswith("g-")]) == 4
    assert d.placements["g"] == PlacementInfo(
        placer="cpsat", status="TIMED_OUT", gap=None, fallback=True
    )
    solved = gs.schedule(_gang_snapshot(), placer=CpSatPlacer())
    assert solved.placements["g"] == PlacementInfo(
        placer="cpsat", status="OPTIMAL", gap=0.0, fallback=False
    )
    # a placer given to schedule() takes every gang, so the plain job is there too
    assert set(solved.placements) == {"g", "plain"}


def test_greedy_placements_are_reported_without_a_gap() -> None:
    d = gs.schedule(_gang_snapshot())
    # only the topology job goes through the (greedy) placer by default
    assert dict(d.placements) == {
        "g": PlacementInfo(placer="greedy", status="GREEDY", gap=None, fallback=False)
    }


def test_infeasible_gang_reports_the_placer_status() -> None:
    s = gs.Snapshot.from_dict(
        {
            **_gang_snapshot().to_dict(),
            "tasks": [{"name": f"g-{i}", "job": "g", "request": {"cpu": 7}} for i in range(4)],
            "jobs": [_gang_snapshot().to_dict()["jobs"][0]],
        }
    )
    d = gs.schedule(s, placer=CpSatPlacer())
    assert d.binds == ()
    assert d.placements["g"] == PlacementInfo(placer="cpsat", status="INFEASIBLE")


def test_placements_round_trip_through_the_interchange_form() -> None:
    for placer in (None, CpSatPlacer(), CpSatPlacer(max_deterministic_time=1e-9)):
        d = gs.schedule(_gang_snapshot(), placer=placer)
        assert d.placements
        wire = json.loads(json.dumps(d.to_dict()))
        assert Decisions.from_dict(wire) == d
        assert Decisions.from_dict(wire).to_dict() == d.to_dict()


def test_placement_statuses_are_the_placers() -> None:
    assert tuple(s.value for s in Status) == PLACEMENT_STATUSES


@pytest.mark.parametrize(
    ("info", "field"),
    [
        ({"placer": "cpsat", "status": "DONE", "gap": None}, "placements[g].status"),
        ({"placer": "cpsat", "status": "GREEDY", "gap": 0.0}, "placements[g].gap"),
        ({"placer": "cpsat", "status": "FEASIBLE", "gap": -0.5}, "placements[g].gap"),
        ({"placer": "cpsat", "status": "FEASIBLE", "gap": math.nan}, "placements[g].gap"),
        ({"placer": "cpsat", "status": "FEASIBLE", "gap": True}, "placements[g].gap"),
        ({"placer": "cpsat", "status": "FEASIBLE", "fallback": "no"}, "placements[g].fallback"),
        ({"placer": "", "status": "GREEDY"}, "placements[g].placer"),
        ({"placer": "greedy", "status": "GREEDY", "extra": 1}, "placements[g]"),
        ("GREEDY", "placements[g]"),
    ],
)
def test_bad_placements_are_snapshot_errors(info: object, field: str) -> None:
    with pytest.raises(SnapshotError) as err:
        Decisions.from_dict({"placements": {"g": info}})
    assert err.value.field == field
    with pytest.raises(SnapshotError):
        Decisions.from_dict({"placements": ["g"]})


def test_cli_table_shows_the_placements(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["schedule", "-f", SNAPSHOT]) == 0
    out = capsys.readouterr().out
    section = out[out.index("PLACEMENTS") : out.index("QUEUES")].splitlines()
    assert section[1].split() == ["JOB", "PLACER", "STATUS", "GAP", "FALLBACK"]
    rows = {line.split()[0]: line.split()[1:] for line in section[2:] if line.strip()}
    assert rows["llm-finetune"] == ["greedy", "GREEDY", "-", "no"]
    conf = tmp_path / "volcano-scheduler.conf"
    conf.write_text(
        'actions: "enqueue, allocate"\n'
        "tiers:\n- plugins:\n  - name: priority\n  - name: gang\n"
        "- plugins:\n  - name: drf\n  - name: predicates\n  - name: proportion\n"
        "configurations:\n- name: allocate\n  arguments:\n    placer: cpsat\n"
        "    placer.deterministic-time: 0.000000001\n"
    )
    assert main(["schedule", "-f", SNAPSHOT, "--config", str(conf)]) == 0
    out = capsys.readouterr().out
    section = out[out.index("PLACEMENTS") : out.index("QUEUES")].splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in section[2:] if line.strip()}
    assert rows["llm-finetune"] == ["cpsat", "TIMED_OUT", "-", "yes"]


def test_scheduling_page_placements_example_runs_as_written() -> None:
    import contextlib
    import io
    import re

    text = (ROOT / "docs" / "scheduling.md").read_text(encoding="utf-8")
    section = text[text.index("## Decisions and explanations") :]
    (block,) = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "<docs/scheduling.md>", "exec"), {})
    printed = out.getvalue().splitlines()
    shown = [line[2:] for line in block.splitlines() if line.startswith("# PlacementInfo")]
    assert printed == shown
