"""The network-topology tree as integer arrays.

Theory of operation
-------------------
A snapshot's hypernodes form a tree of *domains*: tier 1 is the closest (NVLink domain, leaf
switch, rack), larger tiers are farther (spine, zone). Like Volcano, a synthetic cluster-wide
domain is added one tier above the highest real tier: it contains every node, so "anywhere in
the cluster" is just another tier.

Ranks
~~~~~
Only the *order* of tiers matters, so the arrays are indexed by **rank**, not by tier number:
rank ``r`` (1 ≤ r ≤ :attr:`Topology.top_tier`) is the ``r``-th smallest tier number present
among the hypernodes, and the last rank is the synthetic top. :attr:`Topology.tiers` gives each
rank's tier number, so tiers ``{1, 2, 1000}`` are ranks 1, 2, 3 (and the top, tier 1001, rank
4): cost and memory follow the number of distinct tiers, never the tier numbers. Every method
taking a ``tier`` argument takes a rank; user tier numbers (a job's ``highest_tier_allowed``, a
slice tier) are mapped with :meth:`Topology.rank_of` / :meth:`Topology.own_rank` and shown back
with :meth:`Topology.tier_number`. A tier number absent from the snapshot (a gap) has no rank:
"within tier 3" when tiers are ``{1, 5}`` is "within a tier-1 domain" (rank 1).

:func:`build_topology` flattens the tree into one int array per rank, ``domain_of[rank - 1]``
of shape ``(n_nodes,)``: the index of the rank's domain that contains each node, or -1 when no
domain of that rank covers the node. The tree is checked to be *laminar* — two domains either
nest or are disjoint — so each node has one chain of enclosing domains and every placement has
a well-defined lowest rank.

Domains also have a global numbering (rank by rank, rank 1 first), used where one array must
name domains of several ranks at once (:meth:`Topology.cover`, :meth:`Topology.nest_group`).

Two groupings per rank: :meth:`Topology.group_of` uses the rank's own domains only (uncovered
nodes are singletons); :meth:`Topology.nest_group` lets a node uncovered at a rank fall back to
its largest enclosing lower-rank domain. Laminarity makes the latter nested from rank to rank,
and it is what placements are counted by.

Aggregates (free capacity per domain) are sums over the member nodes, computed with
``np.add.at`` in one pass per rank; :class:`DomainTotals` keeps them current when one node
changes, in O(ranks).

Building is O(ranks · n log n) and iterative (no recursion, whatever the depth of the tree);
the number of distinct tiers is bounded by :attr:`~gangsched.limits.Limits.max_tiers`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gangsched._types import BOOL, I64
from gangsched.errors import SnapshotError
from gangsched.model.snapshot import Snapshot

__all__ = ["DomainTotals", "Topology", "build_topology"]


@dataclass(frozen=True, slots=True, eq=False)
class Topology:
    """Validated topology tree over a cluster's nodes, indexed by tier rank.

    Attributes
    ----------
    n_nodes:
        Number of nodes (snapshot order).
    top_tier:
        Rank of the synthetic cluster-wide domain (number of distinct real tiers + 1; 1
        without hypernodes).
    domain_of:
        ``(top_tier, n_nodes)`` int64: row ``rank - 1`` holds each node's domain index at that
        rank, -1 when uncovered. The last row (the top) is all zeros.
    names:
        Per rank, the domain names (the top's single domain is ``"<cluster>"``).
    parent:
        Per rank, ``(n_domains,)`` int64: global id of the nearest enclosing domain of a higher
        rank (the top domain when nothing else encloses it; -1 for the top domain itself and
        for a domain without nodes).
    offset:
        ``(top_tier + 1,)`` int64: global id of rank ``r``'s first domain is ``offset[r - 1]``.
    tiers:
        ``(top_tier,)`` the user tier number of each rank, ascending; the last is the
        synthetic top's (highest real tier + 1).
    cover_of:
        ``(top_tier, n_nodes)`` int64: row ``rank - 1`` is :meth:`cover` of that rank.
    """

    n_nodes: int
    top_tier: int
    domain_of: I64
    names: tuple[tuple[str, ...], ...]
    parent: tuple[I64, ...]
    offset: I64
    tiers: tuple[int, ...]
    cover_of: I64

    def rank_of(self, tier: int) -> int:
        """Highest rank whose tier number is ≤ ``tier`` (0 when every tier present is higher;
        the top rank from the top tier number on): "within tier ``tier``" as a rank."""
        return bisect_right(self.tiers, tier)

    def own_rank(self, tier: int) -> int:
        """The rank whose domains are exactly the domains of tier number ``tier``; 0 (the
        nodes themselves) when ``tier`` is 0 or no hypernode has that tier, whose domains are
        then the nodes alone (as in :meth:`group_of`)."""
        r = bisect_right(self.tiers, tier)
        return r if r > 0 and self.tiers[r - 1] == tier else 0

    def tier_number(self, rank: int) -> int:
        """User tier number of ``rank`` (0 for rank 0, the node level)."""
        return self.tiers[rank - 1] if rank > 0 else 0

    def n_domains(self, tier: int) -> int:
        """Number of domains of rank ``tier`` (1 ≤ tier ≤ top_tier)."""
        return len(self.names[tier - 1])

    def domain_masks(self, highest_tier_allowed: int | None) -> list[BOOL]:
        """Node masks of every domain a hard topology allows, lowest rank first: the ranks
        within tier number ``highest_tier_allowed`` (``None``: every rank, the top included)."""
        allowed = (
            self.top_tier if highest_tier_allowed is None else self.rank_of(highest_tier_allowed)
        )
        return [
            self.domain_of[rank - 1] == d
            for rank in range(1, min(allowed, self.top_tier) + 1)
            for d in range(self.n_domains(rank))
        ]

    @property
    def n_total(self) -> int:
        """Number of domains over all ranks (the top domain included)."""
        return int(self.offset[-1])

    def global_id(self, tier: int, index: int) -> int:
        return int(self.offset[tier - 1]) + index

    def tier_of_global(self, gid: int) -> tuple[int, int]:
        """``(rank, index)`` of a global domain id."""
        tier = int(np.searchsorted(self.offset, gid, side="right"))
        return tier, gid - int(self.offset[tier - 1])

    def group_of(self, tier: int) -> I64:
        """Per node, an id that is equal for two nodes iff they share a domain of rank ``tier``.

        Rank 0 is the node itself. Uncovered nodes get a singleton id of their own (ids of
        singletons start after the rank's domains). Shape ``(n_nodes,)``.
        """
        nodes = np.arange(self.n_nodes, dtype=np.int64)
        if tier <= 0:
            return nodes
        dom = self.domain_of[tier - 1]
        out: I64 = np.where(dom >= 0, dom, self.n_domains(tier) + nodes)
        return out

    def nest_group(self, tier: int) -> I64:
        """Per node, an id that is equal for two nodes iff their *largest* enclosing domain of
        rank ≤ ``tier`` is the same one (see :meth:`cover`).

        This is the grouping the placement objective counts at ``tier``: a node that no domain
        of ``tier`` covers falls back to its domain of the highest lower rank (a rack that sits
        under no spine is its own spine-level group), and to a singleton of its own when no
        domain of rank ≤ ``tier`` covers it (ids of singletons start at :attr:`n_total`).
        Rank 0 is the node itself. Coarser than :meth:`group_of` (equal where the node is
        covered at ``tier``). Shape ``(n_nodes,)``.
        """
        nodes = np.arange(self.n_nodes, dtype=np.int64)
        if tier <= 0:
            return nodes
        cov = self.cover(tier)
        out: I64 = np.where(cov >= 0, cov, self.n_total + nodes)
        return out

    def cover(self, tier: int) -> I64:
        """Per node, the global id of its *largest* enclosing domain of rank ≤ ``tier``
        (-1 when no real or synthetic domain of rank ≤ ``tier`` covers it). Two nodes may share
        a placement constrained to ``tier`` iff their cover ids are equal and not -1."""
        if tier <= 0:
            return np.full(self.n_nodes, -1, dtype=np.int64)
        row: I64 = self.cover_of[min(tier, self.top_tier) - 1]
        return row

    def members(self, tier: int, index: int) -> npt.NDArray[np.intp]:
        """Node indices of domain ``index`` of rank ``tier`` (ascending)."""
        if tier <= 0:
            return np.array([index], dtype=np.intp)
        return np.flatnonzero(self.domain_of[tier - 1] == index)

    def aggregate(self, tier: int, values: npt.NDArray[np.int64]) -> I64:
        """Sum ``values`` ``(n_nodes, k)`` over each domain of rank ``tier`` →
        ``(n_domains, k)``."""
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
    """Leaf node indices of every hypernode (members resolved lower tiers first, no recursion:
    a member hypernode has a strictly lower tier, so its leaves are already known)."""
    hns = snapshot.hypernodes
    order = sorted(range(len(hns)), key=lambda i: (hns[i].tier, i))
    leaves: list[set[int]] = [set() for _ in hns]
    for i in order:
        out = leaves[i]
        for m in hns[i].members:
            node = snapshot.node_index.get(m)
            if node is not None:
                out.add(node)
            else:
                out |= leaves[snapshot.hypernode_index[m]]
    return leaves


def _ranks(snapshot: Snapshot) -> tuple[int, ...]:
    """The distinct tier numbers of the snapshot's hypernodes, ascending, then the synthetic
    top's (highest + 1; 1 without hypernodes): the user tier number of each rank."""
    hns = snapshot.hypernodes
    distinct = sorted({h.tier for h in hns})
    limit = snapshot.limits.max_tiers
    if len(distinct) > limit:
        first = next(h for h in hns if h.tier == distinct[limit])
        raise SnapshotError(
            f"{len(distinct)} distinct hypernode tiers is beyond the limit of {limit} "
            "(Limits.max_tiers)",
            kind="hypernode",
            name=first.name,
            field="tier",
        )
    return (*distinct, (distinct[-1] if distinct else 0) + 1)


def build_topology(snapshot: Snapshot) -> Topology:
    """Build the :class:`Topology` of ``snapshot``.

    Cost: O(ranks · n log n) time and O(ranks · n) memory, whatever the tier numbers are.

    Raises
    ------
    SnapshotError
        When a node lies in two domains of the same tier, two domains overlap without nesting
        (the message names the hypernode), or the hypernodes have more distinct tiers than
        ``snapshot.limits.max_tiers``.
    """
    cached = snapshot._topology
    if isinstance(cached, Topology):
        return cached
    n = len(snapshot.nodes)
    hns = snapshot.hypernodes
    tiers = _ranks(snapshot)
    rank_of = {t: r for r, t in enumerate(tiers, start=1)}
    top = len(tiers)
    leaves = _leaves(snapshot)
    domain_of = np.full((top, n), -1, dtype=np.int64)
    domain_of[top - 1] = 0
    names: list[list[str]] = [[] for _ in range(top)]
    hn_of: list[list[int]] = [[] for _ in range(top)]
    for i, hn in enumerate(hns):
        r = rank_of[hn.tier]
        row = domain_of[r - 1]
        idx = len(names[r - 1])
        members = np.fromiter(sorted(leaves[i]), dtype=np.int64, count=len(leaves[i]))
        taken = members[row[members] >= 0]
        if taken.size:
            other = hn_of[r - 1][int(row[taken[0]])]
            raise SnapshotError(
                f"node {snapshot.nodes[int(taken[0])].name!r} is also under tier-{hn.tier} "
                f"hypernode {hns[other].name!r}",
                kind="hypernode",
                name=hn.name,
                field="members",
            )
        row[members] = idx
        names[r - 1].append(hn.name)
        hn_of[r - 1].append(i)
    del leaves
    names[top - 1].append("<cluster>")
    sizes = [len(x) for x in names]
    offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    parent = _parents(domain_of, sizes, offset, names, tiers)
    cover_of = np.empty((top, n), dtype=np.int64)
    cov = np.full(n, -1, dtype=np.int64)
    for r in range(1, top + 1):
        dom = domain_of[r - 1]
        cov = np.where(dom >= 0, dom + offset[r - 1], cov)
        cover_of[r - 1] = cov
    for arr in (domain_of, cover_of, offset, *parent):
        arr.setflags(write=False)
    # A snapshot keeps its topology for every cycle that reads it: nothing may write to it.
    for arr in (domain_of, offset, cover_of, *parent):
        arr.flags.writeable = False
    topo = Topology(
        n_nodes=n,
        top_tier=top,
        domain_of=domain_of,
        names=tuple(tuple(x) for x in names),
        parent=tuple(parent),
        offset=offset,
        tiers=tiers,
        cover_of=cover_of,
    )
    object.__setattr__(snapshot, "_topology", topo)  # every later call shares it
    return topo


def _parents(
    domain_of: I64,
    sizes: list[int],
    offset: I64,
    names: list[list[str]],
    tiers: tuple[int, ...],
) -> list[I64]:
    """Per rank, the global id of each domain's nearest enclosing domain of a higher rank, after
    checking laminarity: top-down, every node gets a *path* id, equal for two nodes iff they
    lie in the same domain (or in none) at every rank above; a domain is laminar iff all its
    nodes share the path id of the rank above it. O(ranks · n log n)."""
    top, n = domain_of.shape
    parent: list[I64] = [np.full(s, -1, dtype=np.int64) for s in sizes]
    path = np.zeros(n, dtype=np.int64)  # above the top: everything alike
    near = np.full(n, int(offset[top - 1]), dtype=np.int64)  # smallest enclosing domain above
    for r in range(top - 1, 0, -1):
        # path / near of rank r + 1 (above r)
        dom_up = domain_of[r]
        _, path = np.unique(np.stack([path, dom_up]), axis=1, return_inverse=True)
        path = path.reshape(-1).astype(np.int64)
        near = np.where(dom_up >= 0, dom_up + offset[r], near)
        dom = domain_of[r - 1]
        sel = dom >= 0
        if not sel.any():
            continue
        d_sel, p_sel = dom[sel], path[sel]
        lo = np.full(sizes[r - 1], np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(sizes[r - 1], np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(lo, d_sel, p_sel)
        np.maximum.at(hi, d_sel, p_sel)
        bad = (hi >= lo) & (lo != hi)
        if bad.any():
            d = int(np.flatnonzero(bad)[0])
            members = np.flatnonzero(dom == d)
            u = next(
                u for u in range(r + 1, top + 1) if np.unique(domain_of[u - 1][members]).size > 1
            )
            raise SnapshotError(
                f"partly overlaps a tier-{tiers[u - 1]} hypernode (domains must nest or be "
                "disjoint)",
                kind="hypernode",
                name=names[r - 1][d],
                field="members",
            )
        parent[r - 1][d_sel] = near[sel]
    return parent


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
