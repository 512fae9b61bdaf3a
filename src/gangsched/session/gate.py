"""The placement gate: the one check every placement passes before it changes the session.

Actions choose where tasks go (vectorized over all nodes, through the rule owners in
:mod:`gangsched.model.gpu_charge`, the fair-share plugins and
:func:`hard_domain`); the :class:`~gangsched.session.statement.Statement`
then asks the gate about each operation, and refuses one that breaks a hard rule:

* **node**: the node is schedulable, and the task's row (pods included) and GPU devices fit
  what is free now — or, for a reservation, what will be free once releases finish — without
  eating into another reservation (:meth:`Session.fits`);
* **queue capability**: the task's queue, and under hierarchical ``capacity`` every ancestor,
  stays within its ``capability`` on each resource the task asks for (the reading of
  :meth:`Queue.capability_limits` with ``flat=True``, GPUs charged per
  :func:`~gangsched.model.gpu_charge.queue_gpu_charge`) — binding a carried reservation too: a
  queue whose capability was lowered under its reservations binds them only as it shrinks,
  counting the reservations the job keeps (:meth:`Gate.over_with_kept`);
* **hard topology**: a hard-topology job's task — best-effort ones included — goes only inside
  the one allowed domain that holds its other placed tasks (:func:`hard_domain`), and while it
  holds none, inside some allowed domain (:func:`hard_cover`);
* **pod constraints**: the task's required pod affinity and anti-affinity, the required
  anti-affinity of the pods already placed, and its ``DoNotSchedule`` topology spread hold
  on the node (:mod:`gangsched.session.pod_constraints`);
* **gang** (at ``commit``/``keep``): a job given binds is ready, a job given only reservations
  is ready or pipelined (the configured ``job_ready`` / ``job_pipelined`` votes) — otherwise
  the whole statement is undone.

Which of these rules are in force follows the configuration (:func:`rules_in_force`), the same
choice :func:`gangsched.testing.invariants.check_cycle` makes when it checks decisions. A
refusal undoes nothing that was applied: the operation is simply not applied, and the refusal
is recorded in ``Session.refusals``. Actions check first, through the same owners, so a
refusal means an action proposed a placement it should not have — the test suite fails on
any.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gangsched.config import Config
from gangsched.model import TopologyMode
from gangsched.model.topology import build_topology
from gangsched.session.pod_constraints import pod_rules
from gangsched.session.task_states import in_states
from gangsched.units import PODS

if TYPE_CHECKING:
    from gangsched.session.core import Session

BOOL = npt.NDArray[np.bool_]

__all__ = [
    "Gate",
    "Refusal",
    "Rule",
    "RulesInForce",
    "hard_cover",
    "hard_domain",
    "rules_in_force",
]


class Rule(enum.Enum):
    """The hard rule an operation broke."""

    NOT_PENDING = "not-pending"
    CORDONED = "cordoned"
    NODE_FIT = "node-fit"
    CAPABILITY = "capability"
    TOPOLOGY = "topology"
    POD_CONSTRAINT = "pod-constraint"
    GANG = "gang"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the gate refused an operation: the rule, and the words."""

    rule: Rule
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class RulesInForce:
    """Which hard rules a configuration enforces (beyond node fit, always in force)."""

    gang: bool
    """Gang atomicity: the ``gang`` plugin is configured."""
    capability: bool
    """Queue capability: ``proportion`` or ``capacity`` is configured."""
    hierarchical: bool
    """Capability along every ancestor: ``capacity`` with ``enableHierarchy``."""


def rules_in_force(config: Config) -> RulesInForce:
    """The one owner of which rules a configuration enforces (used by the gate and by the
    invariant checker)."""
    names = {p.name for tier in config.tiers for p in tier.plugins}
    hierarchical = any(
        p.name == "capacity" and p.hierarchy for tier in config.tiers for p in tier.plugins
    )
    return RulesInForce(
        gang="gang" in names,
        capability=bool(names & {"proportion", "capacity"}),
        hierarchical=hierarchical,
    )


