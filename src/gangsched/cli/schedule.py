"""The ``gangsched schedule`` and ``gangsched get`` subcommands (wired in by :mod:`gangsched.cli`).

``-f`` (``-`` for standard input) takes gangsched interchange snapshots (JSON/YAML with keys
nodes, queues, jobs, tasks) and Kubernetes / Volcano manifests (anything with ``apiVersion`` /
``kind``), in any mix and any number of files; they are merged into one snapshot. The
scheduler configuration is ``--config`` (Volcano's ``volcano-scheduler.conf`` text, the
plain-data form, or the ConfigMap manifest), else the scheduler ConfigMap among the ``-f``
files, else Volcano's default. What the loader ignored is listed on stderr, so stdout stays
machine-readable.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence

import yaml

from gangsched.cli.common import add_command, add_inputs, add_output_option
from gangsched.config import Config
from gangsched.decisions import Decisions
from gangsched.errors import ConfigError, SnapshotError, UnimplementedPluginWarning
from gangsched.io._text import STDIN, bound_violation, parse_yaml, read_source
from gangsched.io.k8s import SCHEDULER_CONF_KEY, Cluster, is_manifest, load_files
from gangsched.io.volcano_out import job_actions, job_environment, kubernetes_output
from gangsched.limits import DEFAULT_LIMITS
from gangsched.placement import GreedyPlacer, Placer
from gangsched.scheduler import schedule

__all__ = [
    "add_get_parser",
    "add_schedule_parser",
    "format_jobs_table",
    "format_placements_table",
    "format_queues_table",
    "format_table",
    "load_inputs",
    "make_placer",
    "read_config",
    "run_get",
    "run_schedule",
]

_GET_RESOURCES = {
    "queues": "queues",
    "queue": "queues",
    "jobs": "jobs",
    "job": "jobs",
    "vcjob": "jobs",
    "vcjobs": "jobs",
    "podgroups": "jobs",
}


#: ``--placer`` of ``schedule`` and ``get``: how gangs are placed. Without it, only jobs with a
#: network topology go through a placer (the greedy one) and the others task by task.
PLACERS = ("greedy", "cpsat", "cpsat-joint")


def _add_cycle_options(p: argparse.ArgumentParser, output_help: str) -> None:
    """The options of a subcommand that runs one cycle: the inputs, ``--placer`` and
    ``-o/--output`` (described by ``output_help``)."""
    add_inputs(p)
    p.add_argument(
        "--placer",
        choices=PLACERS,
        default=None,
        help="place every gang whole with this placer: greedy, cpsat (exact, OR-Tools CP-SAT, "
        "one gang at a time) or cpsat-joint (several gangs in one model); the PLACEMENTS "
        "table shows its status and gap (default: only jobs with a network topology go "
        "through the greedy placer)",
    )
    add_output_option(p, output_help)


def make_placer(name: str | None) -> Placer | None:
    """The placer ``--placer NAME`` asks for (None: the scheduler's default). The exact
    placers keep their deterministic defaults (one worker, seed 0, a deterministic-time
    budget), so the same input gives the same decisions."""
    if name is None:
        return None
    if name == "greedy":
        return GreedyPlacer()
    from gangsched.placement import CpSatPlacer, JointCpSatPlacer

    return CpSatPlacer() if name == "cpsat" else JointCpSatPlacer()


def add_schedule_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = add_command(
        subparsers,
        "schedule",
        run_schedule,
        "run one scheduling cycle on manifests or a snapshot and print the decisions",
        "Load the cluster and workloads from the -f files, run one cycle (Volcano's actions and "
        "plugin tiers) and print what would be bound, pipelined and evicted, and every job's "
        "and queue's status.",
    )
    _add_cycle_options(
        p,
        "table (default); json: the decisions' interchange form; yaml: Kubernetes "
        "objects (Bindings, Evictions, PodGroup and Queue status)",
    )


def add_get_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = add_command(
        subparsers,
        "get",
        run_get,
        "print queues or jobs after one cycle, like kubectl get queue / vcjob",
        "Run one cycle and print a kubectl-style table of queues (NAME STATE INQUEUE PENDING "
        "RUNNING UNKNOWN) or jobs (NAME STATUS MINAVAILABLE RUNNINGS).",
    )
    p.add_argument("resource", choices=sorted(_GET_RESOURCES), help="queues or jobs")
    _add_cycle_options(
        p,
        "table (default), or the queues' / jobs' status records of Decisions.to_dict() "
        "as JSON or YAML, keyed by name",
    )


# ------------------------------------------------------------------------------------------


def read_config(path: str) -> Config:
    """The scheduler configuration in file ``path`` (``-``: standard input): Volcano's
    ``volcano-scheduler.conf`` text or its ConfigMap manifest, nesting bounded."""
    try:
        text, source = read_source(path)
    except SnapshotError as exc:
        raise ConfigError(exc.detail, kind="file", name=exc.name) from None
    depth = DEFAULT_LIMITS.max_nesting
    bad = bound_violation(text, max_nesting=depth)
    if bad is not None:
        raise ConfigError(bad, kind="file", name=source)
    try:
        docs = [
            d for d in parse_yaml(text, max_nesting=DEFAULT_LIMITS.max_nesting) if d is not None
        ]
    except yaml.YAMLError:
        docs = []  # let the Volcano parser report the syntax error with its position
    if len(docs) == 1 and is_manifest(docs[0]):
        doc = docs[0]
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get(SCHEDULER_CONF_KEY), str):
            raise ConfigError(
                f"a ConfigMap with data.{SCHEDULER_CONF_KEY} was expected", kind="file", name=source
            )
        text = data[SCHEDULER_CONF_KEY]
        bad = bound_violation(text, max_nesting=depth)
        if bad is not None:
            raise ConfigError(bad, kind="file", name=source, field=f"data[{SCHEDULER_CONF_KEY}]")
    return Config.from_volcano_yaml(text)


def load_inputs(args: argparse.Namespace) -> tuple[Cluster, Config]:
    """The cluster of the ``-f`` files and the configuration to schedule it with (``--config``,
    else the ConfigMap among the files, else Volcano's default); notes go to stderr."""
    if [*args.files, args.config].count(STDIN) > 1:
        raise ConfigError("standard input ('-') can be read once only", kind="option", name="-f")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnimplementedPluginWarning)
        cluster = load_files(args.files)
        if args.config is not None:
            config = read_config(args.config)
        else:
            config = cluster.config if cluster.config is not None else Config.default()
    for item in cluster.ignored:
        print(f"gangsched: note: {item}", file=sys.stderr)
    skipped = [w.message for w in caught if isinstance(w.message, UnimplementedPluginWarning)]
    for w in caught:
        if not isinstance(w.message, UnimplementedPluginWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    ignored = (*config.ignored_plugins, *config.ignored_actions)
    if getattr(args, "strict", False) and ignored:
        first = next((m for m in skipped if m.plugin == ignored[0]), None)
        raise ConfigError(
            "not implemented by gangsched"
            + (f" ({first.detail})" if first is not None else "")
            + "; --strict refuses it"
            + (f" (also: {', '.join(ignored[1:])})" if len(ignored) > 1 else ""),
            kind="plugin" if config.ignored_plugins else "action",
            name=ignored[0],
        )
    used = set(ignored)
    for message in skipped:
        if message.plugin in used:
            print(f"gangsched: warning: {message}", file=sys.stderr)
            used.discard(message.plugin)
    return cluster, config


def _cycle(args: argparse.Namespace) -> tuple[Cluster, Decisions]:
    cluster, config = load_inputs(args)
    placer = make_placer(getattr(args, "placer", None))
    return cluster, schedule(cluster.snapshot, config, placer=placer)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by three spaces, as kubectl prints them."""
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def format_queues_table(decisions: Decisions) -> str:
    """``kubectl get queue``-shaped table after the cycle."""
    rows = [
        (name, q.state, q.inqueue, q.pending, q.running, q.unknown)
        for name, q in sorted(decisions.queues.items())
    ]
    return format_table(("NAME", "STATE", "INQUEUE", "PENDING", "RUNNING", "UNKNOWN"), rows)


def format_placements_table(decisions: Decisions) -> str:
    """Per job placed through a placer: which placer, its status, the gap to the solver's
    bound (``-`` when none was proven) and whether the greedy answer replaced the solver's."""
    rows = [
        (
            name,
            p.placer,
            p.status,
            "-" if p.gap is None else f"{p.gap:.4g}",
            "yes" if p.fallback else "no",
        )
        for name, p in sorted(decisions.placements.items())
    ]
    return format_table(("JOB", "PLACER", "STATUS", "GAP", "FALLBACK"), rows)


def _vcjob_status(phase: str) -> str:
    return {"Running": "Running", "Completed": "Completed"}.get(phase, "Pending")


def format_jobs_table(decisions: Decisions) -> str:
    """``kubectl get vcjob``-shaped table after the cycle: RUNNINGS counts the pods running
    plus those bound by this cycle."""
    rows = [
        (name, _vcjob_status(s.phase), s.min_available, s.running + s.allocated)
        for name, s in sorted(decisions.jobs.items())
    ]
    return format_table(("NAME", "STATUS", "MINAVAILABLE", "RUNNINGS"), rows)


def _gpus(indices: Sequence[int]) -> str:
    return ",".join(str(i) for i in indices) if indices else "-"


def nondeterminism_warning(d: Decisions) -> str | None:
    """The one-line warning for decisions made under nondeterministic placer options."""
    if d.deterministic:
        return None
    return "WARNING: not deterministic, a rerun may decide differently: " + "; ".join(
        d.nondeterministic
    )


def _format_decisions(cluster: Cluster, d: Decisions) -> str:
    parts: list[str] = []
    warning = nondeterminism_warning(d)
    if warning is not None:
        parts.append(warning)

    def pod(task: str) -> str:
        ns, name = cluster.pod_of(task)
        return f"{ns}/{name}"

    # (heading, headers, rows): BINDS is always headed, the others only when they have rows
    placed = ("POD", "NODE", "GPUS")
    sections: list[tuple[str, tuple[str, ...], list[tuple[object, ...]]]] = [
        ("BINDS", placed, [(pod(b.task), b.node, _gpus(b.gpu_indices)) for b in d.binds]),
        ("\nPIPELINED", placed, [(pod(p.task), p.node, _gpus(p.gpu_indices)) for p in d.pipelined]),
        (
            "\nEVICTIONS",
            ("POD", "PREEMPTOR", "REASON"),
            [(pod(e.task), e.preemptor or "-", e.reason) for e in d.evictions],
        ),
    ]
    for k, (heading, headers, rows) in enumerate(sections):
        if k == 0 or rows:
            parts.append(f"{heading} ({len(rows)})")
        if rows:
            parts.append(format_table(headers, rows))
    queue_of = {j.name: j.queue for j in cluster.snapshot.jobs}
    parts.append("\nJOBS")
    parts.append(
        format_table(
            ("NAME", "QUEUE", "PHASE", "MIN", "RUNNING", "BOUND", "PENDING", "REASON", "MESSAGE"),
            [
                (
                    name,
                    queue_of.get(name, "-"),
                    s.phase,
                    s.min_available,
                    s.running,
                    s.allocated,
                    s.pending,
                    s.reason or "-",
                    s.message or "-",
                )
                for name, s in sorted(d.jobs.items())
            ],
        )
    )
    if d.placements:
        parts.append("\nPLACEMENTS")
        parts.append(format_placements_table(d))
    parts.append("\nQUEUES")
    parts.append(format_queues_table(d))
    actions = job_actions(cluster, d)
    if actions:
        parts.append("\nJOB ACTIONS")
        parts.append(
            format_table(("JOB", "ACTION", "CAUSE"), [(a.job, a.action, a.cause) for a in actions])
        )
    env = job_environment(cluster, d)
    if env:
        parts.append("\nENVIRONMENT")
        parts.extend(
            f"{pod(task)}: " + " ".join(f"{k}={v}" for k, v in values.items())
            for task, values in env.items()
        )
    return "\n".join(parts)


def run_schedule(args: argparse.Namespace) -> int:
    cluster, decisions = _cycle(args)
    if args.output == "json":
        print(json.dumps(decisions.to_dict(), indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(kubernetes_output(cluster, decisions), sort_keys=False), end="")
    else:
        print(_format_decisions(cluster, decisions))
    return 0


def run_get(args: argparse.Namespace) -> int:
    _, decisions = _cycle(args)
    warning = nondeterminism_warning(decisions)
    if warning is not None:
        print(f"gangsched: {warning}", file=sys.stderr)
    what = _GET_RESOURCES[args.resource]
    if args.output != "table":
        records = decisions.to_dict()[what]
        if args.output == "json":
            print(json.dumps(records, indent=2, sort_keys=True))
        else:
            print(yaml.safe_dump(records, sort_keys=True, allow_unicode=True), end="")
    elif what == "queues":
        print(format_queues_table(decisions))
    else:
        print(format_jobs_table(decisions))
    return 0
