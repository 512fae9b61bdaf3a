"""The dispatcher: every extension point's chain, resolved once, asked through typed methods.

:class:`Dispatch` is built when a session opens. For each row of
:data:`~gangsched.framework.extension_points.EXTENSION_POINTS` it keeps, tier by tier, the bound
members of the
plugins that serve the point (the member exists, the config leaves the point switched on for
that plugin, and its signature matches the point's Protocol — a mismatch is a
:class:`~gangsched.errors.ConfigError` naming the plugin and the point). Each point then has one
typed method here that hands the chain to its combiner (:mod:`gangsched.framework.combine`), or,
for the node points (``predicate``, ``node_score``), to the folds generated from
:data:`PREDICATE_FOLD` and :data:`SCORE_FOLD`. Outside this module and the combiners, nothing
walks plugins.

Actions reach it as ``ssn.points``::

    ssn.points.job_ready(job)          # all_pass over the job_ready chain
    ssn.points.predicate_ok(tmpl, rows)
"""

from __future__ import annotations

import ast
import inspect
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from gangsched._codegen import Operand, define, scalar, vector
from gangsched.config import EXTENSION_POINTS as SWITCHED_POINTS
from gangsched.config import PluginOption
from gangsched.errors import ConfigError, GangschedError
from gangsched.framework.answers import GuardedFairShare, builtin, guarded, guarded_member, who
from gangsched.framework.combine import (
    all_pass,
    any_true,
    each,
    first_answer,
    first_tier_all,
    intersect_first_decisive,
    lexicographic,
    vote,
)
from gangsched.framework.extension_points import (
    EXTENSION_POINTS,
    ExtensionPoint,
    FairSharePlugin,
    Kind,
    Rows,
)
from gangsched.session.arrays import TaskTemplate

if TYPE_CHECKING:
    from gangsched.session.core import Session