def hard_domain(ssn: Session, job: int) -> BOOL | str | None:
    """Where a hard-topology job's further tasks may go — the one owner of that rule.

    ``None`` when the job has no hard topology, or holds no node yet (the placer picks one
    domain for the whole gang); a node mask of the one domain of its highest allowed tier that
    holds every task it has placed or reserved; or the reason, in words, when no single such
    domain holds them (the topology changed under a running gang: Volcano's job hypernode, the
    LCA of its tasks, is then above the allowed tier, and nothing more is placed).
    """
    nt = ssn.snapshot.jobs[job].network_topology
    if nt is None or nt.mode is not TopologyMode.HARD:
        return None
    from gangsched.session.core import HOLDING_STATES  # the session imports this module

    topo = build_topology(ssn.snapshot)
    allowed = (
        topo.top_tier if nt.highest_tier_allowed is None else topo.rank_of(nt.highest_tier_allowed)
    )
    mine = ssn.job_tasks(job)
    held = mine[in_states(ssn.task_state[mine], HOLDING_STATES) & (ssn.task_node[mine] >= 0)]
    if not held.size:
        return None
    cover = topo.cover(allowed)
    ids = np.unique(cover[ssn.task_node[held]])
    if ids.size > 1 or ids[0] < 0:
        return (
            f"gang {ssn.snapshot.jobs[job].name!r}: its placed tasks already lie outside any one "
            f"domain of tier <= {nt.highest_tier_allowed}; a hard topology admits no more"
        )
    out: BOOL = cover == ids[0]
    return out


def hard_cover(ssn: Session, job: int) -> BOOL | None:
    """Where any task of a hard-topology job may go while it holds no node: the nodes inside
    some domain of its highest allowed tier (a node no such domain covers is never in the one
    domain that will hold the gang); ``None`` when that is every node, or the job has no hard
    topology. Every member obeys it, best-effort ones included."""
    nt = ssn.snapshot.jobs[job].network_topology
    if nt is None or nt.mode is not TopologyMode.HARD:
        return None
    topo = build_topology(ssn.snapshot)
    allowed = (
        topo.top_tier if nt.highest_tier_allowed is None else topo.rank_of(nt.highest_tier_allowed)
    )
    if allowed >= topo.top_tier:
        return None
    out: BOOL = topo.cover(allowed) >= 0 if allowed >= 1 else np.zeros(topo.n_nodes, dtype=np.bool_)
    return None if bool(out.all()) else out


