"""Kueue's topology vocabulary: on jobs (NetworkTopology), in the interchange format, through
the manifest loader's annotations, and honoured by scheduling through the same placers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import gangsched as gs
from gangsched.errors import SnapshotError
from gangsched.io.k8s import load_text
from gangsched.model import Job, NetworkTopology, TopologyMode

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = (ROOT / "examples" / "volcano" / "cluster.yaml").read_text(encoding="utf-8")
HYPERNODES = (ROOT / "examples" / "volcano" / "hypernodes.yaml").read_text(encoding="utf-8")
RACK_OF = {
    "gpu-node-0": "rack-0",
    "gpu-node-1": "rack-0",
    "gpu-node-2": "rack-1",
    "gpu-node-3": "rack-1",
}
KUEUE_TOPOLOGY = """
apiVersion: kueue.x-k8s.io/v1alpha1
kind: Topology
metadata:
  name: default
spec:
  levels:
  - nodeLabel: cloud.example.com/spine
  - nodeLabel: topology.kubernetes.io/rack
  - nodeLabel: kubernetes.io/hostname
"""


def _vcjob(
    annotations: dict[str, str],
    *,
    replicas: int = 4,
    gpus: int = 2,
    template_annotations: dict[str, str] | None = None,
    extra_spec: str = "",
) -> str:
    meta = "".join(f"    {k}: {v!r}\n" for k, v in annotations.items())
    tmeta = "".join(f"          {k}: {v!r}\n" for k, v in (template_annotations or {}).items())
    return f"""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: train
  annotations:
{meta or "    {}"}
spec:
  schedulerName: volcano
  minAvailable: {replicas}
{extra_spec}  tasks:
  - name: worker
    replicas: {replicas}
    template:
      metadata:
        annotations:
{tmeta or "          {}"}
      spec:
        containers:
        - name: w
          image: trainer
          resources:
            requests: {{cpu: "1", memory: 1Gi}}
            limits: {{nvidia.com/gpu: {gpus}}}
