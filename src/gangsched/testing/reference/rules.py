"""The plain reference scheduler's quota and node rules: proportion, overcommit, predicates,
fit and scores (see :mod:`gangsched.testing.reference`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gangsched.config import Config, arg_bool, arg_float, arg_str
from gangsched.model import QueueState
from gangsched.model.snapshot import Snapshot
from gangsched.plugins.proportion import water_fill
from gangsched.testing.reference.state import DEFAULT_CPU, DEFAULT_MEMORY, EPS, SLACK, _State
from gangsched.units import CPU, GPU, MEMORY, PODS


class _Rules(_State):
    """Queue shares and overcommit (opened with the cycle), node predicates, fit and scores."""

    def __init__(self, snap: Snapshot, config: Config) -> None:
        super().__init__(snap, config)
        self._open_overcommit()
        self._open_proportion()
        self._open_scorers()

    # ------------------------------------------------------------ proportion, overcommit

    def _open_proportion(self) -> None:
        snap, res = self.snap, self.res
        request = [{r: float(a[r]) for r in res} for a in self.queue_alloc]
        for t in range(len(snap.tasks)):
            # Pending tasks, and Releasing ones of a job not completed: they come back.
            returning = (
                self.state[t] == "Releasing"
                and snap.jobs[self.job_of[t]].phase.value != "Completed"
            )
            if self.state[t] == "Pending" or returning:
                for r, v in self.nominal(t).items():
                    request[self.queue_of[self.job_of[t]]][r] += v
        self.q_inqueue = [dict.fromkeys(res, 0.0) for _ in snap.queues]
        self.q_elastic = [dict.fromkeys(res, 0.0) for _ in snap.queues]
        for j, job in enumerate(snap.jobs):
            need, q = self.vector(job.min_resources), self.queue_of[j]
            held = self.count(j, ("Allocated", "Bound", "Running")) >= job.min_available
            if job.min_resources is not None and (
                self.phase[j] == "Inqueue" or (self.phase[j] == "Running" and held)
            ):
                for r in res:
                    if need[r] > 0:
                        self.q_inqueue[q][r] += max(need[r] - self.job_alloc[j][r], 0)
            for r in res:
                self.q_elastic[q][r] += max(self.job_alloc[j][r] - need[r], 0)
        guarantee = [self.vector(q.guarantee) for q in snap.queues]
        capability = []
        for queue in snap.queues:
            cap = {r: math.inf for r in res}
            for r, v in (queue.capability or {}).items():
                if r != PODS and not (r in (CPU, MEMORY) and v <= 0):
                    cap[r] = float(v)
            capability.append(cap)
        spare = {r: max(self.total[r] - sum(g[r] for g in guarantee), 0.0) for r in res}
        real = [
            {r: min(spare[r] + g[r], c[r]) for r in res}
            for g, c in zip(guarantee, capability, strict=True)
        ]
        for row in request + self.q_inqueue + self.q_elastic:
            row[PODS] = 0.0

        def matrix(rows: list[dict[str, Any]]) -> Any:
            return np.array([[row[r] for r in res] for row in rows], dtype=np.float64).reshape(
                len(rows), len(res)
            )

        deserved = water_fill(
            np.array([self.total[r] for r in res]),
            np.array([q.weight for q in snap.queues], dtype=np.float64),
            matrix(request),
            matrix(guarantee),
            matrix(real),
            participating=np.array([q in self.queue_of for q in range(len(snap.queues))]),
        )
        self.deserved = [{r: float(row[i]) for i, r in enumerate(res)} for row in deserved]
        self.real = real

    def _open_overcommit(self) -> None:
        opt = self.option("overcommit")
        factor = (
            arg_float(opt.arguments, "overcommit-factor", 1.2, plugin="overcommit") if opt else 1.2
        )
        factor = factor if factor >= 1.0 else 1.2
        used = {r: sum(u[r] for u in self.used) for r in self.res}
        self.oc_idle = {r: self.total[r] * factor - used[r] for r in self.res}
        self.oc_inqueue = dict.fromkeys(self.res, 0)
        for j, job in enumerate(self.snap.jobs):
            if job.min_resources is None:
                continue
            need = self.vector(job.min_resources)
            if self.phase[j] == "Inqueue":
                self.add(self.oc_inqueue, need)
            elif self.phase[j] == "Running":
                for r in self.res:
                    self.oc_inqueue[r] += max(need[r] - self.job_alloc[j][r], 0)

    def enqueueable(self, name: str, j: int) -> bool:
        job, q = self.snap.jobs[j], self.queue_of[j]
        if name == "proportion" and self.snap.queues[q].state is not QueueState.OPEN:
            return False
        if job.min_resources is None:
            return True
        need = self.vector(job.min_resources)
        dims = [r for r in self.res if need[r] > 0]
        if name == "overcommit":
            return all(self.oc_inqueue[r] + need[r] <= self.oc_idle[r] for r in dims)
        a, inq, el = self.queue_alloc[q], self.q_inqueue[q], self.q_elastic[q]
        return all(a[r] + inq[r] - el[r] + need[r] <= self.real[q][r] + SLACK for r in dims)

    def overused(self, q: int) -> bool:
        if not self.has("overused", "proportion"):
            return False
        d, a = self.deserved[q], self.queue_alloc[q]
        return all(d[r] < a[r] or abs(d[r] - a[r]) < EPS for r in self.res if r != PODS)

    def allocatable(self, q: int, t: int) -> bool:
        if not self.has("allocatable", "proportion"):
            return True
        if self.snap.queues[q].state is not QueueState.OPEN:
            return False
        req = self.nominal(t)
        d, a, real = self.deserved[q], self.queue_alloc[q], self.real[q]
        # within Volcano's tolerance of 0.1 unit
        return all(
            a[r] + v < min(d[r], real[r]) + EPS for r, v in req.items() if v > 0 and r != PODS
        )

    # ------------------------------------------------------------ nodes

    def passes(self, t: int, n: int) -> bool:
        """The predicates plugin: cordon, node selector, hard taints, GPU model."""
        opt = self.option("predicates")
        if opt is None or not opt.enabled("predicate"):
            return True
        task, node = self.snap.tasks[t], self.snap.nodes[n]
        if node.unschedulable:
            return False
        affinity = arg_bool(
            opt.arguments, "predicate.NodeAffinityEnable", True, plugin="predicates"
        )
        if affinity and any(node.labels.get(k) != v for k, v in task.node_selector.items()):
            return False
        if (
            affinity
            and task.node_affinity is not None
            and not task.node_affinity.allows(node.name, node.labels)
        ):
            return False
        if arg_bool(opt.arguments, "predicate.TaintTolerationEnable", True, plugin="predicates"):
            for taint in node.taints:
                if taint.effect != "PreferNoSchedule" and not any(
                    tol.tolerates(taint) for tol in task.tolerations
                ):
                    return False
        g = task.gpu_request
        return not (g and g.models and node.gpus and node.gpus.model not in g.models)

    def fits(self, t: int, n: int, later: bool) -> bool:
        """Whether task ``t`` fits node ``n`` once releasing tasks are gone (``later``), or
        now — which also requires fitting later, so a task never eats into a reservation."""
        if not later and not self.fits(t, n, True):
            return False
        row = self.charge(t, n)
        alloc, used, rel, pip = self.alloc[n], self.used[n], self.rel[n], self.pip[n]
        for r in self.res:
            free = alloc[r] - used[r] + ((rel[r] - pip[r]) if later else 0)
            if row.get(r, 0) > free:
                return False
        g = self.snap.tasks[t].gpu_request
        if g is None:
            return True
        return (
            sum(1 for f in self.device_free(n, later) if f >= max(self.per_device(t, n), 1))
            >= g.count
        )

    def device_free(self, n: int, later: bool) -> list[int]:
        """Free milli-GPU per device of node ``n``: once releases finish (``later``), or now
        and without touching reservations (the smaller of now and later)."""
        gpus = self.snap.nodes[n].gpus
        cap = gpus.milli if gpus else 0
        out = []
        for d, used in enumerate(self.dev_used[n]):
            after = cap - used + self.dev_rel[n][d] - self.dev_pip[n][d]
            out.append(after if later else min(cap - used, after))
        return out

    def _open_scorers(self) -> None:
        """Read the node_score plugins' arguments once (tier order = summation order)."""
        self.scorers: list[tuple[str, dict[str, float]]] = []
        for tier in self.plugins("node_score"):
            for o in tier:
                args = o.arguments
                if o.name == "nodeorder":
                    keys = [("leastrequested", 1.0), ("mostrequested", 0.0)]
                    keys += [("balancedresource", 1.0), ("tainttoleration", 3.0)]
                    keys += [("nodeaffinity", 2.0)]
                    w = {k: arg_float(args, f"{k}.weight", d, plugin=o.name) for k, d in keys}
                    self.scorers.append(("nodeorder", w))
                elif o.name == "binpack":
                    w = {"": arg_float(args, "binpack.weight", 1.0, plugin=o.name)}
                    w[CPU] = arg_float(args, "binpack.cpu", 1.0, plugin=o.name)
                    w[MEMORY] = arg_float(args, "binpack.memory", 1.0, plugin=o.name)
                    for name in arg_str(args, "binpack.resources", "", plugin=o.name).split(","):
                        if name.strip():
                            key = f"binpack.resources.{name.strip()}"
                            w[name.strip()] = arg_float(args, key, 1.0, plugin=o.name)
                    self.scorers.append(("binpack", w))

    def untolerated(self, t: int, n: int) -> int:
        """Distinct PreferNoSchedule taints of node ``n`` that task ``t`` does not tolerate."""
        soft = {x for x in self.snap.nodes[n].taints if x.effect == "PreferNoSchedule"}
        return sum(
            1 for x in soft if not any(tol.tolerates(x) for tol in self.snap.tasks[t].tolerations)
        )

    def score(self, t: int, n: int, top: int) -> float:
        """Sum of the node_score plugins; ``top``: the most untolerated soft taints on a node."""
        total = 0.0
        for name, w in self.scorers:
            total += self.nodeorder(w, t, n, top) if name == "nodeorder" else self.binpack(w, t, n)
        return total

    def nodeorder(self, w: dict[str, float], t: int, n: int, top: int) -> float:
        req, alloc, used = self.nominal(t), self.alloc[n], self.used[n]
        want = {CPU: req.get(CPU, 0) or DEFAULT_CPU, MEMORY: req.get(MEMORY, 0) or DEFAULT_MEMORY}
        # kube's NonZeroRequested: the node's pods with their non-zero defaults, then this task
        on = [
            self.nominal(x)
            for x, where in enumerate(self.where)
            if where == n and self.state[x] in ("Allocated", "Bound", "Running", "Releasing")
        ]
        nz_used = {
            CPU: sum(r.get(CPU, 0) or DEFAULT_CPU for r in on),
            MEMORY: sum(r.get(MEMORY, 0) or DEFAULT_MEMORY for r in on),
        }
        requested = {r: nz_used[r] + want[r] for r in (CPU, MEMORY)}
        score = 0.0
        if w["leastrequested"]:
            parts = [
                (alloc[r] - requested[r]) * 100 // alloc[r] if 0 < alloc[r] >= requested[r] else 0
                for r in (CPU, MEMORY)
            ]
            score += w["leastrequested"] * ((parts[0] + parts[1]) // 2)
        if w["mostrequested"]:
            parts = [
                min(requested[r], alloc[r]) * 100 // alloc[r] if alloc[r] > 0 else 0
                for r in (CPU, MEMORY)
            ]
            score += w["mostrequested"] * ((parts[0] + parts[1]) // 2)
        if w["balancedresource"]:
            # kube's BalancedAllocation reads the plain requests (no non-zero defaults)
            plain = {r: used[r] + req.get(r, 0) for r in (CPU, MEMORY)}
            fracs = [min(plain[r] / max(alloc[r], 1), 1.0) for r in (CPU, MEMORY)]
            if self.snap.tasks[t].gpu_request is not None:
                g_alloc = alloc[GPU]
                fracs.append(min((used[GPU] + req[GPU]) / g_alloc, 1.0) if g_alloc > 0 else 0.0)
            mean = sum(fracs) / len(fracs)
            std = math.sqrt(sum((f - mean) * (f - mean) for f in fracs) / len(fracs))
            score += math.floor((1.0 - std) * 100.0) * w["balancedresource"]
        if w["tainttoleration"] and self.soft_taints:
            mine = float(100 - self.untolerated(t, n) * 100 // top) if top else 100.0
            score += w["tainttoleration"] * mine
        aff = self.snap.tasks[t].node_affinity
        if w["nodeaffinity"] and aff is not None and aff.preferred:
            nodes = self.snap.nodes
            most = max(aff.preference(x.name, x.labels) for x in nodes)
            mine = aff.preference(nodes[n].name, nodes[n].labels)
            score += w["nodeaffinity"] * float(mine * 100 // most if most else 0)
        return score

    def binpack(self, w: dict[str, float], t: int, n: int) -> float:
        req, alloc, used = self.nominal(t), self.alloc[n], self.used[n]
        picked = [(r, wr) for r, wr in w.items() if r in self.res and req.get(r, 0) > 0 and wr > 0]
        if w[""] == 0 or not picked:
            return 0.0
        score = 0.0
        for r, wr in picked:
            after = used[r] + req[r]
            if after > alloc[r] > 0:
                return 0.0
            score += wr * after / max(alloc[r], 1) if alloc[r] > 0 else 0.0
        return score / sum(wr for _, wr in picked) * 100.0 * w[""]

    def best_node(self, t: int) -> tuple[int, bool]:
        top = (
            max(self.untolerated(t, n) for n in range(len(self.snap.nodes)))
            if self.soft_taints
            else 0
        )
        for later in (False, True):
            best, best_score = -1, -math.inf
            for n in range(len(self.snap.nodes)):
                if self.passes(t, n) and self.fits(t, n, later):
                    s = self.score(t, n, top)
                    if s > best_score:
                        best, best_score = n, s
            if best >= 0:
                return best, later
        return -1, False

    def choose_gpus(self, t: int, n: int, later: bool) -> tuple[int, ...]:
        """Fractional shares best-fit onto the fullest device with room (then lowest index);
        whole devices by lowest index."""
        g = self.snap.tasks[t].gpu_request
        if g is None:
            return ()
        need = self.per_device(t, n)
        fractional = need < self.snap.nodes[n].gpus.milli  # type: ignore[union-attr]
        free = self.device_free(n, later)
        ok = [(f if fractional else 0, d) for d, f in enumerate(free) if f >= need]
        return tuple(d for _, d in sorted(ok)[: g.count])
