"""Topology tree → int arrays: domains per tier, the synthetic top, laminarity, aggregates."""

from __future__ import annotations

import numpy as np
import pytest

from _placement_cases import fat_tree_snapshot
from gangsched.errors import SnapshotError
from gangsched.model import HyperNode, Node
from gangsched.model.snapshot import Snapshot
from gangsched.model.topology import DomainTotals, build_topology


def test_fat_tree_domains_parents_and_top() -> None:
    topo = build_topology(fat_tree_snapshot(spines=2, racks=2, nodes=2))
    assert topo.top_tier == 3
    assert topo.domain_of[0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert topo.domain_of[1].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topo.domain_of[2].tolist() == [0] * 8
    assert topo.names[0] == ("s0r0", "s0r1", "s1r0", "s1r1")
    assert topo.names[2] == ("<cluster>",)
    # parents are global ids: racks → spines (offset 4), spines → top (offset 6)
    assert topo.parent[0].tolist() == [4, 4, 5, 5]
    assert topo.parent[1].tolist() == [6, 6]
    assert topo.parent[2].tolist() == [-1]
    assert topo.tier_of_global(5) == (2, 1)
    assert topo.members(1, 2).tolist() == [4, 5]


def test_uncovered_nodes_and_tier_gaps() -> None:
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 1}) for i in range(5)]
    hns = [
        HyperNode(name="r0", tier=1, members=["n0", "n1"]),
        HyperNode(name="r1", tier=1, members=["n2"]),
        HyperNode(name="z", tier=3, members=["r0", "r1"]),
    ]
    topo = build_topology(Snapshot(nodes=nodes, hypernodes=hns))
    # arrays are indexed by rank: tiers 1 and 3 are ranks 1 and 2, the top (tier 4) rank 3
    assert topo.top_tier == 3 and topo.tiers == (1, 3, 4)
    assert [topo.rank_of(t) for t in range(6)] == [0, 1, 1, 2, 3, 3]
    assert [topo.own_rank(t) for t in range(5)] == [0, 1, 0, 2, 3]
    assert topo.domain_of[0].tolist() == [0, 0, 1, -1, -1]
    assert topo.domain_of[1].tolist() == [0, 0, 0, -1, -1]
    # group ids give uncovered nodes singletons; cover takes the largest domain ≤ rank
    assert topo.group_of(1).tolist() == [0, 0, 1, 2 + 3, 2 + 4]
    assert topo.cover(1).tolist() == [0, 0, 1, -1, -1]
    z = topo.global_id(2, 0)
    assert topo.cover(2).tolist() == [z, z, z, -1, -1]
    assert topo.cover(3)[3] == topo.global_id(3, 0)
    assert topo.parent[0].tolist() == [z, z]


def test_partial_overlap_is_rejected_with_the_hypernode_named() -> None:
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 1}) for i in range(3)]
    hns = [
        HyperNode(name="r0", tier=1, members=["n0", "n1"]),
        HyperNode(name="big", tier=2, members=["n1", "n2"]),
    ]
    with pytest.raises(SnapshotError, match=r"r0.*partly overlaps"):
        build_topology(Snapshot(nodes=nodes, hypernodes=hns))


def test_node_in_two_domains_of_one_tier_is_rejected() -> None:
    nodes = [Node(name=f"n{i}", allocatable={"cpu": 1}) for i in range(2)]
    hns = [
        HyperNode(name="r0", tier=1, members=["n0"]),
        HyperNode(name="a", tier=2, members=["r0"]),
        HyperNode(name="b", tier=2, members=["n0", "n1"]),
    ]
    with pytest.raises(SnapshotError, match=r"hypernode 'b'.*also under tier-2 hypernode 'a'"):
        build_topology(Snapshot(nodes=nodes, hypernodes=hns))


def test_aggregate_and_incremental_totals_agree() -> None:
    topo = build_topology(fat_tree_snapshot(spines=2, racks=3, nodes=4))
    rng = np.random.default_rng(0)
    values = rng.integers(0, 100, size=(topo.n_nodes, 3)).astype(np.int64)
    totals = DomainTotals(topo, values)
    for _ in range(20):
        node = int(rng.integers(topo.n_nodes))
        delta = rng.integers(-5, 5, size=3).astype(np.int64)
        values[node] += delta
        totals.add(node, delta)
    for tier in range(1, topo.top_tier + 1):
        expect = topo.aggregate(tier, values)
        assert np.array_equal(totals.totals[tier - 1], expect)
        # brute force: explicit sum per domain
        for d in range(topo.n_domains(tier)):
            assert (expect[d] == values[topo.members(tier, d)].sum(axis=0)).all()


def test_no_hypernodes_gives_a_single_cluster_domain() -> None:
    topo = build_topology(Snapshot(nodes=[Node(name="a"), Node(name="b")]))
    assert topo.top_tier == 1 and topo.domain_of.tolist() == [[0, 0]]
    assert topo.cover(1).tolist() == [0, 0]