"""


def _load(*docs: str) -> gs.Snapshot:
    text = "\n---\n".join([CLUSTER, HYPERNODES, KUEUE_TOPOLOGY, *docs])
    return load_text(text.replace("\n---\n\n---\n", "\n---\n")).snapshot


def _job(snapshot: gs.Snapshot) -> Job:
    (job,) = [j for j in snapshot.jobs if j.name.endswith("train")]
    return job


# -- the model and the interchange format -----------------------------------------------------


def test_kueue_tiers_are_volcano_modes() -> None:
    hard = NetworkTopology(mode=TopologyMode.HARD, highest_tier_allowed=2)
    soft = NetworkTopology(mode=TopologyMode.SOFT, highest_tier_allowed=1)
    assert (hard.required_tier, hard.preferred_tier) == (2, None)
    assert (soft.required_tier, soft.preferred_tier) == (None, 1)


def test_interchange_accepts_kueue_names_and_round_trips() -> None:
    d = {
        "name": "j",
        "min_available": 4,
        "network_topology": {"required_tier": 2, "slice_size": 2, "slice_tier": 1},
    }
    job = Job.from_dict(d)
    assert job.network_topology == NetworkTopology(
        mode=TopologyMode.HARD, highest_tier_allowed=2, slice_size=2, slice_tier=1
    )
    out = job.to_dict()
    assert out["network_topology"] == {
        "mode": "hard",
        "highest_tier_allowed": 2,
        "slice_size": 2,
        "slice_tier": 1,
    }
    assert Job.from_dict(out) == job
    pref = Job.from_dict({"name": "p", "network_topology": {"preferred_tier": 1}})
    assert pref.network_topology is not None and pref.network_topology.preferred_tier == 1
    assert Job.from_dict(pref.to_dict()) == pref


def test_interchange_refuses_two_ways_of_saying_the_tier() -> None:
    with pytest.raises(SnapshotError) as exc:
        Job.from_dict({"name": "j", "network_topology": {"required_tier": 2, "mode": "soft"}})
    assert exc.value.kind == "job" and exc.value.name == "j"
    assert exc.value.field.startswith("network_topology.")
    with pytest.raises(SnapshotError, match="not required_tier and preferred_tier"):
        Job.from_dict({"name": "j", "network_topology": {"required_tier": 2, "preferred_tier": 1}})


def test_slice_rules_are_checked_on_the_job() -> None:
    with pytest.raises(SnapshotError, match="slice tier 2 is above the highest tier allowed"):
        NetworkTopology(highest_tier_allowed=1, slice_size=2, slice_tier=2)
    with pytest.raises(SnapshotError, match="slice_tier without slice_size"):
        NetworkTopology(slice_tier=1)
    with pytest.raises(SnapshotError) as exc:
        Job(
            name="j",
            min_available=3,
            network_topology=NetworkTopology(highest_tier_allowed=2, slice_size=2, slice_tier=1),
        )
    assert exc.value.field == "network_topology.slice_size" and exc.value.name == "j"


# -- the manifest annotations, one test each --------------------------------------------------


def test_required_topology_annotation_is_a_hard_tier() -> None:
    snap = _load(_vcjob({"kueue.x-k8s.io/podset-required-topology": "topology.kubernetes.io/rack"}))
    assert _job(snap).network_topology == NetworkTopology(
        mode=TopologyMode.HARD, highest_tier_allowed=1
    )


def test_preferred_topology_annotation_is_a_soft_tier() -> None:
    snap = _load(_vcjob({"kueue.x-k8s.io/podset-preferred-topology": "cloud.example.com/spine"}))
    assert _job(snap).network_topology == NetworkTopology(
        mode=TopologyMode.SOFT, highest_tier_allowed=2
    )


def test_slice_required_topology_with_slice_size_on_the_pod_template() -> None:
    snap = _load(
        _vcjob(
            {},
            template_annotations={
                "kueue.x-k8s.io/podset-required-topology": "cloud.example.com/spine",
                "kueue.x-k8s.io/podset-slice-required-topology": "topology.kubernetes.io/rack",
                "kueue.x-k8s.io/podset-slice-size": "2",
            },
        )
    )
    assert _job(snap).network_topology == NetworkTopology(
        mode=TopologyMode.HARD, highest_tier_allowed=2, slice_size=2, slice_tier=1
    )


def test_slice_size_annotation_needs_its_level_and_a_count() -> None:
    with pytest.raises(SnapshotError, match=r"podset-slice-required-topology.*missing"):
        _load(_vcjob({"kueue.x-k8s.io/podset-slice-size": "2"}))
    with pytest.raises(SnapshotError, match="expected a positive pod count, got 'two'"):
        _load(
            _vcjob(
                {
                    "kueue.x-k8s.io/podset-slice-size": "two",
                    "kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
                }
            )
        )
    with pytest.raises(SnapshotError, match="minimum 4 is not a multiple of the slice size 3"):
        _load(
            _vcjob(
                {
                    "kueue.x-k8s.io/podset-slice-size": "3",
                    "kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
                }
            )
        )


def test_hostname_slices_alone_are_a_soft_topology() -> None:
    snap = _load(
        _vcjob(
            {
                "kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
                "kueue.x-k8s.io/podset-slice-size": "2",
            }
        )
    )
    assert _job(snap).network_topology == NetworkTopology(
        mode=TopologyMode.SOFT, slice_size=2, slice_tier=0
    )


def test_tier_numbers_work_without_a_kueue_topology_object() -> None:
    text = "\n---\n".join(
        [CLUSTER, HYPERNODES, _vcjob({"kueue.x-k8s.io/podset-required-topology": "2"})]
    )
    job = _job(load_text(text).snapshot)
    assert job.network_topology == NetworkTopology(mode=TopologyMode.HARD, highest_tier_allowed=2)


def test_unknown_level_names_the_annotation_and_the_known_levels() -> None:
    with pytest.raises(SnapshotError) as exc:
        _load(_vcjob({"kueue.x-k8s.io/podset-required-topology": "example.com/block"}))
    text = str(exc.value)
    assert "Job 'default/train'" in text or "train" in text
    assert "metadata.annotations[kueue.x-k8s.io/podset-required-topology]" in exc.value.field
    assert "topology.kubernetes.io/rack" in text and "cloud.example.com/spine" in text


def test_required_single_node_is_refused_with_the_slice_hint() -> None:
    with pytest.raises(SnapshotError, match=r"single node.*podset-slice-required-topology"):
        _load(_vcjob({"kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"}))


def test_annotations_and_network_topology_together_are_refused() -> None:
    with pytest.raises(SnapshotError, match="keep one"):
        _load(
            _vcjob(
                {"kueue.x-k8s.io/podset-required-topology": "1"},
                extra_spec="  networkTopology: {mode: hard, highestTierAllowed: 1}\n",
            )
        )


def test_templates_that_disagree_are_refused() -> None:
    with pytest.raises(SnapshotError, match=r"differ from those at metadata\.annotations"):
        _load(
            _vcjob(
                {"kueue.x-k8s.io/podset-required-topology": "1"},
                template_annotations={"kueue.x-k8s.io/podset-required-topology": "2"},
            )
        )


def test_podgroup_annotations_are_read() -> None:
    podgroup = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  name: train
  annotations:
    kueue.x-k8s.io/podset-preferred-topology: topology.kubernetes.io/rack
spec:
  minMember: 2
"""
    job = _job(_load(podgroup))
    assert job.network_topology == NetworkTopology(mode=TopologyMode.SOFT, highest_tier_allowed=1)