__all__ = ["Dispatch"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
BOOL = npt.NDArray[np.bool_]
Chain = tuple[tuple[Callable[..., Any], ...], ...]

_SWITCHED = frozenset(SWITCHED_POINTS)

#: Built-in ``preemptable`` / ``reclaimable`` plugins that keep or drop each candidate on its
#: own (whatever the other candidates asked with it) and never abstain. Not drf: it takes a
#: job's candidates away one after another, each judged with those before it gone.
ONE_BY_ONE_VICTIMS = frozenset({"priority", "gang", "conformance", "proportion"})
#: Built-in ``preemptable`` / ``reclaimable`` plugins whose answer about a group of candidates
#: depends on that group's candidates alone, never abstain, and answer for many groups at once
#: through a member ``<point>_by_group(ssn, preemptor, candidates, groups)`` (whether each
#: candidate is kept, each group judged on its own): drf, whose candidates of a job go one after
#: another.
GROUP_BY_GROUP_VICTIMS = frozenset({"drf"})
#: Built-in ``victim_order`` plugins whose key of a task depends only on the task's and its
#: job's records, the job's task counters and allocation, and its queue's allocation.
JOB_AND_QUEUE_ORDERS = frozenset({"priority", "gang", "drf", "proportion", "sla"})
# (plugin type, member) -> None when the member matches its point's Protocol, else why not.
_CHECKED: dict[tuple[type, str], str | None] = {}


def _expected(ep: ExtensionPoint, member: str) -> inspect.Signature:
    return inspect.signature(getattr(ep.protocol, member))


def _mismatch(plugin: object, ep: ExtensionPoint, member: str) -> str | None:
    """Why ``plugin.member`` cannot serve ``ep`` (None when it can), checked once per type."""
    key = _cache_key(plugin, member)
    if key is not None and key in _CHECKED:
        return _CHECKED[key]
    found = getattr(plugin, member)
    why: str | None = None
    expected = _expected(ep, member)
    params = [p for p in expected.parameters.values() if p.name != "self"]
    shown = f"{member}({', '.join(str(p).split(':')[0] for p in params)})"
    if not callable(found):
        why = f"{member} is not callable; the point calls {shown}"
    else:
        try:
            sig = inspect.signature(found)
        except (TypeError, ValueError):  # a builtin without a signature: trust it
            sig = None
        if sig is not None:
            positional = [p for p in params if p.kind is not p.KEYWORD_ONLY]
            keywords = {p.name: None for p in params if p.kind is p.KEYWORD_ONLY}
            try:
                sig.bind(*([None] * len(positional)), **keywords)
            except TypeError:
                why = f"{member}{sig} does not accept the point's call {shown}"
    if key is not None:
        _CHECKED[key] = why
    return why


def _cache_key(plugin: object, member: str) -> tuple[type, str] | None:
    """The cache key of a member its type defines as a function (the same for every instance);
    None for one an instance, a property or ``__getattr__`` gives (it may differ per instance)."""
    cls = type(plugin)
    static = inspect.getattr_static(cls, member, None)
    if not isinstance(static, types.FunctionType | staticmethod | classmethod):
        return None
    own = getattr(plugin, "__dict__", None)
    return None if isinstance(own, dict) and member in own else (cls, member)


#: Per point, the attributes of a plugin deciding whether it serves the point reads: the
#: point's name, or the fair-share provider's members.
_READS: dict[str, tuple[str, ...]] = {
    ep.name: (
        tuple(sorted(m for m in dir(ep.protocol) if m.startswith("queue_")))
        if ep.kind is Kind.PROVIDER
        else (ep.name,)
    )
    for ep in EXTENSION_POINTS
}
#: Per plugin type and point the type decides (:func:`_type_decides`): whether its plugins
#: serve the point.
_SERVES: dict[tuple[type, str], bool] = {}
#: Per plugin type and point: whether the type's class attributes alone decide it.
_BY_TYPE: dict[tuple[type, str], bool] = {}


def _type_decides(plugin: object, ep: ExtensionPoint) -> bool:
    """Whether ``plugin``'s type alone decides whether it serves ``ep``: the type reads its
    attributes the ordinary way, each attribute the decision reads is a function or a plain
    value of the class (not a property or another descriptor), and the instance holds none
    of them itself. Then every plugin of the type answers alike (worked out once)."""
    cls = type(plugin)
    reads = _READS[ep.name]
    decides = _BY_TYPE.get((cls, ep.name))
    if decides is None:
        decides = (
            cls.__getattribute__ is object.__getattribute__
            and inspect.getattr_static(cls, "__getattr__", None) is None
            and all(_plain(inspect.getattr_static(cls, n, None)) for n in reads)
        )
        _BY_TYPE[cls, ep.name] = decides
    if not decides:
        return False
    own = getattr(plugin, "__dict__", None)
    return own is None or all(n not in own for n in reads)


#: Per point, per tier, the positions of the plugins serving it (in tier order).
Wiring = tuple[tuple[int, ...], ...]
#: Per configuration of plugin types and switched-off points (:func:`_wiring_key`): per
#: point, its wiring when the types decide it (None: resolved for each session).
_WIRING: dict[
    tuple[tuple[tuple[type, frozenset[str] | None], ...], ...], tuple[Wiring | None, ...]
] = {}
#: How many configurations' wirings are kept.
_WIRINGS_KEPT = 64
#: Every attribute a decision of :func:`_type_decides` reads.
_ALL_READS = frozenset(n for reads in _READS.values() for n in reads)


def _wiring_key(
    opened: Sequence[Sequence[tuple[PluginOption | None, Any]]],
) -> tuple[tuple[tuple[type, frozenset[str] | None], ...], ...] | None:
    """What decides which plugins serve which points when their types decide it: per tier,
    each plugin's type and switched-off points. None when a plugin holds one of the
    attributes read itself (its own answer is read for each session)."""
    key = []
    for tier in opened:
        row = []
        for option, plugin in tier:
            own = getattr(plugin, "__dict__", None)
            if own is not None and not own.keys().isdisjoint(_ALL_READS):
                return None
            row.append((type(plugin), None if option is None else option.disabled))
        key.append(tuple(row))
    return tuple(key)


def _plain(found: object) -> bool:
    """A class attribute read the same through every instance: none, a function (a method,
    static or class method) or a value that is not a descriptor."""
    if found is None or isinstance(found, types.FunctionType | staticmethod | classmethod):
        return True
    return not hasattr(type(found), "__get__")


def _switched_off(option: PluginOption | None, ep: ExtensionPoint) -> bool:
    if option is None:
        return False
    name = ep.follows or ep.name
    return name in _SWITCHED and not option.enabled(name)


# ------------------------------------------------------------------ the node points' folds
#
# ``predicate`` and ``node_score`` are asked about many rows (a mask, a sum of arrays) and
# about one row (a bool, a float: the refresh after a placement, where an array and in-place
# operations on one row cost more than the numbers). Each point folds its chain's answers
# with one formula, from one start; both forms are rendered from that text by
# :mod:`gangsched._codegen` (NumPy statements writing into the fold's own array, or one
# plain expression), so they add (or combine) the same answers in the same order.


@dataclass(frozen=True, slots=True)
class Fold:
    """How a chain's answers fold: from ``start``, each answer taken in by ``take`` (a formula
    over ``{so_far}`` and ``{answer}``), in tier order."""

    start: str
    take: str


#: No predicate rejects the node: true so far and not rejected by this answer.
PREDICATE_FOLD = Fold(start="True", take="{so_far} & ~{answer}")
#: The node's score: the scorers' answers added, in tier order, from zero.
SCORE_FOLD = Fold(start="0.0", take="{so_far} + {answer}")


def fold_source(predicate: Fold, score: Fold) -> str:
    """The source of the dispatcher's node points, rendered from ``predicate`` and ``score``:
    many rows (``predicate_ok``, ``node_score``) and one row (``predicate_ok_one``,
    ``node_score_one``), as functions of the dispatcher (``self``)."""

    def rows(fold: Fold, kind: str, answer: str, indent: int) -> str:
        ops = {"so_far": Operand("so_far", kind, owned=True), "answer": Operand(answer, kind)}
        return vector(fold.take, ops, "fold", floats=False, indent=" " * indent)

    def start(fold: Fold, dtype: str) -> str:
        # an array of the start (np.zeros / np.ones when it is 0 / 1: the same, and cheaper)
        value = ast.literal_eval(fold.start)
        made = {0: "np.zeros(rows.size", 1: "np.ones(rows.size"}.get(
            value, f"np.full(rows.size, {fold.start}"
        )
        return f"{made}, dtype={dtype})"

    def one(fold: Fold, answer: str) -> str:
        return scalar(fold.take, {"so_far": "so_far", "answer": answer}, {})

    return f'''
def predicate_ok(self, tmpl, rows, *, without=None):
    """Nodes among ``rows`` no predicate rejects (``without``: leave that plugin out)."""
    so_far = {start(predicate, "np.bool_")}
    for reject, _reason in self.rejections(tmpl, rows, without=without):
{rows(predicate, "b", "reject", 8)}        so_far = fold
    return so_far


def predicate_ok_one(self, tmpl, row):
    """:meth:`predicate_ok` of the one node of ``row``, as a bool (every plugin is asked)."""
    so_far = {predicate.start}
    for reject, _reason in self.rejections(tmpl, row):
        so_far = {one(predicate, "reject[0]")}
    return so_far


def node_score(self, tmpl, rows):
    """The node_score chain's answers over ``rows``, folded in float64."""
    so_far = {start(score, "np.float64")}
    for tier in self._chains["node_score"]:
        for answer in tier:
            got = answer(self._ssn, tmpl, rows)
{rows(score, "f", "got", 12)}            so_far = fold
    return so_far


def node_score_one(self, tmpl, row):
    """:meth:`node_score` of the one node of ``row``, as a float (each plugin answers its one
    row in its own one-row form; its one number is read as a float)."""
    so_far = {score.start}
    for tier in self._chains["node_score"]:
        for answer in tier:
            got = answer(self._ssn, tmpl, row)
            so_far = {one(score, "float(got[0] if np.ndim(got) else got)")}
    return so_far
'''


#: The four methods of :class:`Dispatch` the folds are (defined in this module's namespace,
#: made methods in the class body).
_folds = define(fold_source(PREDICATE_FOLD, SCORE_FOLD), globals(), "node point folds")


class Dispatch:
    """The resolved chains of one session and a typed method per extension point."""

    __slots__ = ("_chains", "_fair", "_flags", "_members", "_plugins", "_ssn")

    def __init__(
        self, ssn: Session, opened: Sequence[Sequence[tuple[PluginOption | None, Any]]]
    ) -> None:
        self._ssn = ssn
        self._chains: dict[str, Chain] = {}
        self._plugins: dict[str, tuple[tuple[Any, ...], ...]] = {}
        self._flags: dict[str, bool] = {}
        self._fair: Any = None
        self._members: dict[tuple[str, int], Callable[..., Any]] = {}
        key = _wiring_key(opened)
        wiring = _WIRING.get(key) if key is not None else None
        found: list[Wiring | None] | None = [] if key is not None and wiring is None else None
        # per tier, its plugins; per plugin (by id), whether it is one of the package's own
        plugins = [[p for _, p in tier] for tier in opened]
        own = {id(p): builtin(p) for tier in plugins for p in tier}
        for n, ep in enumerate(EXTENSION_POINTS):
            fixed = wiring[n] if wiring is not None else None
            tiers: list[tuple[Any, ...]] = []
            if fixed is not None:
                for tier_plugins, fixed_picks in zip(plugins, fixed, strict=True):
                    tiers.append(tuple([tier_plugins[k] for k in fixed_picks]))
            else:
                chosen: list[tuple[int, ...]] = []
                for tier in opened:
                    serving: list[Any] = []
                    picks: list[int] = []
                    for k, (option, plugin) in enumerate(tier):
                        if _switched_off(option, ep) or not self._serves(plugin, ep):
                            continue
                        serving.append(plugin)
                        picks.append(k)
                    tiers.append(tuple(serving))
                    chosen.append(tuple(picks))
                if found is not None:
                    by_type = all(
                        _switched_off(option, ep) or _BY_TYPE.get((type(plugin), ep.name), False)
                        for tier in opened
                        for option, plugin in tier
                    )
                    found.append(tuple(chosen) if by_type else None)
            self._plugins[ep.name] = tuple(tiers)
            if ep.kind is Kind.FLAG:
                self._flags[ep.name] = any(p for tier in tiers for p in tier)
            elif ep.kind is Kind.PROVIDER:
                fair = next((p for tier in tiers for p in tier), None)
                self._fair = fair if fair is None or builtin(fair) else GuardedFairShare(fair)
            else:
                name = ep.name
                members = self._members
                chain_tiers: list[tuple[Callable[..., Any], ...]] = []
                for tier in tiers:
                    got: list[Callable[..., Any]] = []
                    for p in tier:
                        # (a built-in plugin's member as it is: guarded_member's answer)
                        fn = getattr(p, name) if own[id(p)] else guarded_member(p, name)
                        members[name, id(p)] = fn
                        got.append(fn)
                    chain_tiers.append(tuple(got))
                self._chains[name] = tuple(chain_tiers)
        rows = [p for n in ("predicate", "node_score") for p in self.serving(n)]
        declared = set(map(id, self.serving("shape_only")))  # a numpy bool declares it too
        self._flags["shape_only"] = all(id(p) in declared for p in rows)
        self._flags["predicates_by_shape"] = all(
            id(p) in declared for p in self.serving("predicate")
        )
        self._flags["scores_may_lag"] = self._flags["shape_only"] and all(
            map(builtin, self.serving("node_score"))
        )
        if found is not None and key is not None:
            if len(_WIRING) >= _WIRINGS_KEPT:
                _WIRING.clear()
            _WIRING[key] = tuple(found)

    @staticmethod
    def _serves(plugin: object, ep: ExtensionPoint) -> bool:
        by_type = _type_decides(plugin, ep)
        if by_type:
            known = _SERVES.get((type(plugin), ep.name))
            if known is not None:
                return known
        try:
            found = Dispatch._resolve(plugin, ep)
            if by_type:
                _SERVES[type(plugin), ep.name] = found
            return found
        except GangschedError:
            raise
        except Exception as err:  # a member (property, __getattr__) that raises when read
            detail = f"reading it for the {ep.name!r} extension point raised {err!r}"
            raise ConfigError(detail, kind="plugin", name=who(plugin), field=ep.name) from err

    @staticmethod
    def _resolve(plugin: object, ep: ExtensionPoint) -> bool:
        name = who(plugin)
        if ep.kind is Kind.FLAG:
            value = getattr(plugin, ep.name, False)
            if not isinstance(value, bool | np.bool_):
                raise ConfigError(
                    f"{ep.name} must be a bool, not {type(value).__name__}",
                    kind="plugin",
                    name=str(name),
                    field=ep.name,
                )
            return bool(value)
        if ep.kind is Kind.PROVIDER:
            if not isinstance(plugin, FairSharePlugin):
                return False
            members = [m for m in dir(ep.protocol) if m.startswith("queue_")]
        else:
            if getattr(plugin, ep.name, None) is None:
                return False
            members = [ep.name]
        for member in members:
            why = _mismatch(plugin, ep, member)
            if why is not None:
                raise ConfigError(
                    f"does not match the {ep.name!r} extension point: {why}",
                    kind="plugin",
                    name=str(name),
                    field=member,
                )
        return True

    def _ask(self, point: str, plugin: object, *args: Any) -> Any:
        """Ask one serving plugin of ``point`` (through its guarded member)."""
        return self._members[point, id(plugin)](self._ssn, *args)

    # ------------------------------------------------------------------ introspection

    def built_in(self, point: str) -> bool:
        """Whether every plugin serving ``point`` is one of the package's own (whose answers
        follow the rules its docstrings state, so an action may reuse them)."""
        return all(map(builtin, self.serving(point)))

    def served_only_by(self, points: tuple[str, ...], names: frozenset[str]) -> bool:
        """Whether every plugin serving any of ``points`` is named one of ``names``."""
        return all(getattr(p, "name", None) in names for q in points for p in self.serving(q))

    def serving(self, point: str) -> tuple[Any, ...]:
        """The plugins serving ``point``, in tier order."""
        return tuple(p for tier in self._plugins[point] for p in tier)

    def victims_by_group(
        self, point: str, preemptor: int, candidates: I64, groups: I64, n_groups: int
    ) -> I64 | None:
        """:meth:`victims` asked for each group of ``candidates`` on its own (``groups``: the
        group of each candidate, below ``n_groups``), the answers merged and sorted — worked
        out by asking each plugin once for every candidate, when every plugin serving ``point``
        is a built-in one that keeps or drops each candidate on its own and always answers
        (:data:`ONE_BY_ONE_VICTIMS`): per group, the first tier whose plugins all keep some of
        its candidates decides, keeping what they all keep. None for any other plugin."""
        tiers = self._plugins[point]
        if not all(builtin(p) and p.name in ONE_BY_ONE_VICTIMS for t in tiers for p in t):
            return None
        answer = np.zeros(candidates.size, dtype=np.bool_)
        decided = np.zeros(n_groups, dtype=np.bool_)
        for tier in tiers:
            if not tier:
                continue
            keep = ~decided[groups]
            for plugin in tier:
                keep &= np.isin(
                    candidates, getattr(plugin, point)(self._ssn, preemptor, candidates)
                )
            here = np.zeros_like(decided)
            here[groups[keep]] = True
            answer |= keep
            decided |= here
        out: I64 = np.sort(candidates[answer])
        return out

    def walk_victims(
        self,
        point: str,
        preemptor: int,
        candidates: I64,
        groups: I64,
        answers: Mapping[str, Callable[[I64], I64 | BOOL]],
        *,
        marker: str,
        grouped: frozenset[str] = frozenset(),
        masks: bool = False,
        unmarked: bool = True,
    ) -> tuple[I64, I64]:
        """Volcano's ``Session.Preemptable`` / ``Reclaimable`` (today's, since v1.11.0) asked
        about each group of ``candidates`` on its own (``groups``: the group of each, the
        node): per group, tier by tier, the answers of the plugins serving ``point`` are
        intersected; a plugin answering none ends the tier (the walk goes on to the next), an
        empty intersection starts the tier again from the next answer, and the first tier
        left with victims decides. ``answers`` gives the answer of the plugins it names
        instead of theirs; ``grouped`` names those of them that judge each group alone when
        given every group's candidates at once; with ``masks``, each of ``answers`` tells
        which of the candidates it is given it keeps (a mask over them) instead of naming
        them. Returns the sorted victims and, among them, those whose deciding answers did
        not include the plugin named ``marker`` (without ``unmarked``, that second array is
        left empty and not worked out: a caller that does not read it saves the walk's
        bookkeeping of the marker).

        Worked out on every group at once when every plugin asked keeps or drops each
        candidate on its own (:data:`ONE_BY_ONE_VICTIMS`) or answers for every group at once
        (:data:`GROUP_BY_GROUP_VICTIMS`), group by group otherwise."""
        tiers = self._plugins[point]
        ssn = self._ssn
        members: list[Callable[[I64], BOOL]] = []

        def is_member(got: I64) -> BOOL:
            """:func:`_membership` of the candidates, made when first asked (answers given
            as masks never ask)."""
            if not members:
                members.append(_membership(candidates))
            return members[0](got)

        def answer(plugin: Any, cands: I64) -> I64 | None:
            given = answers.get(plugin.name)
            got = (
                given(cands) if given is not None else getattr(plugin, point)(ssn, preemptor, cands)
            )
            if got is None:
                return None
            if masks and given is not None:
                kept: I64 = cands[np.asarray(got, dtype=np.bool_)]
                return kept
            return np.asarray(got, dtype=np.int64)

        def by_group(plugin: Any) -> Callable[[], BOOL | None] | None:
            """The plugin's answer for every group at once, if it gives one."""
            if not builtin(plugin):
                return None
            if plugin.name in ONE_BY_ONE_VICTIMS or (
                plugin.name in answers and plugin.name in grouped
            ):

                def each_alone() -> BOOL | None:
                    if masks and plugin.name in answers:
                        keep = answers[plugin.name](candidates)
                        return None if keep is None else np.asarray(keep, dtype=np.bool_)
                    got = answer(plugin, candidates)
                    return None if got is None else is_member(got)

                return each_alone
            if plugin.name in GROUP_BY_GROUP_VICTIMS and plugin.name not in answers:
                member = getattr(plugin, f"{point}_by_group", None)
                if member is not None:
                    return lambda: np.asarray(member(ssn, preemptor, candidates, groups), bool)
            return None

        asks = [[a for a in map(by_group, tier) if a is not None] for tier in tiers]
        if all(len(a) == len(t) for a, t in zip(asks, tiers, strict=True)):
            names = [[p.name for p in tier] for tier in tiers]
            chosen, loose = _walk_by_mask(names, asks, groups, marker if unmarked else None)
            return np.sort(candidates[chosen]), np.sort(candidates[loose])
        none = candidates[:0]
        victims: list[I64] = []
        free: list[I64] = []
        for g in np.unique(groups).tolist():
            here, marked = _walk_group(tiers, candidates[groups == g], answer, marker)
            victims.append(here)
            if not marked:
                free.append(here)
        out: I64 = np.sort(np.concatenate(victims)) if victims else none
        rest: I64 = np.sort(np.concatenate(free)) if free else none
        return out, rest

    def victim_order_by_job_and_queue(self) -> bool:
        """Whether every plugin ordering victims is a built-in one whose key for a task depends
        only on the task's and its job's records, the job's task counters and allocation and
        its queue's allocation (:data:`JOB_AND_QUEUE_ORDERS`)."""
        return all(
            builtin(p) and p.name in JOB_AND_QUEUE_ORDERS for p in self.serving("victim_order")
        )

    @property
    def fair_share(self) -> FairSharePlugin | None:
        """The plugin giving queues their deserved share (proportion, capacity), if any."""
        fair: FairSharePlugin | None = self._fair
        return fair

    @property
    def shape_only(self) -> bool:
        """Every predicate and node_score plugin answers by the task's shape alone."""
        return self._flags["shape_only"]

    @property
    def predicates_by_shape(self) -> bool:
        """Every predicate plugin answers by the task's shape alone (node_score plugins may
        not: :attr:`shape_only` asks both)."""
        return self._flags["predicates_by_shape"]

    @property
    def scores_may_lag(self) -> bool:
        """Whether a row's score worked out later is the one worked out when its node last
        changed: every node_score plugin is the package's own and answers by the node's row
        and the task's shape alone (:attr:`shape_only`). Then an evaluation may be read with
        its scores lagging (:meth:`Session.feasible`) and scored when read; a plugin from
        elsewhere may read what changes meanwhile (a job's tasks), and a score worked out
        later would differ."""
        return self._flags["scores_may_lag"]

    @property
    def queue_order_global(self) -> bool:
        return self._flags["queue_order_global"]

    # ------------------------------------------------------------------ orders

    def job_order(self, job: int) -> tuple[Any, ...]:
        return lexicographic(self._chains["job_order"], self._ssn, job)

    def queue_order(self, queue: int) -> tuple[Any, ...]:
        return lexicographic(self._chains["queue_order"], self._ssn, queue)

    def task_order(self, task: int) -> tuple[Any, ...]:
        return lexicographic(self._chains["task_order"], self._ssn, task)

    def victim_order(self, task: int) -> tuple[Any, ...]:
        return lexicographic(self._chains["victim_order"], self._ssn, task)

    # ------------------------------------------------------------------ jobs and queues

    def job_valid(self, job: int) -> str | None:
        return first_answer(self._chains["job_valid"], self._ssn, job)

    def job_ready(self, job: int) -> bool:
        return all_pass(self._chains["job_ready"], self._ssn, job)

    def job_pipelined(self, job: int) -> bool:
        return vote(self._chains["job_pipelined"], self._ssn, job)

    def job_enqueueable(self, job: int) -> bool:
        return vote(self._chains["job_enqueueable"], self._ssn, job)

    def job_enqueued(self, job: int) -> None:
        each(self._chains["job_enqueued"], self._ssn, job)

    def job_starving(self, job: int) -> bool:
        return first_tier_all(self._chains["job_starving"], self._ssn, job)

    def overused(self, queue: int) -> bool:
        return any_true(self._chains["overused"], self._ssn, queue)

    def allocatable(self, queue: int, tmpl: TaskTemplate) -> bool:
        return all_pass(self._chains["allocatable"], self._ssn, queue, tmpl)

    def allocatable_refusal(self, queue: int, tmpl: TaskTemplate) -> str | None:
        """Why ``allocatable`` refuses: the first refusing plugin (the one the combiner stops
        at) explains through its ``allocatable_reason``, else it is named. None: it allows."""
        explains = set(map(id, self.serving("allocatable_reason")))
        for plugin in self.serving("allocatable"):
            if self._ask("allocatable", plugin, queue, tmpl):
                continue
            why = (
                self._ask("allocatable_reason", plugin, queue, tmpl)
                if id(plugin) in explains
                else None
            )
            return str(why) if why else f"plugin {who(plugin)!r} refuses it"
        return None

    # ------------------------------------------------------------------ victims

    def preemptable(self, preemptor: int, candidates: I64) -> I64:
        return self.victims("preemptable", preemptor, candidates)

    def victims(self, point: str, preemptor: int, candidates: I64) -> I64:
        """``preemptable`` or ``reclaimable`` (``point``), for an action that serves both."""
        if point not in ("preemptable", "reclaimable"):
            raise ConfigError("not a victim point", kind="extension point", name=point)
        return intersect_first_decisive(self._chains[point], self._ssn, preemptor, candidates)

    def preemptive(self, queue: int, claim: list[int]) -> tuple[str, str] | None:
        """``(plugin name, why)`` of the first plugin refusing ``queue`` a reclaim for
        ``claim``; None when every plugin agrees."""
        for plugin in self.serving("preemptive"):
            why = self._ask("preemptive", plugin, queue, claim)
            if why is not None:
                return who(plugin), str(why)
        return None

    def exposed(self, tasks: list[int]) -> tuple[str | None, bool]:
        """Per tier of ``reclaimable``: a plugin with a per-task rule (``exposed``) says why a
        claimed task could be reclaimed back. Returns ``(why or None, queue_level)`` where
        ``queue_level`` tells that some deciding tier has no such plugin (the action's
        queue-level rule applies there)."""
        judges = set(map(id, self.serving("exposed")))
        tiers = [t for t in self._plugins["reclaimable"] if t] or [()]
        queue_level = False
        for tier in tiers:
            mine = [p for p in tier if id(p) in judges]
            queue_level |= not mine
            for plugin in mine:
                why = self._ask("exposed", plugin, tasks)
                if why is not None:
                    return str(why), queue_level
        return None, queue_level

    # ------------------------------------------------------------------ nodes

    def rejections(
        self, tmpl: TaskTemplate, rows: Rows, *, without: object = None
    ) -> Iterator[tuple[BOOL, str]]:
        """Every ``(reject_mask, reason)`` the predicates give over ``rows``, in tier order
        (``without``: leave that plugin out — a plugin asking what the others say)."""
        for tier in self._chains["predicate"]:
            for answer in tier:
                if without is None or getattr(answer, "__self__", None) is not without:
                    yield from answer(self._ssn, tmpl, rows)

    # The node points, generated from PREDICATE_FOLD and SCORE_FOLD (see fold_source): many
    # rows in NumPy, one row in plain bools and floats (an array and in-place operations on
    # one row cost about a microsecond a call more, 2-4 % of a 1,000-node cycle).
    predicate_ok: ClassVar[Callable[..., BOOL]] = _folds["predicate_ok"]
    predicate_ok_one: ClassVar[Callable[[Dispatch, TaskTemplate, Rows], bool]] = _folds[
        "predicate_ok_one"
    ]
    node_score: ClassVar[Callable[[Dispatch, TaskTemplate, Rows], F64]] = _folds["node_score"]
    node_score_one: ClassVar[Callable[[Dispatch, TaskTemplate, Rows], float]] = _folds[
        "node_score_one"
    ]

    def node_scores(self, tmpl: TaskTemplate, rows: Rows) -> dict[str, F64]:
        """Each node_score plugin's own scores over ``rows`` (for explanations)."""
        return {who(p): self._ask("node_score", p, tmpl, rows) for p in self.serving("node_score")}

    def gpu_choice(
        self, task: int, node: int, count: int, *, future: bool
    ) -> tuple[int, ...] | None:
        """Devices a plugin names for ``task`` on ``node`` (first answer of ``count``; a
        third-party plugin's answer also has to fit those devices, else it is passed over)."""
        for tier in self._chains["gpu_choice"]:
            for answer in tier:
                pick = answer(self._ssn, task, node, future=future)
                if pick is None or len(pick) != count:
                    continue
                pick = tuple(pick)
                if guarded(answer) and not self._ssn.fits(task, node, future=future, gpus=pick):
                    continue
                return pick
        return None

    def hypernode_score(self) -> Any:
        return first_answer(self._chains["hypernode_score"], self._ssn)

    # ------------------------------------------------------------------ events and notes

    def on_session_open(self) -> None:
        each(self._chains["on_session_open"], self._ssn)

    def on_allocate(self, task: int) -> None:
        each(self._chains["on_allocate"], self._ssn, task)

    def on_deallocate(self, task: int) -> None:
        each(self._chains["on_deallocate"], self._ssn, task)

    def reason_notes(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for tier in self._chains["reason_notes"]:
            for answer in tier:
                for job, note in answer(self._ssn).items():
                    out.setdefault(int(job), str(note))
        return out


def _membership(candidates: I64) -> Callable[[I64], BOOL]:
    """``np.isin(candidates, got)`` as a function of ``got``: found by binary search when
    ``candidates`` ascend strictly (as the actions give them), which costs a few array
    operations instead of sorting both sides on every call."""
    if not (candidates.size < 2 or bool(np.all(candidates[1:] > candidates[:-1]))):
        return lambda got: np.isin(candidates, got)

    def member(got: I64) -> BOOL:
        out = np.zeros(candidates.size, dtype=np.bool_)
        if got.size and candidates.size:
            at = np.minimum(np.searchsorted(candidates, got), candidates.size - 1)
            out[at[candidates[at] == got]] = True
        return out

    return member


def _walk_group(
    tiers: Sequence[Sequence[Any]],
    candidates: I64,
    answer: Callable[[Any, I64], I64 | None],
    marker: str,
) -> tuple[I64, bool]:
    """:meth:`Dispatch.walk_victims` on one group: its victims, and whether the answer of the
    plugin named ``marker`` chose them."""
    for tier in tiers:
        victims: I64 | None = None
        marked = False
        for plugin in tier:
            got = answer(plugin, candidates)
            if got is None:
                continue
            if got.size == 0:
                victims = None
                break
            if victims is None:
                victims, marked = got, plugin.name == marker
            else:
                victims = np.intersect1d(victims, got)
                marked = marked or plugin.name == marker
                if victims.size == 0:
                    victims, marked = None, False  # the next answer starts the tier again
        if victims is not None:
            return np.sort(victims), marked
    return candidates[:0], False


#: Groups numbered below this are their own labels in :func:`_walk_by_mask` (masks over
#: that many labels cost less than numbering the groups afresh on every walk).
_DIRECT_LABELS = 1 << 16


def _walk_by_mask(
    names: Sequence[Sequence[str]],
    asks: Sequence[Sequence[Callable[[], BOOL | None]]],
    groups: I64,
    marker: str | None,
) -> tuple[BOOL, BOOL]:
    """:func:`_walk_group` on every group at once: ``asks`` holds, tier by tier, each plugin's
    answer about every candidate (whether it keeps each, every group judged on its own; None:
    it abstains; ``names`` its name), asked once. Returns which candidates are victims, and
    which of them were chosen without the answer of the plugin named ``marker`` (with
    ``marker`` None, none: the marks are not kept)."""
    # a label per group: the group itself when it is a small non-negative number (a node);
    # labels without candidates count as decided from the start
    if groups.size and int(groups.min()) >= 0 and int(groups.max()) < _DIRECT_LABELS:
        group = groups
    else:
        _, group = np.unique(groups, return_inverse=True)
    n = int(group.max()) + 1 if group.size else 0
    chosen = np.zeros(groups.size, dtype=np.bool_)
    loose = np.zeros(groups.size, dtype=np.bool_)
    decided = np.ones(n, dtype=np.bool_)
    decided[group] = False

    def per_group(mask: BOOL) -> BOOL:
        hit = np.zeros(n, dtype=np.bool_)
        hit[group[mask]] = True
        return hit

    # Per group of this tier: ``alive``, no plugin answered none; ``has``, its victims so far
    # are not nil (``cur``, per candidate, holds them); ``marked``, the marker's answer is
    # among those that chose them. ``cur``, ``has`` and ``marked`` are read only for groups
    # alive: an answer starts a group that has none (``cur`` becomes the answer) and meets
    # one that has some (``cur`` keeps what both keep), ``keep & (cur | ~has)`` either way;
    # a group left with none starts again from the next answer. ``marked`` stays inside
    # ``has``, so a marker's answer marks every group with victims and another unmarks those
    # left with none.
    for tier_names, tier_asks in zip(names, asks, strict=True):
        alive = ~decided
        has = np.zeros(n, dtype=np.bool_)
        marked = has
        cur = chosen  # read only where ``has``: nothing yet
        for name, ask in zip(tier_names, tier_asks, strict=True):
            if not alive.any():
                break  # every group decided or out of this tier: the rest changes nothing
            keep = ask()
            if keep is None:
                continue
            alive &= per_group(keep)  # a plugin answering none ends the tier for the group
            cur = keep & (cur | ~has[group])
            has = alive & per_group(cur)
            if marker is not None:
                marked = has if name == marker else marked & has
        on = has[group]
        chosen = chosen | (cur & on)
        if marker is not None:
            loose = loose | (cur & on & ~marked[group])
        decided |= has
    return chosen, loose
