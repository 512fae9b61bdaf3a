"""The FGD (ATC'23) fragmentation study: fill an empty cluster with a shuffled, tuned workload.

Theory of operation
-------------------
One *run* is (workload, policy, tune ratio, seed):

1. The pods are sorted by name and shuffled with the seed (Fisher-Yates from the last position
   down, one ``intn(i + 1)`` per position, after one discarded draw: the reference simulator seeds
   its generator, logs one number, then shuffles).
2. Tuning to ``tune`` x the cluster's GPU capacity. While short of the target, a pod is drawn
   uniformly (with replacement) from the name-sorted original list and appended as a clone. The
   loop stops at the first draw that would overshoot, where -- as in the reference -- the check
   adds the clone's *per-device* ``gpu_milli``, not ``num_gpu * gpu_milli``. When the workload is
   already above the target, uniformly drawn pods are removed until it is not.
3. The nodes get their tie-break order (:func:`node_ranks`: the reference renames them with a
   seeded random prefix, one ``Perm`` draw sequence after tuning). The pods are scheduled one at a
   time onto the empty cluster; none ever finishes; equal scores go to the node of the smallest
   rank. A pod that fits nowhere is counted as failed and dropped.
4. Before the first pod and after each one, the run records the arrived GPU request (milli-GPU,
   failed pods included), the allocated milli-GPU, the cluster fragment and the idle milli-GPU.

:func:`discrete_tables` turns the records into the authors' three tables: for every arrived
percentage ``k`` in 0..130 (arrived / capacity, rounded half-to-even to 1 %), the mean over the
records in that bucket (or, if none, in ``k-1..k+1``) of the allocation ratio (%, each record
rounded to 0.01), the fragment amount (% of capacity) and the fragmentation ratio (% of idle).

Randomness comes from :class:`~gangsched.sim.fgd.gorand.GoRand` (the reference simulator's
generator,
bit for bit) unless ``rng="numpy"`` asks for ``np.random.default_rng(seed)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TypedDict, Unpack

import numpy as np
import numpy.typing as npt

from gangsched.errors import ConfigError
from gangsched.fragmentation import MILLI, POLICIES
from gangsched.io.openb import NodeTable, PodTable
from gangsched.sim.fgd.engine import place_sequence, workload_typical
from gangsched.sim.fgd.gorand import GoRand
from gangsched.sim.fgd.variants import VARIANTS, make_variant
from gangsched.sim.fgd.window import parse_window_policy, place_windows, window_policy_id
from gangsched.sim.replay.result import output_dir

__all__ = [
    "BUCKETS",
    "DEFAULT_RNG",
    "DEFAULT_TUNE",
    "EXTRA_POLICY_IDS",
    "MAX_SEEDS",
    "MAX_TUNE",
    "POLICY_IDS",
    "DiscreteRow",
    "NumpyIntSource",
    "RunOptions",
    "RunResult",
    "RunSettings",
    "check_tune",
    "discrete_tables",
    "make_source",
    "node_ranks",
    "parse_seeds",
    "run_grid",
    "run_one",
    "run_options",
    "tuned_order",
    "write_tables",
]

POLICY_IDS: dict[str, str] = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "gpu-clustering": "03-GpuClustering",
    "gpu-packing": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}
#: Table ids of the policies that are not the paper's.
EXTRA_POLICY_IDS: dict[str, str] = {
    "fgd-pack": "07-FGD-Pack",
    "fgd-cpu": "08-FGD-CPU",
    "fgd-exact": "09-FGD-Exact",
    "fgd-future": "10-FGD-Future",
    "fgd-gpuw": "11-FGD-GpuW",
    "fgd-look": "12-FGD-Look",
    "fgd-price": "13-FGD-Price",
}


def _check_policy(policy: str) -> None:
    if policy not in POLICIES and policy not in VARIANTS and parse_window_policy(policy) is None:
        names = ", ".join([*POLICIES, *VARIANTS, "fgd-window<k>", "fgd-price-window<k>"])
        raise ConfigError(f"unknown policy; expected one of {names}", kind="policy", name=policy)


BUCKETS = 131  # arrived 0..130 %
TABLE_FILES = (
    "analysis_allo_discrete.csv",
    "analysis_frag_discrete.csv",
    "analysis_frag_ratio_discrete.csv",
)


class NumpyIntSource:
    """:class:`~gangsched.fragmentation.IntSource` over ``np.random.default_rng(seed)``."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def intn(self, n: int) -> int:
        return int(self._rng.integers(n))

    def shuffle_index(self, i: int) -> int:
        return int(self._rng.integers(i + 1))

    def discard(self) -> None:
        """Nothing to align with for this generator."""