def test_topology_levels_must_agree_across_topology_objects() -> None:
    other = (
        KUEUE_TOPOLOGY.replace("name: default", "name: other")
        .replace("  - nodeLabel: cloud.example.com/spine\n", "")
        .replace("topology.kubernetes.io/rack", "cloud.example.com/spine")
    )
    with pytest.raises(SnapshotError, match="is tier 1 here but tier 2"):
        _load(other, _vcjob({}))


# -- scheduling honours them through the network-topology placers -----------------------------


def test_required_rack_keeps_the_gang_in_one_rack() -> None:
    # 4 pods x 4 GPUs: 16 GPUs, exactly one rack of two 8-GPU nodes
    snap = _load(
        _vcjob({"kueue.x-k8s.io/podset-required-topology": "topology.kubernetes.io/rack"}, gpus=4)
    )
    d = gs.schedule(snap)
    assert len(d.binds) == 4
    assert len({RACK_OF[b.node] for b in d.binds}) == 1


def _racks(slots: dict[str, int], topology: dict[str, Any]) -> gs.Snapshot:
    """Nodes with ``slots`` one-CPU pods of room, racks r0 = n0, n1 and r1 = n2, n3 (tier 1)
    under one spine (tier 2), and one gang of ``sum`` pods with ``topology``."""
    size = int(topology.pop("size"))
    return gs.Snapshot.from_dict(
        {
            "nodes": [{"name": n, "allocatable": {"cpu": k}} for n, k in slots.items()],
            "hypernodes": [
                {"name": "r0", "tier": 1, "members": ["n0", "n1"]},
                {"name": "r1", "tier": 1, "members": ["n2", "n3"]},
                {"name": "spine", "tier": 2, "members": ["r0", "r1"]},
            ],
            "queues": [{"name": "default"}],
            "jobs": [{"name": "g", "min_available": size, "network_topology": topology}],
            "tasks": [{"name": f"g-{i}", "job": "g", "request": {"cpu": 1}} for i in range(size)],
        }
    )


def _per_node(snapshot: gs.Snapshot) -> dict[str, int]:
    d = gs.schedule(snapshot)
    assert d.jobs["g"].phase == "Running", d.jobs["g"].message
    return dict(sorted(Counter(b.node for b in d.binds).items()))


def test_node_slices_move_the_gang_to_nodes_that_hold_whole_slices() -> None:
    slots = {"n0": 3, "n1": 1, "n2": 2, "n3": 2}
    # without slices rack r0 takes the gang whole (3 + 1) ...
    assert _per_node(_racks(slots, {"required_tier": 2, "size": 4})) == {"n0": 3, "n1": 1}
    # ... with slices of 2 per node, n0 holds one slice and n1 none: rack r1 it is
    sliced = {"required_tier": 2, "slice_size": 2, "slice_tier": 0, "size": 4}
    assert _per_node(_racks(slots, sliced)) == {"n2": 2, "n3": 2}


def test_rack_slices_split_a_gang_by_whole_slices_per_rack() -> None:
    slots = {"n0": 3, "n1": 0, "n2": 3, "n3": 2}
    plain = _per_node(_racks(slots, {"required_tier": 2, "size": 6}))
    assert plain == {"n0": 1, "n2": 3, "n3": 2}  # the roomier rack first: 1 + 5
    sliced = {"required_tier": 2, "slice_size": 2, "slice_tier": 1, "size": 6}
    per_node = _per_node(_racks(slots, sliced))
    racks = Counter(
        {"n0": "r0", "n1": "r0", "n2": "r1", "n3": "r1"}[n]
        for n, k in per_node.items()
        for _ in range(k)
    )
    assert racks == {"r0": 2, "r1": 4}


