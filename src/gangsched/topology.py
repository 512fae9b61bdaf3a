"""The network-topology tree as integer arrays.

Theory of operation
-------------------
A snapshot's hypernodes form a tree of *domains*: tier 1 is the closest (NVLink domain, leaf
switch, rack), larger tiers are farther (spine, zone). :func:`build_topology` flattens that tree
into one int array per tier, ``domain_of[tier - 1]`` of shape ``(n_nodes,)``: the index of the
tier's domain that contains each node, or -1 when no domain of that tier covers the node. Like
Volcano, a synthetic cluster-wide domain is added one tier above the highest real tier
(``top_tier``): it contains every node, so "anywhere in the cluster" is just another tier.

Tiers may have gaps (a tier-3 switch directly over tier-1 racks): the missing tier simply has no
domains. The tree is checked to be *laminar* — two domains either nest or are disjoint — so each
node has one chain of enclosing domains and every placement has a well-defined lowest tier.

Domains also have a global numbering (tier by tier, tier 1 first), used where one array must
name domains of several tiers at once (:meth:`Topology.cover`, :meth:`Topology.nest_group`).

Two groupings per tier: :meth:`Topology.group_of` uses the tier's own domains only (uncovered
nodes are singletons); :meth:`Topology.nest_group` lets a node uncovered at a tier fall back to
its largest enclosing lower-tier domain. Laminarity makes the latter nested from tier to tier,
and it is what placements are counted by.

Aggregates (free capacity per domain) are sums over the member nodes, computed with
``np.add.at`` in one pass per tier; :class:`DomainTotals` keeps them current when one node
changes, in O(tiers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .errors import SnapshotError
from .snapshot import Snapshot

__all__ = ["DomainTotals", "Topology", "build_topology"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True, eq=False)
class Topology:
    """Validated topology tree over a cluster's nodes.

    Attributes
    ----------
    n_nodes:
        Number of nodes (snapshot order).
    top_tier:
        Tier of the synthetic cluster-wide domain (highest real tier + 1; 1 without hypernodes).
    domain_of:
        ``(top_tier, n_nodes)`` int64: row ``tier - 1`` holds each node's domain index at that
        tier, -1 when uncovered. The last row (the top tier) is all zeros.
    names:
        Per tier, the domain names (the top tier's single domain is ``"<cluster>"``).
    parent:
        Per tier, ``(n_domains,)`` int64: global id of the nearest enclosing domain of a higher
        tier (the top domain when nothing else encloses it; -1 for the top domain itself).
    offset:
        ``(top_tier + 1,)`` int64: global id of tier ``t``'s first domain is ``offset[t - 1]``.
    """

    n_nodes: int
    top_tier: int
    domain_of: I64
    names: tuple[tuple[str, ...], ...]
    parent: tuple[I64, ...]
    offset: I64

    def n_domains(self, tier: int) -> int:
        """Number of domains of ``tier`` (1 ≤ tier ≤ top_tier)."""
        return len(self.names[tier - 1])

    @property
    def n_total(self) -> int:
        """Number of domains over all tiers (the top domain included)."""
        return int(self.offset[-1])

    def global_id(self, tier: int, index: int) -> int:
        return int(self.offset[tier - 1]) + index

    def tier_of_global(self, gid: int) -> tuple[int, int]:
        """``(tier, index)`` of a global domain id."""
        tier = int(np.searchsorted(self.offset, gid, side="right"))
        return tier, gid - int(self.offset[tier - 1])

    def group_of(self, tier: int) -> I64:
        """Per node, an id that is equal for two nodes iff they share a domain of ``tier``.

        Tier 0 is the node itself. Uncovered nodes get a singleton id of their own (ids of
        singletons start after the tier's domains). Shape ``(n_nodes,)``.
        """
        nodes = np.arange(self.n_nodes, dtype=np.int64)
        if tier <= 0:
            return nodes
        dom = self.domain_of[tier - 1]
        out: I64 = np.where(dom >= 0, dom, self.n_domains(tier) + nodes)
        return out

    def nest_group(self, tier: int) -> I64:
        """Per node, an id that is equal for two nodes iff their *largest* enclosing domain of
        tier ≤ ``tier`` is the same one (see :meth:`cover`).

        This is the grouping the placement objective counts at ``tier``: a node that no domain
        of ``tier`` covers falls back to its domain of the highest lower tier (a rack that sits
        under no spine is its own spine-level group), and to a singleton of its own when no
        domain of tier ≤ ``tier`` covers it (ids of singletons start at :attr:`n_total`).
        Tier 0 is the node itself. Coarser than :meth:`group_of` (equal where the node is
        covered at ``tier``). Shape ``(n_nodes,)``.
        """
        nodes = np.arange(self.n_nodes, dtype=np.int64)
        if tier <= 0:
            return nodes
        cov = self.cover(tier)
        out: I64 = np.where(cov >= 0, cov, self.n_total + nodes)
        return out

    def cover(self, tier: int) -> I64:
        """Per node, the global id of its *largest* enclosing domain of tier ≤ ``tier``
        (-1 when no real or synthetic domain of tier ≤ ``tier`` covers it). Two nodes may share
        a placement constrained to ``tier`` iff their cover ids are equal and not -1."""
        out = np.full(self.n_nodes, -1, dtype=np.int64)
        for t in range(1, min(tier, self.top_tier) + 1):
            dom = self.domain_of[t - 1]
            out = np.where(dom >= 0, dom + self.offset[t - 1], out)
        return out

    def members(self, tier: int, index: int) -> npt.NDArray[np.intp]:
        """Node indices of domain ``index`` of ``tier`` (ascending)."""
        if tier <= 0:
            return np.array([index], dtype=np.intp)
        return np.flatnonzero(self.domain_of[tier - 1] == index)

    def aggregate(self, tier: int, values: npt.NDArray[np.int64]) -> I64:
        """Sum ``values`` ``(n_nodes, k)`` over each domain of ``tier`` → ``(n_domains, k)``."""
        dom = self.domain_of[tier - 1]
        k = values.shape[1] if values.ndim == 2 else 1
        out = np.zeros((self.n_domains(tier), k), dtype=np.int64)
        sel = dom >= 0
        np.add.at(out, dom[sel], values[sel].reshape(-1, k))
        return out

    def name_of(self, tier: int, index: int) -> str:
        if tier <= 0:
            return f"node#{index}"
        return self.names[tier - 1][index]


def _leaves(snapshot: Snapshot) -> list[set[int]]:
    """Leaf node indices of every hypernode (members resolved recursively, lower tiers first)."""
    hns = snapshot.hypernodes
    order = sorted(range(len(hns)), key=lambda i: (hns[i].tier, i))
    leaves: list[set[int]] = [set() for _ in hns]
    for i in order:
        for m in hns[i].members:
            node = snapshot.node_index.get(m)
            if node is not None:
                leaves[i].add(node)
            else:
                leaves[i] |= leaves[snapshot.hypernode_index[m]]
    return leaves


def build_topology(snapshot: Snapshot) -> Topology:
    """Build the :class:`Topology` of ``snapshot``.

    Raises
    ------
    SnapshotError
        When a node lies in two domains of the same tier, or two domains overlap without
        nesting (the message names the hypernode).
    """
    n = len(snapshot.nodes)
    hns = snapshot.hypernodes
    real_top = max((h.tier for h in hns), default=0)
    top = real_top + 1
    leaves = _leaves(snapshot)
    domain_of = np.full((top, n), -1, dtype=np.int64)
    domain_of[top - 1] = 0
    names: list[list[str]] = [[] for _ in range(top)]
    hn_of: list[list[int]] = [[] for _ in range(top)]
    for i, hn in enumerate(hns):
        row = domain_of[hn.tier - 1]
        idx = len(names[hn.tier - 1])
        members = np.fromiter(sorted(leaves[i]), dtype=np.int64, count=len(leaves[i]))
        taken = members[row[members] >= 0]
        if taken.size:
            other = hn_of[hn.tier - 1][int(row[taken[0]])]
            raise SnapshotError(
                f"node {snapshot.nodes[int(taken[0])].name!r} is also under tier-{hn.tier} "
                f"hypernode {hns[other].name!r}",
                kind="hypernode",
                name=hn.name,
                field="members",
            )
        row[members] = idx
        names[hn.tier - 1].append(hn.name)
        hn_of[hn.tier - 1].append(i)
    names[top - 1].append("<cluster>")
    sizes = [len(x) for x in names]
    offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    parent: list[I64] = []
    for t in range(1, top + 1):
        par = np.full(sizes[t - 1], -1, dtype=np.int64)
        if t == top:
            parent.append(par)
            continue
        dom = domain_of[t - 1]
        sel = dom >= 0
        assigned = np.zeros(sizes[t - 1], dtype=np.bool_)
        for u in range(t + 1, top + 1):
            up = domain_of[u - 1][sel]
            lo = np.full(sizes[t - 1], np.iinfo(np.int64).max, dtype=np.int64)
            hi = np.full(sizes[t - 1], np.iinfo(np.int64).min, dtype=np.int64)
            np.minimum.at(lo, dom[sel], up)
            np.maximum.at(hi, dom[sel], up)
            has = hi >= lo  # the domain has at least one node
            bad = has & (lo != hi)
            if bad.any():
                d = int(np.flatnonzero(bad)[0])
                raise SnapshotError(
                    f"partly overlaps a tier-{u} hypernode (domains must nest or be disjoint)",
                    kind="hypernode",
                    name=names[t - 1][d],
                    field="members",
                )
            new = has & ~assigned & (lo >= 0)
            par[new] = lo[new] + offset[u - 1]
            assigned |= new
        parent.append(par)
    return Topology(
        n_nodes=n,
        top_tier=top,
        domain_of=domain_of,
        names=tuple(tuple(x) for x in names),
        parent=tuple(parent),
        offset=offset,
    )


class DomainTotals:
    """Per-tier sums of a per-node quantity, kept current one node at a time.

    ``totals[tier - 1]`` is ``(n_domains(tier), k)``. :meth:`add` applies a change of one node
    to the domain of every tier that covers it.
    """

    __slots__ = ("topology", "totals")

    def __init__(self, topology: Topology, values: npt.NDArray[np.int64]) -> None:
        self.topology = topology
        self.totals: list[I64] = [
            topology.aggregate(t, values) for t in range(1, topology.top_tier + 1)
        ]

    def add(self, node: int, delta: npt.NDArray[np.int64]) -> None:
        """Add ``delta`` ``(k,)`` to every domain containing ``node``."""
        col = self.topology.domain_of[:, node]
        for t in np.flatnonzero(col >= 0).tolist():
            self.totals[t][col[t]] += delta
