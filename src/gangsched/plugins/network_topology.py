"""network-topology-aware: Volcano's hypernode bin-packing, for gangs and for normal pods.

Volcano's plugin of the same name scores hypernodes and nodes; gangsched splits it:

* **gangs with a topology** (hard, or soft) are placed by a placer (:mod:`gangsched.placement`,
  through ``allocate``). This plugin's ``hypernode_score`` hands the placer Volcano's
  *HyperNodeOrder*: the tiers are tried from the lowest hypernode tier up (the gradient) and,
  inside a tier, the domains where the gang fits are tried fullest first::

      score(D) = 100 · weight · Σ_r w_r · (used_r(D) + request_r) / allocatable_r(D) / Σ_r w_r

  over the resources the gang asks for that have a weight, ``request`` being the gang's whole
  request (0 when it would overflow ``D``). The first domain where the gang packs is used and
  the placer orders the nodes inside it.
* **normal pods** (jobs without ``network_topology``), when
  ``hypernode.binpack.normal-pod.enable`` is true (default): ``node_score`` is the same
  bin-packing of the pod's own request, summed over the tiers with fading weights::

      score(n) = Σ_t f^(t−1) · binpack(domain of n at tier t) / Σ_t f^(t−1) · 100 · weight

  with ``f`` = ``hypernode.binpack.normal-pod.fading`` (0.8). ``t`` runs over every tier
  number from the lowest hypernode tier to the cluster-wide top domain that Volcano adds at
  session open (highest tier + 1, which holds every node): a tier where the node is under no
  hypernode — a node outside the racks, or a tier number no hypernode has — counts as full
  (binpack 1), as in Volcano, which prefers such nodes. Only the ratios of the weights
  matter, so they are computed in log space (:func:`fading_weights`): huge tier numbers and
  gaps between them cost nothing.

Arguments: ``weight`` (1), ``hypernode.binpack.cpu`` (1), ``hypernode.binpack.memory`` (1),
``hypernode.binpack.resources`` ("a, b") with ``hypernode.binpack.resources.<name>`` (1),
``hypernode.binpack.normal-pod.enable`` (true), ``hypernode.binpack.normal-pod.fading`` (0.8),
``hypernode.gradient.evict.max-hypernodes`` (accepted; eviction gradients are not modelled).

Domain totals are recomputed from the session's arrays when any node changed since the last
call (one ``np.add.at`` per tier); like every row score, a node's score is refreshed only when
the session re-evaluates that node, so scores of *other* nodes in a domain that just filled up
may lag until they are re-evaluated.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gangsched.config import arg_bool, arg_float
from gangsched.errors import ConfigError
from gangsched.framework.extension_points import argument_names
from gangsched.limits import MAX_ARG_WEIGHT
from gangsched.model.topology import Topology, build_topology
from gangsched.placement.problem import HypernodeOrder
from gangsched.plugins._resource_weights import resource_weight_arguments, resource_weights
from gangsched.session.arrays import TaskTemplate
from gangsched.session.changes import ChangeLog

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["NetworkTopologyAwarePlugin", "fading_weights", "tier_fades"]


def tier_fades(fading: float, tiers: tuple[int, ...]) -> list[float]:
    """The weights ``fading^(tier − 1)`` of the given tier numbers, as they are when they
    are representable, else rescaled so the largest is 1 (a score is a ratio of weighted sums,
    so a common factor does not change it). ``fading`` ≥ 0."""
    exps = [t - 1 for t in tiers]
    try:
        weights = [fading**e for e in exps]
    except OverflowError:
        weights = []
    if not exps or (weights and (fading == 0.0 or max(weights) >= 1e-12)):
        return weights
    logf = math.log(fading)
    ref = max(e * logf for e in exps)
    return [math.exp(e * logf - ref) for e in exps]


def fading_weights(fading: float, tiers: tuple[int, ...]) -> tuple[list[float], float]:
    """Volcano's tier weights ``fading^(tier − 1)`` over every tier number from ``tiers[0]``
    to ``tiers[-1]`` (``tiers`` ascending, distinct, ≥ 1): the weight of each given tier and
    the summed weight of the tier numbers in between (gaps), all divided by a common factor
    so the largest term is at most 1. ``fading`` ≥ 0; ``0^0`` is 1 (tier 1 only counts).

    Gap runs are geometric series summed in closed form, so the cost is O(len(tiers))
    whatever the tier numbers are."""
    if not tiers:
        return [], 0.0
    if fading == 0.0:
        return [1.0 if t == 1 else 0.0 for t in tiers], 0.0
    log_f = math.log(fading)
    logs = [(t - 1) * log_f for t in tiers]
    gap_logs: list[float] = []
    for lo_t, hi_t in itertools.pairwise(tiers):
        n = hi_t - lo_t - 1
        if n <= 0:
            continue
        lo, hi = lo_t + 1, hi_t - 1
        # the run's largest term, times Σ_k e^(−|log f|·k) for k < n
        top = (lo - 1) * log_f if log_f <= 0 else (hi - 1) * log_f
        a = abs(log_f)
        series = float(n) if a == 0 else math.expm1(-a * n) / math.expm1(-a)
        gap_logs.append(top + math.log(series))
    ref = max(logs + gap_logs)
    return [math.exp(x - ref) for x in logs], float(sum(math.exp(x - ref) for x in gap_logs))


def session_topology(ssn: Session) -> Topology:
    """The session's topology (built once per snapshot, which keeps it)."""
    return build_topology(ssn.snapshot)