def test_slices_from_manifest_annotations_reach_the_placer() -> None:
    # 6 pods x 2 GPUs with slices of 2 per node: every used node holds an even number
    snap = _load(
        _vcjob(
            {
                "kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
                "kueue.x-k8s.io/podset-slice-size": "2",
                "kueue.x-k8s.io/podset-required-topology": "cloud.example.com/spine",
            },
            replicas=6,
            gpus=2,
        )
    )
    d = gs.schedule(snap)
    assert len(d.binds) == 6
    assert all(n % 2 == 0 for n in Counter(b.node for b in d.binds).values())


def test_a_slice_that_cannot_be_met_leaves_the_gang_pending_with_a_reason() -> None:
    # 4 pods x 6 GPUs, slices of 2 per node: no 8-GPU node holds two 6-GPU pods
    snap = _load(
        _vcjob(
            {
                "kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
                "kueue.x-k8s.io/podset-slice-size": "2",
            },
            replicas=4,
            gpus=6,
        )
    )
    d = gs.schedule(snap)
    assert d.binds == ()
    status = d.jobs[_job(snap).name]
    assert status.phase != "Running" and status.message


def test_the_same_rule_from_the_interchange_format() -> None:
    base = _load(_vcjob({}, replicas=6, gpus=2))
    job = _job(base)
    sliced = Job.from_dict(
        {
            **job.to_dict(),
            "network_topology": {"required_tier": 2, "slice_size": 2, "slice_tier": 0},
        }
    )
    snap = gs.Snapshot(
        nodes=base.nodes,
        hypernodes=base.hypernodes,
        queues=base.queues,
        jobs=[sliced],
        tasks=base.tasks,
    )
    again = gs.Snapshot.from_dict(snap.to_dict())
    assert again == snap
    d = gs.schedule(again)
    assert len(d.binds) == 6
    assert all(n % 2 == 0 for n in Counter(b.node for b in d.binds).values())


def test_dumped_manifests_carry_slices_as_kueue_annotations_and_load_back() -> None:
    from gangsched.io.k8s import load_objects
    from gangsched.io.volcano_out import dump_manifests

    slots = {"n0": 3, "n1": 1, "n2": 2, "n3": 2}
    snap = _racks(slots, {"required_tier": 2, "slice_size": 2, "slice_tier": 0, "size": 4})
    docs = dump_manifests(snap)
    (pg,) = [d for d in docs if d["kind"] == "PodGroup"]
    assert "networkTopology" not in pg["spec"]
    assert {k: v for k, v in pg["metadata"]["annotations"].items() if "kueue" in k} == {
        "kueue.x-k8s.io/podset-required-topology": "2",
        "kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
        "kueue.x-k8s.io/podset-slice-size": "2",
    }
    back = load_objects(docs).snapshot
    (job,) = back.jobs
    assert job.network_topology == snap.jobs[0].network_topology
    assert gs.schedule(back).binds == gs.schedule(snap).binds


def _pod(name: str, annotations: dict[str, str]) -> str:
    extra = "".join(f"    {k}: {v!r}\n" for k, v in annotations.items())
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations:
    scheduling.k8s.io/group-name: train
{extra}spec:
  schedulerName: volcano
  containers:
  - name: w
    image: trainer
    resources:
      requests: {{cpu: "1"}}
      limits: {{nvidia.com/gpu: 2}}
"""


def test_pods_of_a_podgroup_carry_the_annotations_kueue_pod_groups_use() -> None:
    podgroup = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  name: train
spec:
  minMember: 2
"""
    ann = {"kueue.x-k8s.io/podset-required-topology": "topology.kubernetes.io/rack"}
    job = _job(_load(podgroup, _pod("p0", ann), _pod("p1", ann)))
    assert job.network_topology == NetworkTopology(mode=TopologyMode.HARD, highest_tier_allowed=1)
    other = {"kueue.x-k8s.io/podset-required-topology": "cloud.example.com/spine"}
    with pytest.raises(SnapshotError, match="differ from those of"):
        _load(podgroup, _pod("p0", ann), _pod("p1", other))
