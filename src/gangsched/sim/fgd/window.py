"""A batch protocol for the FGD study: windows of ``k`` arrivals placed jointly with CP-SAT.

Theory of operation
-------------------
**Not the online protocol.** The arrivals are cut into windows of ``k`` consecutive pods; the
policy sees a whole window before it places any pod of it. Everything placed in earlier windows
is fixed; a pod not placed in its window is dropped (never retried, never moved), as a failed
pod is online. The records are kept per arrival as in :mod:`gangsched.sim.fgd`: the window's
decisions are applied in arrival order, one record after each.

**One window.** A *base* policy (``fgd`` or ``fgd-price``) first places the window one pod at a
time, as it would online (the *greedy* answer), on the real arrays, saving the rows it changes.
When it places every pod, that answer is final: it places all the window's GPU, and it is the
optimum of the model below (which rewards agreeing with it). Otherwise the rows are restored
and a CP-SAT model chooses, for every pod, nothing or one (node, device) among:

* its *candidates*: the nodes that fit it now (the base policy's feasibility mask, one NumPy
  pass), cut to the ``candidates`` best by the base policy's score on the window's start state
  (ties by the run's tie rank), plus the node the greedy answer gave it, so that the greedy
  answer is always a solution of the model;
* on a candidate, a shared pod picks one device with room for its share; a whole-GPU pod picks
  ``num_gpu`` fully free devices (``sum_d y[d] = num_gpu * x``); a CPU-only pod the node alone.

Constraints: per node, CPU and memory of the window's pods within what is free; per device, the
shares plus 1000 per whole-GPU pod within the device's free milli-GPU; each pod placed at most
once. The objective is lexicographic, as one weighted sum whose weights separate the levels:
most milli-GPU placed, then most pods placed where the greedy answer put them, then the most
*rank points* (``candidates - position`` of the node in the base policy's order at the
window's start, so a placed pod always scores and CPU-only pods are kept when they cost no GPU).
The greedy answer is the solution hint. The solver runs with one worker, a fixed seed and a
deterministic-time budget (``work``), so a run gives the same bytes every time on any machine
with the same OR-Tools. A solution worth less than the greedy answer (the budget ran out) is
not taken.

Every solver answer is checked by :func:`check_window`, an independent recount against the
start state (node indices, GPU model, CPU, memory, device counts, per-device milli-GPU, whole
devices free); a problem raises :class:`~gangsched.errors.PlacementError` (a bug, not a
fallback). The policies are named ``<base>-window<k>`` (``fgd-window16``,
``fgd-price-window32``); :data:`WINDOW_POLICIES` lists the ones the command line offers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from gangsched._types import I64
from gangsched.errors import ConfigError, PlacementError
from gangsched.fragmentation.measure import (
    MILLI,
    IntSource,
    TypicalPods,
    choose_node,
    room_mask,
)
from gangsched.io.openb import NodeTable, PodTable
from gangsched.sim.fgd.engine import (
    FAST_POLICIES,
    FastScorer,
    Placed,
    Records,
    StudyArrays,
    _device,
)
from gangsched.sim.fgd.engine import Arrival as WindowPod
from gangsched.sim.fgd.engine import arrivals as window_arrivals
from gangsched.sim.fgd.variants import make_variant

__all__ = [
    "MAX_WINDOW",
    "WINDOW_BASES",
    "WINDOW_POLICIES",
    "WindowParams",
    "WindowPod",
    "WindowSolve",
    "WindowStats",
    "check_window",
    "parse_window_policy",
    "place_windows",
    "solve_window",
    "window_arrivals",
    "window_policy_id",
]

#: Most arrivals one window may hold (the model grows with it).
MAX_WINDOW = 256
#: Most candidate nodes per pod.
MAX_CANDIDATES = 64
#: Base policies a window can start from, with the table id stem of their windowed form.
WINDOW_BASES: dict[str, str] = {
    "fgd": "14-FGD-BatchWindow",
    "fgd-price": "15-FGD-Price-BatchWindow",
}
#: The windowed policies the command line lists (any ``<base>-window<k>`` is accepted).
WINDOW_POLICIES: tuple[str, ...] = tuple(
    f"{base}-window{k}" for base in WINDOW_BASES for k in (8, 16, 32)
)
_NAME = re.compile(r"^(fgd|fgd-price)-window(.*)$")
_SEED = 0


@dataclass(frozen=True, slots=True)
class WindowParams:
    """``window`` arrivals per window; ``base`` the policy of the greedy answer and of the
    candidates' order; ``candidates`` nodes per pod (plus the greedy one); ``work`` the solver's
    deterministic-time budget per window (seconds of OR-Tools' deterministic clock); ``follow``
    False drops the reward for the greedy answer's nodes and hands every window to the solver
    (measured worse, see ``docs/fgd.md``)."""

    window: int
    base: str = "fgd"
    candidates: int = 4
    follow: bool = True  # reward the greedy answer's nodes (False: solve every window)
    work: float = 1.0

    def __post_init__(self) -> None:
        _check_int(self.window, MAX_WINDOW, "window")
        if self.base not in WINDOW_BASES:
            raise ConfigError(
                f"expected one of {', '.join(WINDOW_BASES)}", kind="policy", name="window",
                field="base",
            )  # fmt: skip
        _check_int(self.candidates, MAX_CANDIDATES, "candidates")
        if not isinstance(self.work, int | float) or not 0 < self.work <= 3600:
            raise ConfigError(
                f"must be a number in (0, 3600], got {self.work!r}",
                kind="policy",
                name="window",
                field="work",
            )


def _check_int(value: object, hi: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
        raise ConfigError(
            f"must be an integer in [1, {hi}], got {value!r}",
            kind="policy",
            name="window",
            field=name,
        )


def parse_window_policy(name: str) -> WindowParams | None:
    """The parameters of ``<base>-window<k>``; ``None`` for a name of another form; a
    ConfigError naming the field ``window`` for a bad ``k``."""
    match = _NAME.match(name)
    if match is None:
        return None
    text = match.group(2)
    if not text.isdigit() or len(text) > 6:
        raise ConfigError(
            f"window size must be an integer in [1, {MAX_WINDOW}], got {text!r}",
            kind="policy",
            name=name,
            field="window",
        )
    return WindowParams(window=int(text), base=match.group(1))


def window_policy_id(name: str) -> str:
    """The table id of a windowed policy (``14-FGD-BatchWindow16``: a batch protocol, not an
    online one)."""
    params = parse_window_policy(name)
    if params is None:
        raise ConfigError("not a windowed policy", kind="policy", name=name)
    return f"{WINDOW_BASES[params.base]}{params.window}"


@dataclass(slots=True)
class WindowStats:
    """What the windows of one run did."""

    windows: int = 0  # windows placed
    solved: int = 0  # windows handed to the solver (the greedy answer dropped a pod)
    optimal: int = 0  # of those, proven optimal
    improved: int = 0  # of those, where the solver placed more milli-GPU than the greedy answer
    gained: int = 0  # milli-GPU the solver placed beyond the greedy answers


@dataclass(frozen=True, slots=True)
class WindowSolve:
    """One window's answer: per pod the node (-1: dropped) and devices, the greedy answer's,
    and how it was found (``"greedy"``: the greedy answer placed every pod; else the solver's
    status name)."""

    nodes: tuple[int, ...]
    devices: tuple[tuple[int, ...], ...]
    greedy_nodes: tuple[int, ...]
    greedy_devices: tuple[tuple[int, ...], ...]
    status: str
    gpu: int  # milli-GPU placed
    greedy_gpu: int


_ROW_FIELDS = (
    "free_cpu",
    "free_mem",
    "gpu_free",
    "n_whole",
    "max_free",
    "affinity",
    "n_tags",
    "frag",
    "state",
    "idle",
)


@dataclass(slots=True)
class _Saved:
    """Rows of the arrays saved before a speculative placement, to put back."""

    idle_total: int
    rows: dict[int, list[I64]] = field(default_factory=dict)

    def keep(self, c: StudyArrays, node: int) -> None:
        if node not in self.rows:
            got = [np.array(getattr(c, f)[node], copy=True) for f in _ROW_FIELDS]
            got += [c.terms.fits_count[node].copy(), c.terms.small_sum[node].copy()]
            self.rows[node] = got

    def restore(self, c: StudyArrays) -> None:
        for node, got in self.rows.items():
            for name, value in zip(_ROW_FIELDS, got, strict=False):
                getattr(c, name)[node] = value
            c.terms.fits_count[node] = got[-2]
            c.terms.small_sum[node] = got[-1]
        c.idle_total = self.idle_total


def _gpu(pod: WindowPod) -> int:
    return pod.req.total_gpu_milli


def _greedy(
    c: StudyArrays, window: list[WindowPod], scorer: FastScorer, source: IntSource
) -> tuple[list[int], list[tuple[int, ...]], _Saved]:
    """The base policy's one-at-a-time answer, placed on ``c`` (rows saved to undo it)."""
    saved = _Saved(idle_total=c.idle_total)
    nodes: list[int] = []
    devices: list[tuple[int, ...]] = []
    for pod in window:
        feasible = c.fits(pod.req, pod.spec)
        node = -1
        devs: tuple[int, ...] = ()
        if feasible.any():
            verdict = scorer(c, pod.req, pod.key, feasible, source)
            node = choose_node(verdict, c.rank)
            if node >= 0:
                devs = _device(c, node, pod.req, int(verdict.share_gpu[node]))
                saved.keep(c, node)
                c.place(node, pod.req, devs)
        nodes.append(node)
        devices.append(devs)
    return nodes, devices, saved


def _candidates(
    c: StudyArrays, pod: WindowPod, scorer: FastScorer, source: IntSource, top: int, greedy: int
) -> I64:
    """The ``top`` best fitting nodes by the base policy's score now, then ``greedy``."""
    feasible = c.fits(pod.req, pod.spec)
    fit = np.flatnonzero(feasible)
    if fit.size == 0:
        return fit.astype(np.int64)
    score = scorer(c, pod.req, pod.key, feasible, source).score[fit]
    rank = c.rank[fit] if c.rank is not None else fit
    best = fit[np.lexsort((rank, -score))][:top].astype(np.int64)
    if greedy >= 0 and greedy not in best:
        best = np.append(best, np.int64(greedy))
    return best


def check_window(
    c: StudyArrays, window: list[WindowPod], nodes: list[int], devices: list[tuple[int, ...]]
) -> list[str]:
    """Problems of a window's answer against the current state of ``c`` (empty: valid)."""
    problems: list[str] = []
    n, width = c.gpu_free.shape
    cpu = np.zeros(n, dtype=np.int64)
    mem = np.zeros(n, dtype=np.int64)
    use = np.zeros((n, width), dtype=np.int64)
    for pod, node, devs in zip(window, nodes, devices, strict=True):
        req = pod.req
        if node < 0:
            if devs:
                problems.append("a dropped pod holds devices")
            continue
        if node >= n:
            problems.append(f"node index {node} out of range")
            continue
        cpu[node] += req.cpu_milli
        mem[node] += req.memory
        if len(set(devs)) != len(devs) or len(devs) != req.num_gpu:
            problems.append(f"a pod of {req.num_gpu} GPU(s) holds devices {devs}")
            continue
        if any(not 0 <= d < int(c.gpu_count[node]) for d in devs):
            problems.append(f"a device of {devs} is not on node {node}")
            continue
        model_ok = req.allowed_models is None or bool(req.allowed_models[int(c.model_idx[node])])
        if req.num_gpu and not model_ok:
            problems.append(f"node {node}'s GPU model is not one the pod accepts")
        for d in devs:
            use[node, d] += req.gpu_milli
            if not req.is_shared and int(c.gpu_free[node, d]) != MILLI:
                problems.append(f"a whole-GPU pod on device {d} of node {node}, not free")
    if (cpu > c.free_cpu).any():
        problems.append(f"CPU over what is free on {int((cpu > c.free_cpu).sum())} node(s)")
    if (mem > c.free_mem).any():
        problems.append(f"memory over what is free on {int((mem > c.free_mem).sum())} node(s)")
    if (use > c.gpu_free).any():
        problems.append(f"milli-GPU over what is free on {int((use > c.gpu_free).sum())} device(s)")
    return problems


def _solve_model(
    c: StudyArrays,
    window: list[WindowPod],
    cands: list[I64],
    greedy_nodes: list[int],
    greedy_devs: list[tuple[int, ...]],
    params: WindowParams,
) -> tuple[list[int], list[tuple[int, ...]], str]:
    """The CP-SAT model of one window (see the module doc) over the state of ``c``."""
    m = cp_model.CpModel()
    k = len(window)
    top = params.candidates
    w_agree = k * top + 1 if params.follow else 0
    w_gpu = k * (w_agree + top) + 1
    # options: (pod, node, device or -1, literal); whole pods: device literals per option
    options: list[tuple[int, int, int, cp_model.IntVar]] = []
    whole: dict[int, list[tuple[int, cp_model.IntVar]]] = {}
    terms: list[tuple[cp_model.IntVar, int, int]] = []  # literal, weight, greedy value
    node_load: dict[int, list[tuple[cp_model.IntVar, int, int]]] = {}
    dev_load: dict[tuple[int, int], list[tuple[cp_model.IntVar, int]]] = {}
    hints: list[tuple[cp_model.IntVar, int]] = []
    for j, pod in enumerate(window):
        req = pod.req
        mine: list[cp_model.IntVar] = []
        for pos, node in enumerate(cands[j].tolist()):
            points = max(top - pos, 1)
            agree = node == greedy_nodes[j]
            devs_free = c.gpu_free[node]
            shared = np.flatnonzero(room_mask(devs_free, req.gpu_milli)).tolist()
            picks = shared if req.is_shared else [-1]
            for d in picks:
                lit = m.new_bool_var(f"p{j}n{node}d{d}")
                on = agree and (not req.is_shared or (d,) == greedy_devs[j])
                hints.append((lit, int(on)))
                options.append((j, node, d, lit))
                mine.append(lit)
                weight = w_gpu * _gpu(pod) + points + (w_agree if on else 0)
                terms.append((lit, weight, int(on)))
                node_load.setdefault(node, []).append((lit, req.cpu_milli, req.memory))
                if d >= 0:
                    dev_load.setdefault((node, d), []).append((lit, req.gpu_milli))
                if req.num_gpu and not req.is_shared:
                    ys = []
                    for e in np.flatnonzero(room_mask(devs_free, req.gpu_milli)).tolist():
                        y = m.new_bool_var(f"p{j}n{node}w{e}")
                        hints.append((y, int(on and e in greedy_devs[j])))
                        ys.append((e, y))
                        dev_load.setdefault((node, e), []).append((y, MILLI))
                    m.add(sum(y for _, y in ys) == req.num_gpu * lit)
                    whole[len(options) - 1] = ys
        if mine:
            m.add_at_most_one(mine)
    for node, load in node_load.items():
        if sum(cpu for _, cpu, _ in load) > int(c.free_cpu[node]):
            m.add(sum(cpu * lit for lit, cpu, _ in load) <= int(c.free_cpu[node]))
        if sum(mem for _, _, mem in load) > int(c.free_mem[node]):
            m.add(sum(mem * lit for lit, _, mem in load) <= int(c.free_mem[node]))
    for (node, d), shares in dev_load.items():
        if sum(g for _, g in shares) > int(c.gpu_free[node, d]):
            m.add(sum(g * lit for lit, g in shares) <= int(c.gpu_free[node, d]))
    m.maximize(sum(weight * lit for lit, weight, _ in terms))
    for lit, value in hints:
        m.add_hint(lit, value)
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.num_workers = 1
    prm.random_seed = _SEED
    prm.max_deterministic_time = float(params.work)
    status = solver.solve(m)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return list(greedy_nodes), list(greedy_devs), name
    if solver.objective_value < sum(weight * on for _, weight, on in terms):
        return list(greedy_nodes), list(greedy_devs), name
    nodes = [-1] * k
    devices: list[tuple[int, ...]] = [()] * k
    for i, (j, node, d, lit) in enumerate(options):
        if solver.boolean_value(lit):
            nodes[j] = node
            if d >= 0:
                devices[j] = (d,)
            elif i in whole:
                devices[j] = tuple(e for e, y in whole[i] if solver.boolean_value(y))
    return nodes, devices, name


def solve_window(
    c: StudyArrays,
    window: list[WindowPod],
    scorer: FastScorer,
    source: IntSource,
    params: WindowParams,
    *,
    force: bool = False,
) -> WindowSolve:
    """One window's answer over the state of ``c``, which is left as it was. ``force`` solves
    the model even when the greedy answer places every pod."""
    g_nodes, g_devs, saved = _greedy(c, window, scorer, source)
    saved.restore(c)
    g_gpu = sum(_gpu(p) for p, n in zip(window, g_nodes, strict=True) if n >= 0)
    if all(n >= 0 for n in g_nodes) and not force and params.follow:
        return WindowSolve(
            tuple(g_nodes), tuple(g_devs), tuple(g_nodes), tuple(g_devs), "greedy", g_gpu, g_gpu
        )
    cands = [
        _candidates(c, pod, scorer, source, params.candidates, g)
        for pod, g in zip(window, g_nodes, strict=True)
    ]
    nodes, devs, status = _solve_model(c, window, cands, g_nodes, g_devs, params)
    problems = check_window(c, window, nodes, devs)
    if problems:
        raise PlacementError(
            "the window's solver answer is invalid: " + "; ".join(problems[:3]),
            kind="window",
            name=f"{len(window)} arrivals",
            field="placement",
        )
    gpu = sum(_gpu(p) for p, n in zip(window, nodes, strict=True) if n >= 0)
    return WindowSolve(tuple(nodes), tuple(devs), tuple(g_nodes), tuple(g_devs), status, gpu, g_gpu)


def base_scorer(base: str, nodes: NodeTable, pods: PodTable) -> FastScorer:
    """A fresh scorer of the base policy for one run."""
    if base == "fgd":
        return FAST_POLICIES["fgd"]()
    return make_variant(base, nodes, pods)


def place_windows(
    nodes: NodeTable,
    pods: PodTable,
    order: I64,
    rank: I64 | None,
    source: IntSource,
    typical: TypicalPods,
    params: WindowParams,
) -> tuple[Placed, WindowStats]:
    """Place ``pods[order]`` window by window (see the module doc); the records of
    :func:`gangsched.sim.fgd.engine.place_sequence` and what the windows did."""
    scorer = base_scorer(params.base, nodes, pods)
    c = StudyArrays(nodes, typical)
    c.rank = rank
    arrivals = window_arrivals(pods, nodes, order)
    records = Records(c, arrivals)
    stats = WindowStats()
    for start in range(0, len(arrivals), params.window):
        window = arrivals[start : start + params.window]
        got = solve_window(c, window, scorer, source, params)
        stats.windows += 1
        if got.status != "greedy":
            stats.solved += 1
            stats.optimal += got.status == "OPTIMAL"
            stats.improved += got.gpu > got.greedy_gpu
            stats.gained += got.gpu - got.greedy_gpu
        for j, pod in enumerate(window):
            step = start + j
            node, devs = got.nodes[j], got.devices[j]
            if node >= 0:
                records.put(step, node, pod.req, devs)
            records.after(step)
    return records.placed(), stats