class NetworkTopologyAwarePlugin:
    name = "network-topology-aware"
    known_arguments = (
        *resource_weight_arguments("hypernode.binpack"),
        *argument_names("hypernode.binpack.normal-pod", "enable", "fading"),
        "hypernode.gradient.evict.max-hypernodes",
        "weight",
    )

    def __init__(self, arguments: Mapping[str, object]) -> None:
        big = MAX_ARG_WEIGHT  # weights bounded so the score arithmetic stays finite

        def w(key: str) -> float:
            return arg_float(arguments, key, 1.0, plugin=self.name, maximum=big)

        self.weight = arg_float(
            arguments, "weight", 1.0, plugin=self.name, minimum=-big, maximum=big
        )
        self.weights = resource_weights(arguments, "hypernode.binpack", w, plugin=self.name)
        self.normal_pods = arg_bool(
            arguments, "hypernode.binpack.normal-pod.enable", True, plugin=self.name
        )
        self.fading = arg_float(
            arguments, "hypernode.binpack.normal-pod.fading", 0.8, plugin=self.name
        )
        if self.fading < 0 or any(w < 0 for w in self.weights.values()):
            raise ConfigError(
                "fading and resource weights must be >= 0",
                kind="plugin",
                name=self.name,
                field="arguments",
            )
        self._log: ChangeLog | None = None  # the change log the totals follow
        self._cursor = 0  # its cursor when they were summed
        self._used: list[npt.NDArray[np.int64]] = []
        self._alloc: list[npt.NDArray[np.int64]] = []

    def hypernode_score(self, ssn: Session) -> HypernodeOrder:
        """Volcano's HyperNodeOrder for the placers: this plugin's bin-packing weights over
        the session's resource columns (GPUs as devices)."""
        spec = ssn.arrays.spec
        w = np.zeros(len(spec.names))
        for rname, wt in self.weights.items():
            if rname in spec.names:
                w[spec.index(rname)] = wt
        gpu = float(w[spec.gpu_column])
        w[spec.gpu_column] = 0.0
        return HypernodeOrder(weights=w, gpu_weight=gpu, scale=100.0 * self.weight)

    def _totals(self, ssn: Session) -> None:
        log = ssn.changes
        if self._log is log and not log.changed_since(self._cursor) and self._used:
            return
        topo = session_topology(ssn)
        ranks = range(1, topo.top_tier + 1)  # the cluster-wide top domain included
        self._used = [topo.aggregate(t, ssn.used) for t in ranks]
        self._alloc = [topo.aggregate(t, ssn.arrays.allocatable) for t in ranks]
        self._log, self._cursor = log, log.end

    def node_score(
        self, ssn: Session, tmpl: TaskTemplate, rows: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.float64]:
        out = np.zeros(rows.size)
        if self.weight == 0 or not self.normal_pods:
            return out
        if ssn.snapshot.jobs[tmpl.job].network_topology is not None:
            return out
        spec = ssn.arrays.spec
        cols, ws = [], []
        for rname, w in self.weights.items():
            if rname in spec.names and w > 0:
                c = spec.index(rname)
                if tmpl.request[c] > 0:
                    cols.append(c)
                    ws.append(w)
        topo = session_topology(ssn)
        fades, gaps = fading_weights(self.fading, topo.tiers)
        total = sum(fades) + gaps
        if total <= 0:
            return out
        if cols:
            self._totals(ssn)
        wv = np.array(ws)
        num = np.full(rows.size, float(gaps))  # tier numbers without hypernodes: full
        for t in range(1, topo.top_tier + 1):
            fade = fades[t - 1]
            if fade == 0:
                continue
            dom = topo.domain_of[t - 1][rows]
            inside = dom >= 0
            score = np.ones(rows.size)  # under no hypernode of this tier: full
            if not cols:
                score[inside] = 0.0
            elif inside.any():
                # Worked out once per domain of the tier, then read per row (a row's score
                # is its domain's: the same numbers).
                d = dom[inside]
                alloc = self._alloc[t - 1][:, cols].astype(np.float64)
                after = self._used[t - 1][:, cols] + tmpl.request[cols]
                part = np.where(alloc > 0, wv * after / np.maximum(alloc, 1.0), 0.0)
                inner = part.sum(axis=1) / wv.sum()
                per_domain = np.where((after > alloc).any(axis=1), 0.0, inner)
                score[inside] = per_domain[d]
            num += fade * score
        res: npt.NDArray[np.float64] = num / total
        return res * 100.0 * self.weight
