"""network-topology-aware: keep whole racks empty by packing normal pods into used domains.

Volcano's plugin of the same name does three things; gangsched splits them:

* hard / soft topology *gangs* are placed by a placer (:mod:`gangsched.placement`, through
  ``allocate``), which picks the tightest allowed domain itself;
* this plugin's ``node_score`` does the third: for *normal* pods (jobs without
  ``network_topology``), when ``hypernode.binpack.normal-pod.enable`` is true (default), a node
  scores by how full its domains would be, the closer tiers weighing more::

      score(n) = Σ_tier f^(tier−1) · binpack(domain of n at tier) / Σ_tier f^(tier−1) · 100 · weight

  with ``f`` = ``hypernode.binpack.normal-pod.fading`` (0.8) and, over the resources the pod
  asks for with weights ``w_r``::

      binpack(D) = Σ_r w_r · (used_r(D) + request_r) / allocatable_r(D) / Σ_r w_r   (0 on overflow)

  Tiers where the node is under no domain are left out of both sums. Topology pods score 0 here.
  ``tier`` is the hypernodes' tier number; only the ratios of the weights matter, so when a huge
  tier number would overflow or underflow ``f^(tier−1)`` the weights are rescaled
  (:func:`tier_fades`).

Arguments: ``weight`` (1), ``hypernode.binpack.cpu`` (1), ``hypernode.binpack.memory`` (1),
``hypernode.binpack.resources`` ("a, b") with ``hypernode.binpack.resources.<name>`` (1),
``hypernode.binpack.normal-pod.enable`` (true), ``hypernode.binpack.normal-pod.fading`` (0.8).

Domain totals are recomputed from the session's arrays when any node changed since the last
call (one ``np.add.at`` per tier); like every row score, a node's score is refreshed only when
the session re-evaluates that node, so scores of *other* nodes in a domain that just filled up
may lag until they are re-evaluated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..arrays import TaskTemplate
from ..config import arg_bool, arg_float, arg_str
from ..errors import ConfigError
from ..limits import MAX_ARG_WEIGHT
from ..topology import Topology, build_topology

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["NetworkTopologyAwarePlugin", "tier_fades"]


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


def session_topology(ssn: Session) -> Topology:
    """The session's topology, built once per session (shared scratch key ``_topology``)."""
    topo = ssn.scratch.get("_topology")
    if topo is None:
        topo = build_topology(ssn.snapshot)
        ssn.scratch["_topology"] = topo
    assert isinstance(topo, Topology)
    return topo


class NetworkTopologyAwarePlugin:
    name = "network-topology-aware"
    #: Argument names this plugin reads or accepts (``*``: any text); others are refused.
    known_arguments: tuple[str, ...] = (
        "hypernode.binpack.cpu",
        "hypernode.binpack.memory",
        "hypernode.binpack.normal-pod.enable",
        "hypernode.binpack.normal-pod.fading",
        "hypernode.binpack.resources",
        "hypernode.binpack.resources.*",
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
        self.weights: dict[str, float] = {
            "cpu": w("hypernode.binpack.cpu"),
            "memory": w("hypernode.binpack.memory"),
        }
        extra = arg_str(arguments, "hypernode.binpack.resources", "", plugin=self.name)
        for name in (r.strip() for r in extra.split(",")):
            if name:
                self.weights[name] = w(f"hypernode.binpack.resources.{name}")
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
        self._cache_key = -1
        self._used: list[npt.NDArray[np.int64]] = []
        self._alloc: list[npt.NDArray[np.int64]] = []

    def _totals(self, ssn: Session) -> None:
        key = int(ssn.node_version.sum())
        if key == self._cache_key and self._used:
            return
        topo = session_topology(ssn)
        real = range(1, topo.top_tier)  # the synthetic top domain is left out
        self._used = [topo.aggregate(t, ssn.used) for t in real]
        self._alloc = [topo.aggregate(t, ssn.arrays.allocatable) for t in real]
        self._cache_key = key

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
        if not cols:
            return out
        self._totals(ssn)
        topo = session_topology(ssn)
        wv = np.array(ws)
        num = np.zeros(rows.size)
        den = np.zeros(rows.size)
        fades = tier_fades(self.fading, topo.tiers[:-1])
        for t in range(1, topo.top_tier):
            dom = topo.domain_of[t - 1][rows]
            inside = dom >= 0
            if not inside.any():
                continue
            d = dom[inside]
            alloc = self._alloc[t - 1][d][:, cols].astype(np.float64)
            after = self._used[t - 1][d][:, cols] + tmpl.request[cols]
            part = np.where(alloc > 0, wv * after / np.maximum(alloc, 1.0), 0.0)
            score = part.sum(axis=1) / wv.sum()
            score = np.where(((after > alloc) & (alloc > 0)).any(axis=1), 0.0, score)
            fade = fades[t - 1]
            num[inside] += fade * score
            den[inside] += fade
        res: npt.NDArray[np.float64] = np.where(den > 0, num / np.maximum(den, 1e-12), 0.0)
        return res * 100.0 * self.weight
