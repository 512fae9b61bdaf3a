"""The ``gangsched explain`` subcommand (wired in by :mod:`gangsched.cli`): the library's
:func:`gangsched.explain` on the ``-f`` files — for one pending task, every node's fit, the
reason a node is refused, each ``node_score`` plugin's score and the total.

The task is named as in the snapshot (``train-3``) or, for manifests, as its pod
(``namespace/pod`` or just ``pod`` when that is unique).
"""

from __future__ import annotations

import argparse
import json

import yaml

from gangsched.cli.common import add_command, add_inputs, add_output_option
from gangsched.cli.schedule import format_table, load_inputs
from gangsched.errors import ConfigError
from gangsched.io.k8s import Cluster
from gangsched.scheduler import Explanation, explain

__all__ = ["add_explain_parser", "format_explanation", "resolve_task", "run_explain"]


def add_explain_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = add_command(
        subparsers,
        "explain",
        run_explain,
        "why a pending task fits or does not fit each node, with every plugin's score",
        "Open a session on the -f files (as the cycle would start) and show, for TASK, every "
        "node's fit now and after the resources being released are free, the check that "
        "refused it, each node_score plugin's score, the total and the best node.",
    )
    p.add_argument("task", metavar="TASK", help="task name, or namespace/pod for manifests")
    add_inputs(p)
    add_output_option(p, "table (default); json / yaml: Explanation.to_dict()")


def resolve_task(cluster: Cluster, name: str) -> str:
    """The snapshot's task name for ``name``: a task name, ``namespace/pod`` or a pod name
    that only one namespace has. An unknown name is a :class:`ConfigError` naming it."""
    if name in cluster.snapshot.task_index:
        return name
    by_pod = [
        task
        for task, origin in sorted(cluster.pods.items())
        if f"{origin.namespace}/{origin.name}" == name
    ]
    if not by_pod:
        by_pod = [task for task, origin in sorted(cluster.pods.items()) if origin.name == name]
    if len(by_pod) == 1:
        return by_pod[0]
    if len(by_pod) > 1:
        raise ConfigError(
            "names pods in several namespaces; give namespace/pod", kind="task", name=name
        )
    raise ConfigError("no such task or pod in the -f files", kind="task", name=name)


def _num(x: float) -> str:
    return f"{x:.4g}"


def format_explanation(ex: Explanation) -> str:
    """A table, one row per node: FITS (now), AFTER-RELEASE, the reason a node is refused,
    one column per scoring plugin and the total; the best node is marked with ``*``."""
    plugins = sorted({name for n in ex.nodes for name in n.scores})
    headers = ("NODE", "FITS", "AFTER-RELEASE", *(p.upper() for p in plugins), "TOTAL", "REASON")
    rows = [
        (
            ("*" if n.node == ex.best else "") + n.node,
            "yes" if n.fits else "no",
            "yes" if n.fits_after_release else "no",
            *(_num(n.scores.get(p, 0.0)) for p in plugins),
            _num(n.total),
            n.reason or "-",
        )
        for n in ex.nodes
    ]
    fitting = sum(1 for n in ex.nodes if n.fits)
    head = (
        f"task {ex.task!r}: {fitting}/{len(ex.nodes)} nodes fit now; best node: "
        f"{ex.best if ex.best is not None else '-'}"
    )
    return head + "\n" + format_table(headers, rows)


def run_explain(args: argparse.Namespace) -> int:
    cluster, config = load_inputs(args)
    ex = explain(cluster.snapshot, resolve_task(cluster, args.task), config)
    if args.output == "json":
        print(json.dumps(ex.to_dict(), indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(ex.to_dict(), sort_keys=False, allow_unicode=True), end="")
    else:
        print(format_explanation(ex))
    return 0
