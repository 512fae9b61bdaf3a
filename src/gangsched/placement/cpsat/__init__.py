"""CP-SAT placers: exact single-gang placement and joint multi-gang placement.

This package is the only one that imports OR-Tools.

Theory of operation
-------------------
**Single gang.** Tiers are tried from the lowest (one node, tier 0) to the highest the gang may
span, as Volcano's gradients do. (A topology gang of a problem with a hypernode order follows
Volcano's preference instead: from the lowest hypernode tier, the candidate domains one at a
time in hypernode-score order, the first feasible one winning; see ``_place_one_preferred``.)
At a tier, the candidate domains are those whose summed
per-node replica capacity covers the gang (:func:`~gangsched.placement._common.domain_order`,
a necessary condition), tightest first; they are handed to the solver in chunks of
``max_domains`` — a 5,000-node cluster is never given whole. The first chunk with a solution
ends the search, so the lowest tier is always found; the rest of the objective is minimised
inside the chunk (with the default chunk every candidate domain of a small cluster is in it).
The greedy answer is computed first: it is the hint, the time-out fallback, and its domain is
always in the first chunk of its tier, so the solver never answers worse than greedy.

For a one-template gang without slices, :mod:`._exact` computes every candidate domain's exact
optimum first (a tree knapsack in NumPy). The first chunk is then only the domains that reach
the best optimum, each objective level gets that optimum as a lower bound, and the knapsack's
placement is the hint: every level is proven as soon as the hint is accepted, and every other
domain is pruned by its (exact) bound.

For a gang of several templates without slices, :mod:`._roles` does the same with the
dominant role (the replicas of one template every placement holds): its knapsack optimum is
a lexicographic lower bound per domain, its placement plus the small roles (added where they
cost least) the hint. When the hint reaches the bound the levels are closed by it; otherwise
the bounds order and prune the domains (solved ``max_domains`` at a time), a chunk's least
bound bounds each level while the earlier ones sit at its values, and once the node count is
known a cardinality knapsack (:func:`._bounds.waste_bound`) bounds the emptiness.

The model over a chunk (style: counts, not per-task booleans):

* ``c[t, u]`` replicas of template ``t`` on unit ``u`` — only where the mask and the capacity
  allow (``0 ≤ c ≤ q[t, u]·m[u]``);
* units are nodes, or, for a one-template gang, *classes* of nodes with identical capacity,
  emptiness and domains (a class of ``k`` nodes gets ``m[u] ∈ [0, k]`` nodes used and
  ``c ≤ q·m``: exact because one template's per-node capacity is a single number ``q``;
  classes are expanded to nodes in index order);
* per node and resource ``Σ_t req[t, r]·c[t, n] ≤ free[n, r]`` (left out when implied);
* GPUs: whole-device replicas ``Σ_t g_t·c[t, n] ≤ whole_free[n]``; when a node may host a
  shared-device template together with another GPU template, the node gets a per-device model
  (``x[t, n, d]`` shares of ``t`` on device ``d``, ``Σ_d x = g_t·c``, ``x ≤ c``, ``w[n, d]``
  for a whole device, ``Σ_t milli_t·x + cap·w ≤ free_d``), which is exact — shares of one
  replica land on distinct devices because ``x ≤ c``. A lone shared template is exact through
  ``q`` already;
* all or nothing: ``Σ c = size`` (each template between its minimum and its count);
* one domain of the tier: ``Σ_d y[d] = 1``, ``m[u] ≤ k·y[dom(u)]``; one ``z`` per group of
  each lower tier, ``m[u] ≤ k·z[grp_t(u)]``, where the groups are the objective's
  (:meth:`~gangsched.model.topology.Topology.nest_group`: a node uncovered at a tier counts with its
  lower-tier domain); slices: ``Σ_{u ∈ e} c = slice·s_e``;
* objective (lexicographic, as one weighted sum whose weights provably separate the levels:
  each weight exceeds the largest possible value of everything below it): fewest domains of
  tier ``s−1``, …, of tier 1, then fewest nodes, then the least node emptiness (binpack).
  Tiers ``≥ s`` need no term: every placement inside one tier-``s`` domain counts one group
  there.

**Joint.** Phase 1 maximises the weight of the gangs placed, phase 2 places them compactly.
Each gang chooses one domain: of its highest allowed tier (hard gangs), else the cluster-wide
top domain (soft gangs and gangs without a constraint may go anywhere; confining them would
restrict the problem). When all replicas of all gangs are interchangeable (one shared
template; masks that leave out only nodes no gang may use; see :class:`_Aggregate`), phase 1
is a model on aggregate domain capacities with one count per (gang kind, domain), exact by
Hall's condition over the laminar family of domains, and skipped when greedy reaches the
knapsack bound on the summed room; phase 2 places the chosen gangs one at a time inside their
domains, innermost first, by the exact single-gang search. Otherwise the relaxation of
:mod:`._relax` (domain rooms per resource, device capacity, node signature and device
granularity) gives a valid upper bound on the weight and a domain per gang; a placement guided
by it (greedy inside each chosen domain) that reaches the bound is OPTIMAL. If it falls short
and no gang has slices, the model of :mod:`._classes` decides: one count per (replica class,
node) — a class is a request row, device need and mask shared by replicas of any gangs — with
the exact per-node capacities, a domain choice per gang and Hall rows per (class, domain),
exact for the weight; its OPTIMAL is a proof. With slices, one node-level model —
``placed[g]`` with ``Σ c[g] = size_g·placed[g]`` over the union of the gangs' first
``max_domains`` candidate domains — runs when it has at most ``max_joint_cells`` count
variables (after a repair search, :mod:`._repair`, has raised the incumbent by greedy moves);
its OPTIMAL counts only when no candidate domain was left out. The best placement found is
returned with its gap to the least valid bound, then polished (each gang re-placed by greedy
with the others fixed, kept when its objective is better).

Status: OPTIMAL means optimal for the problem as posed; FEASIBLE gives a placement and the gap
to a valid bound; INFEASIBLE is a proof that nothing fits (with the reason); TIMED_OUT means
the budget ran out before any solution and greedy's answer is returned with ``fallback=True``;
MODEL_INVALID raises :class:`~gangsched.errors.SolverError`. ``PlacementResult.limit`` names
the budget that cut the search. The wall-clock budget is checked before every model is built
and every solve starts (see ``docs/placement.md``, the budget rule).
"""

from __future__ import annotations

from gangsched.placement.cpsat._placer import CpSatPlacer, JointCpSatPlacer

__all__ = ["CpSatPlacer", "JointCpSatPlacer"]