class Gate:
    """The hard rules, checked per operation against the session's current state."""

    __slots__ = ("_cap", "_enter", "_leave", "_order", "_parent", "_up", "rules", "ssn")

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self.rules = rules_in_force(ssn.config)
        snap = ssn.snapshot
        spec = ssn.arrays.spec
        n_q, n_r = len(snap.queues), len(spec)
        col = {name: i for i, name in enumerate(spec.names)}
        cap = np.full((n_q, n_r), np.inf)
        limited = np.zeros(n_q, dtype=np.bool_)
        if self.rules.capability:
            for q, queue in enumerate(snap.queues):
                for res, amount in queue.capability_limits(flat=True).items():
                    c = col.get(res)
                    if c is not None and res != PODS:
                        cap[q, c] = amount
                        limited[q] = True
        self._cap = cap
        # The queues whose capability a placement in queue q must respect: q itself and,
        # under a hierarchy, its ancestors — those with a limit. Linear in the number of
        # queues however deep the tree: each queue points at its nearest limited queue at or
        # above it (``_up``), and a subtree is a contiguous run of a depth-first order.
        n_q = len(snap.queues)
        parent = np.full(n_q, -1, dtype=np.int64)
        if self.rules.hierarchical:
            for q, queue in enumerate(snap.queues):
                if queue.parent is not None:
                    parent[q] = snap.queue_index[queue.parent]
        self._parent = parent
        children: list[list[int]] = [[] for _ in range(n_q)]
        for q in range(n_q):
            if parent[q] >= 0:
                children[int(parent[q])].append(q)
        order: list[int] = []
        enter = np.zeros(n_q, dtype=np.int64)
        leave = np.zeros(n_q, dtype=np.int64)
        up = np.full(n_q, -1, dtype=np.int64)
        stack: list[tuple[int, bool]] = [(q, False) for q in reversed(range(n_q)) if parent[q] < 0]
        while stack:  # iterative: a queue chain may be thousands deep
            q, done = stack.pop()
            if done:
                leave[q] = len(order)
                continue
            enter[q] = len(order)
            order.append(q)
            p = int(parent[q])
            up[q] = q if limited[q] else (up[p] if p >= 0 else -1)
            stack.append((q, True))
            stack.extend((c, False) for c in reversed(children[q]))
        self._order = np.asarray(order, dtype=np.int64)
        self._enter, self._leave, self._up = enter, leave, up

    def _limited_chain(self, queue: int) -> list[int]:
        """The limited queues at or above ``queue`` (nearest first)."""
        out: list[int] = []
        a = int(self._up[queue])
        while a >= 0:
            out.append(a)
            p = int(self._parent[a])
            a = int(self._up[p]) if p >= 0 else -1
        return out

    def _subtree_used(self, a: int) -> npt.NDArray[np.int64]:
        members = self._order[int(self._enter[a]) : int(self._leave[a])]
        out: npt.NDArray[np.int64] = self.ssn.queue_allocated[members].sum(axis=0)
        return out

    def refuse(
        self,
        task: int,
        node: int,
        gpus: tuple[int, ...],
        *,
        pipelined: bool,
        relax: frozenset[Rule] = frozenset(),
    ) -> Refusal | None:
        """Why placing ``task`` on ``node`` (devices ``gpus``) breaks a hard rule, or None.
        ``relax`` names rules left out (what-if trials only: capability, topology, pod
        constraints); pod constraints hold unless the trial names them."""
        ssn = self.ssn
        name = ssn.snapshot.tasks[task].name
        node_name = ssn.snapshot.nodes[node].name
        if ssn.task_state[task] != 0:
            return Refusal(Rule.NOT_PENDING, f"task {name!r} is not pending")
        if ssn.arrays.unschedulable[node]:
            return Refusal(Rule.CORDONED, f"task {name!r}: node {node_name!r} is unschedulable")
        if not ssn.fits(task, node, future=pipelined, gpus=gpus):
            when = "once releases finish" if pipelined else "now"
            return Refusal(Rule.NODE_FIT, f"task {name!r} does not fit node {node_name!r} {when}")
        j = int(ssn.task_job[task])
        charge = ssn.task_req[task]
        relaxed = not self.rules.capability or (bool(relax) and Rule.CAPABILITY in relax)
        chain = [] if relaxed else self._limited_chain(int(ssn.job_queue[j]))
        for a in chain:
            used = self._subtree_used(a)
            over = (charge > 0) & (used + charge > self._cap[a])
            if over.any():
                res = ssn.arrays.spec.names[int(np.flatnonzero(over)[0])]
                queue = ssn.snapshot.queues[a].name
                return Refusal(
                    Rule.CAPABILITY,
                    f"task {name!r}: queue {queue!r} would exceed its capability on {res}",
                )
        rules = None if relax and Rule.POD_CONSTRAINT in relax else pod_rules(ssn)
        if rules is not None:
            broken = rules.refusal(task, node)
            if broken is not None:
                return Refusal(Rule.POD_CONSTRAINT, f"task {name!r}: node {node_name!r}: {broken}")
        if relax and Rule.TOPOLOGY in relax:
            return None
        domain = hard_domain(ssn, j)
        if domain is None:
            domain = hard_cover(ssn, j)
        if isinstance(domain, str):
            return Refusal(Rule.TOPOLOGY, f"task {name!r}: {domain}")
        if domain is not None and not bool(domain[node]):
            return Refusal(
                Rule.TOPOLOGY,
                f"task {name!r}: node {node_name!r} lies outside the domain holding the rest "
                "of its hard-topology gang",
            )
        return None

    def over_with_kept(self, bound: list[int], kept: list[int]) -> Refusal | None:
        """Why binding the carried reservations ``bound`` (placed) while the same job keeps
        ``kept`` reserved (not placed now, placed again afterwards) leaves a queue of its chain
        over its capability on a resource the binds ask for, or None.

        A reservation holds its queue's room: binding one while another stays reserved does
        not shrink the queue, so a queue over its capability (lowered under its reservations)
        binds none of them until it is back within it."""
        if not self.rules.capability or not bound or not kept:
            return None
        ssn = self.ssn
        j = int(ssn.task_job[bound[0]])
        grown = (ssn.task_req[bound] > 0).any(axis=0)
        later = ssn.task_req[kept].sum(axis=0)
        for a in self._limited_chain(int(ssn.job_queue[j])):
            over = grown & (self._subtree_used(a) + later > self._cap[a])
            if over.any():
                res = ssn.arrays.spec.names[int(np.flatnonzero(over)[0])]
                queue = ssn.snapshot.queues[a].name
                return Refusal(
                    Rule.CAPABILITY,
                    f"queue {queue!r} is over its capability on {res} with the job's reservations",
                )
        return None

    def refuse_end(self, jobs_allocated: set[int], jobs_pipelined: set[int]) -> Refusal | None:
        """Why ending a statement whose binds went to ``jobs_allocated`` and whose
        reservations to ``jobs_pipelined`` would leave a gang partial, or None."""
        if not self.rules.gang:
            return None
        ssn = self.ssn
        for j in sorted(jobs_allocated):
            if not ssn.points.job_ready(j):
                why = f"gang {ssn.snapshot.jobs[j].name!r} would be bound below its minimum"
                return Refusal(Rule.GANG, why)
        for j in sorted(jobs_pipelined - jobs_allocated):
            if not (ssn.points.job_ready(j) or ssn.points.job_pipelined(j)):
                why = f"gang {ssn.snapshot.jobs[j].name!r} would be reserved below its minimum"
                return Refusal(Rule.GANG, why)
        return None
