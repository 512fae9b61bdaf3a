"""backfill: place best-effort tasks (no resource request) of admitted, valid jobs.

No gang statement: each task goes to the best feasible node (pod count, selectors, taints still
apply) and is bound at once — but only for a job that is ready, so a gang whose other tasks did
not fit binds none of its best-effort tasks either (Volcano dispatches them only once the job is
ready). Placing a best-effort task does not change readiness, which already counts pending
best-effort tasks. Pipelined best-effort tasks are not re-placed here. A job with a hard
network topology keeps its best-effort tasks in the one domain holding its other tasks
(:func:`~._gang_placement.hard_domain`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gangsched.actions._base import PREDICATE_ERROR_CACHE, ConfiguredAction
from gangsched.actions._gang_placement import hard_domain
from gangsched.model import JobPhase
from gangsched.session.core import TaskState
from gangsched.session.gate import hard_cover
from gangsched.session.rules.gang import pending_tasks
from gangsched.session.statement import Statement

if TYPE_CHECKING:
    from gangsched.session.core import Session


class BackfillAction(ConfiguredAction):
    name = "backfill"
    known_arguments = (PREDICATE_ERROR_CACHE,)

    def execute(self, ssn: Session) -> None:
        # Only jobs with a pending best-effort task have anything to do here (placing one does
        # not change another job's tasks), so only those are ordered.
        pending, best_effort = pending_tasks(ssn)
        if not best_effort.any():
            return
        waiting = pending[best_effort]
        jobs = [
            j
            for j in np.unique(ssn.task_job[waiting]).tolist()
            if ssn.job_phase[j] is not JobPhase.PENDING
        ]
        jobs.sort(key=lambda j: (ssn.queue_key(int(ssn.job_queue[j])), ssn.job_key(j)))
        for j in jobs:
            tasks = [
                int(t)
                for t in ssn.job_tasks(j)
                if ssn.task_state[t] == TaskState.PENDING and ssn.snapshot.tasks[int(t)].best_effort
            ]
            if not tasks or ssn.points.job_valid(j) is not None:
                continue
            if not ssn.points.job_ready(j):
                for t in tasks:
                    ssn.task_reasons.setdefault(
                        t,
                        f"gang {ssn.snapshot.jobs[j].name!r} is not ready: best-effort "
                        "tasks bind only with their gang",
                    )
                continue
            for t in sorted(tasks, key=ssn.task_key):
                tmpl = ssn.templates[int(ssn.template_of[t])]
                domain = hard_domain(ssn, j)  # recomputed: the previous task may have set it
                if domain is None:  # holding nothing: still inside some allowed domain
                    domain = hard_cover(ssn, j)
                if isinstance(domain, str):
                    ssn.task_reasons[t] = domain
                    continue
                node, pipelined = ssn.best_node(tmpl, domain)
                if node < 0 or pipelined:
                    ssn.task_reasons[t] = ssn.fit_error(tmpl, domain)
                    continue
                stmt = Statement(ssn)
                stmt.allocate(t, node, ())
                stmt.commit()
                ssn.task_reasons.pop(t, None)