def make_source(kind: str, seed: int) -> NumpyIntSource | GoRand:
    """A seeded integer source: ``"go"`` (the reference simulator's generator) or ``"numpy"``."""
    if kind == "go":
        return GoRand(seed)
    if kind == "numpy":
        if not 0 <= seed < 2**63:
            raise ConfigError("seed must be in [0, 2**63)", kind="rng", name="numpy", field="seed")
        return NumpyIntSource(seed)
    raise ConfigError("expected 'go' or 'numpy'", kind="rng", name=kind)


#: Most seeds one grid may run.
MAX_SEEDS = 10_000


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"42-51"`` → 42..51, ``"42,45"`` → (42, 45), ``"7"`` → (7,)."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo_text, hi_text = part.split("-", 1) if part[0] != "-" else ("", "")
                lo, hi = int(lo_text), int(hi_text)
                if hi < lo:
                    raise ValueError
                if hi - lo >= MAX_SEEDS:
                    raise ConfigError(
                        f"at most {MAX_SEEDS} seeds", kind="option", name="--seeds", field=part
                    )
                seeds.extend(range(lo, hi + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise ConfigError(
                "expected N, N-M or a comma list", kind="option", name="--seeds", field=part
            ) from None
    if not seeds:
        raise ConfigError("no seed given", kind="option", name="--seeds")
    if len(seeds) > MAX_SEEDS or not all(-(2**63) <= x < 2**63 for x in seeds):
        raise ConfigError(
            f"at most {MAX_SEEDS} seeds, each a 64-bit integer", kind="option", name="--seeds"
        )
    return tuple(seeds)


#: Largest workload tuning ratio accepted: the tables follow arrivals up to 130 % of the GPU
#: capacity, and the clone loop grows with the ratio.
MAX_TUNE = 10.0


def check_tune(tune: float) -> float:
    """``tune`` if it is a finite ratio in ``[0, MAX_TUNE]`` (0: no tuning), else a ConfigError."""
    if not isinstance(tune, int | float) or not math.isfinite(tune) or not 0 <= tune <= MAX_TUNE:
        raise ConfigError(
            f"workload tuning ratio must be a finite number in [0, {MAX_TUNE:g}], got {tune!r}",
            kind="option",
            name="--tune",
        )
    return float(tune)


def tuned_order(
    pods: PodTable, total_gpus: int, tune: float, rng: NumpyIntSource | GoRand
) -> npt.NDArray[np.int64]:
    """Indices into ``pods`` in arrival order after shuffling and tuning (clones repeat indices)."""
    check_tune(tune)
    by_name = np.asarray(sorted(range(len(pods)), key=lambda i: pods.names[i]), dtype=np.int64)
    order = by_name.copy()
    rng.discard()
    for i in range(len(order) - 1, 0, -1):
        j = rng.shuffle_index(i)
        order[i], order[j] = order[j], order[i]
    if tune <= 0:
        return order
    per_gpu = pods.gpu_milli
    total_req = pods.num_gpu * pods.gpu_milli
    total = int(total_req.sum())
    target = tune * float(total_gpus * MILLI)
    if float(total) < target:
        extra: list[int] = []
        n = len(by_name)
        while True:
            pick = int(by_name[rng.intn(n)])
            if float(total + int(per_gpu[pick])) > target:
                break
            total += int(total_req[pick])
            extra.append(pick)
        return np.concatenate([order, np.asarray(extra, dtype=np.int64)])
    kept = list(order)
    while float(total) > target and kept:
        k = rng.intn(len(kept))
        total -= int(total_req[kept.pop(k)])
    return np.asarray(kept, dtype=np.int64)


def node_ranks(nodes: NodeTable, rng: NumpyIntSource | GoRand) -> npt.NDArray[np.int64]:
    """Tie-break rank of every node, as the reference simulator orders them.

    The reference sorts the nodes by name, draws ``rand.Perm(n)`` and renames node ``i`` (in name
    order) to ``"%04d-" % perm[i] + name`` before any pod is scheduled; ties between equal scores
    then go to the smallest name, i.e. the smallest ``perm[i]``. ``Perm`` fills ``m[i] = m[j],
    m[j] = i`` with ``j = Intn(i + 1)`` for ``i = 0..n-1`` (one draw each, ``i = 0`` included).
    """
    n = len(nodes)
    perm = [0] * n
    for i in range(n):
        j = rng.intn(i + 1)
        perm[i] = perm[j]
        perm[j] = i
    by_name = sorted(range(n), key=lambda k: nodes.names[k])
    rank = np.zeros(n, dtype=np.int64)
    rank[np.asarray(by_name, dtype=np.int64)] = np.asarray(perm, dtype=np.int64)
    return rank


@dataclass(frozen=True, slots=True)
class RunResult:
    """Records of one run: entry 0 is the empty cluster, entry i the state after pod i."""

    workload: str
    policy: str
    tune: float
    seed: int
    total_gpus: int
    n_pods: int
    failed: int
    arrived: npt.NDArray[np.int64]  # (n_pods + 1,) milli-GPU
    used: npt.NDArray[np.int64]  # (n_pods + 1,) milli-GPU
    frag: npt.NDArray[np.float64]  # (n_pods + 1,) milli-GPU
    idle: npt.NDArray[np.int64]  # (n_pods + 1,) milli-GPU
    placement: npt.NDArray[np.int64]  # (n_pods,) node of each pod, -1 = failed
    order: npt.NDArray[np.int64]  # (n_pods,) index into the pod table of each arriving pod
    max_gpu_used: int  # largest milli-GPU used on any device at the end (<= 1000)
    cpu_overcommit: bool  # whether any node ended with negative free CPU or memory
    devices: npt.NDArray[np.int64] | None = None  # (n_pods,) bit i set: the pod uses device i


#: The protocol's tuning ratio and integer source when a run is not given them.
DEFAULT_TUNE = 1.3
DEFAULT_RNG = "go"


class RunOptions(TypedDict, total=False):
    """The keyword options of one run of the protocol, taken by :func:`run_one` and by
    :func:`gangsched.sim.openb_trace.replay_fgd` (which passes them on); each is optional and
    :func:`run_options` fills in its default.

    ``tune`` (1.3): the arrivals' GPU request as a multiple of the cluster's GPUs; ``rng``
    (``"go"``): the integer source, ``"go"`` or ``"numpy"``; ``limit`` (None: every pod): keep
    the first pods of the arrival order; ``workload`` (None: the pod file's stem): the name the
    records carry.
    """

    tune: float
    rng: str
    limit: int | None
    workload: str | None


@dataclass(frozen=True, slots=True)
class RunSettings:
    """:class:`RunOptions` with every default filled in."""

    tune: float
    rng: str
    limit: int | None
    workload: str


def run_options(pods: PodTable, options: RunOptions, *, caller: str) -> RunSettings:
    """``options`` with every default filled in (``workload``: ``pods``' file stem when None).
    A key that is not an option is a ``TypeError``, as a misspelt keyword argument is."""
    for key in options:
        if key not in RunOptions.__annotations__:
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}")
    workload = options.get("workload")
    return RunSettings(
        tune=options.get("tune", DEFAULT_TUNE),
        rng=options.get("rng", DEFAULT_RNG),
        limit=options.get("limit"),
        workload=workload if workload is not None else Path(pods.source).stem,
    )


def run_one(
    nodes: NodeTable,
    pods: PodTable,
    policy: str,
    seed: int,
    *,
    order: npt.NDArray[np.int64] | None = None,
    **options: Unpack[RunOptions],
) -> RunResult:
    """Replay one (policy, seed) run of the protocol (``options``: :class:`RunOptions`).

    ``order`` (indices into ``pods``) replaces the shuffled, tuned arrival sequence: the offline
    packings of :mod:`gangsched.sim.fgd.bounds` place a re-ordered copy of one run's arrivals this
    way.
    The seed still drives the ``random`` policy.
    """
    _check_policy(policy)
    opts = run_options(pods, options, caller="run_one")
    tune, limit = opts.tune, opts.limit
    source = make_source(opts.rng, seed)
    total_gpus = nodes.total_gpus
    if order is None:
        order = tuned_order(pods, total_gpus, tune, source)
        rank: npt.NDArray[np.int64] | None = node_ranks(nodes, source)
    else:
        rank = None
        order = pods.indices(order, kind="option", field="order")
    if limit is not None:
        order = order[:limit]
    typical = workload_typical(pods, nodes)
    window = parse_window_policy(policy)  # a different protocol: windows of k arrivals
    if window is not None:
        placed, _ = place_windows(nodes, pods, order, rank, source, typical, window)
    else:
        scorer = make_variant(policy, nodes, pods) if policy in VARIANTS else policy
        placed = place_sequence(nodes, pods, scorer, order, rank, source, typical)
    return RunResult(
        workload=opts.workload,
        policy=policy,
        tune=tune,
        seed=seed,
        total_gpus=total_gpus,
        n_pods=len(order),
        order=order,
        **{f.name: getattr(placed, f.name) for f in fields(placed)},  # every record it kept
    )


def _round_half_even(values: npt.NDArray[np.float64], digits: int) -> npt.NDArray[np.float64]:
    # Python's round() on each float (correctly rounded decimal), as the authors' pandas code does.
    return np.asarray([round(float(v), digits) for v in values], dtype=np.float64)


def _format2(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    # The reference logs these with "%.2f" and parses the text back.
    return np.asarray([float(f"{float(v):.2f}") for v in values], dtype=np.float64)


def _bucket_means(arrive: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> list[float]:
    """Mean of ``values`` per arrived bucket 0..130, with the +-1 fallback; NaN when empty."""
    ok = np.isfinite(values) & (arrive >= -1) & (arrive <= BUCKETS)
    idx = arrive[ok] + 1  # shift so -1 maps to 0
    vals = values[ok]
    size = BUCKETS + 2
    counts = np.bincount(idx, minlength=size)[:size]
    sums = np.bincount(idx, weights=vals, minlength=size)[:size]
    out: list[float] = []
    for b in range(BUCKETS):
        c = int(counts[b + 1])
        if c > 0:
            out.append(float(sums[b + 1]) / c)
            continue
        c3 = int(counts[b : b + 3].sum())
        out.append(float(sums[b : b + 3].sum()) / c3 if c3 > 0 else math.nan)
    return out


@dataclass(frozen=True, slots=True)
class DiscreteRow:
    """One row of the three tables."""

    workload: str
    sc_policy: str
    tune: float
    seed: int
    total_gpus: int
    alloc: tuple[float, ...]  # 131 values, NaN = empty cell
    frag_amount: tuple[float, ...]
    frag_ratio: tuple[float, ...]


def discrete_tables(run: RunResult) -> DiscreteRow:
    """Bucket one run's records by arrived % (see the module docstring)."""
    total = float(run.total_gpus)
    arrive = _round_half_even(run.arrived / total / 10, 0).astype(np.int64)
    alloc = _round_half_even(run.used / total / 10, 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(run.idle > 0, 100.0 * run.frag / run.idle, np.nan)
    frag_milli = _format2(run.frag)
    ratio = np.where(np.isfinite(ratio), _format2(np.nan_to_num(ratio)), np.nan)
    alloc_b = [round(v, 2) if math.isfinite(v) else v for v in _bucket_means(arrive, alloc)]
    frag_b = [
        round(100 * v / 1000 / total, 2) if math.isfinite(v) else v
        for v in _bucket_means(arrive, frag_milli)
    ]
    ratio_b = _bucket_means(arrive, ratio)
    return DiscreteRow(
        workload=run.workload,
        sc_policy=POLICY_IDS.get(run.policy)
        or EXTRA_POLICY_IDS.get(run.policy)
        or window_policy_id(run.policy),
        tune=run.tune,
        seed=run.seed,
        total_gpus=run.total_gpus,
        alloc=tuple(alloc_b),
        frag_amount=tuple(frag_b),
        frag_ratio=tuple(ratio_b),
    )


def _cell(v: float) -> str:
    return "" if not math.isfinite(v) else repr(float(v))


def write_tables(rows: Sequence[DiscreteRow], out_dir: str | Path) -> tuple[Path, Path, Path]:
    """Write the three tables in the authors' format; returns their paths."""
    out = output_dir(out_dir)
    cols = ",".join(str(b) for b in range(BUCKETS))
    allo = [f"workload,sc_policy,tune,seed,total_gpus,{cols}"]
    frag = [f"workload,sc_policy,tune,seed,{cols}"]
    ratio = [f"workload,sc_policy,tune,seed,{cols}"]
    for r in rows:
        head = f"{r.workload},{r.sc_policy},{r.tune!r},{r.seed}"
        allo.append(f"{head},{r.total_gpus}," + ",".join(_cell(v) for v in r.alloc))
        frag.append(f"{head}," + ",".join(_cell(v) for v in r.frag_amount))
        ratio.append(f"{head}," + ",".join(_cell(v) for v in r.frag_ratio))
    paths = tuple(out / name for name in TABLE_FILES)
    for path, lines in zip(paths, (allo, frag, ratio), strict=True):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths[0], paths[1], paths[2]


@dataclass(frozen=True, slots=True)
class _Task:
    nodes: NodeTable
    pods: PodTable
    policy: str
    seed: int
    tune: float
    rng: str
    limit: int | None


def _run_task(task: _Task) -> RunResult:
    return run_one(
        task.nodes,
        task.pods,
        task.policy,
        task.seed,
        tune=task.tune,
        rng=task.rng,
        limit=task.limit,
    )


def _run_shared(
    tables: tuple[NodeTable, PodTable], spec: tuple[str, int, float, str, int | None]
) -> RunResult:
    policy, seed, tune, rng, limit = spec
    return run_one(tables[0], tables[1], policy, seed, tune=tune, rng=rng, limit=limit)


def run_grid(
    nodes: NodeTable,
    pods: PodTable,
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    tune: float = DEFAULT_TUNE,
    rng: str = DEFAULT_RNG,
    workers: int = 1,
    limit: int | None = None,
    progress: Callable[[int, int, RunResult], None] | None = None,
    engine: str = "process",
    address: str | None = None,
) -> list[RunResult]:
    """All (policy, seed) runs, in policy-then-seed order whatever ``workers`` is.

    ``engine="ray"`` runs each run as a Ray task instead of a worker process (``address``: where
    to find or start Ray, see :mod:`gangsched.sim.ray_engine`); the results are the same.
    """
    for p in policies:
        _check_policy(p)
    check_tune(tune)
    if workers < 1:
        raise ConfigError("must be at least 1", kind="option", name="--workers")
    if engine not in ("process", "ray"):
        raise ConfigError("expected 'process' or 'ray'", kind="option", name="--engine")
    if engine == "ray":
        from gangsched.sim.ray_engine import map_ordered

        specs = [(p, s, tune, rng, limit) for p in policies for s in seeds]
        return map_ordered(_run_shared, specs, (nodes, pods), address=address, progress=progress)
    tasks = [_Task(nodes, pods, p, s, tune, rng, limit) for p in policies for s in seeds]
    results: list[RunResult] = []
    if workers == 1 or len(tasks) == 1:
        for task in tasks:
            results.append(_run_task(task))
            if progress is not None:
                progress(len(results), len(tasks), results[-1])
        return results
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
        for res in pool.map(_run_task, tasks):
            results.append(res)
            if progress is not None:
                progress(len(results), len(tasks), res)
    return results
