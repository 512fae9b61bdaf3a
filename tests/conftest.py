"""Hypothesis profiles: reproducible by default, exploring only when asked.

The default profile (``ci``) is derandomized and keeps no example database, so a run on a clean
clone makes the same examples every time: a failure there is a real regression, never a lucky
seed. Random exploration belongs to the opt-in soak: ``GANGSCHED_SOAK=1`` selects the ``soak``
profile (random seeds, example database on) and the soak-only tests. A counterexample found by
a soak is pinned in its test as an ``@example`` so the default run keeps checking it.

``GANGSCHED_HYPOTHESIS_PROFILE`` picks a profile by name (``ci``, ``soak``, ``dev``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

# ``too_slow`` measures wall-clock time, so on a loaded machine it fails at random: off here.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("soak", derandomize=False, print_blob=True, deadline=None)
settings.register_profile("dev", derandomize=False, deadline=None)

# Test files live in one folder per subject; a few share helpers with a file of another subject
# (``from test_quality import write_cluster``), so every subject folder is importable whichever
# file is collected first.
for _folder in sorted(p for p in Path(__file__).parent.iterdir() if p.is_dir()):
    if any(_folder.glob("test_*.py")) and str(_folder) not in sys.path:
        sys.path.append(str(_folder))

_default = "soak" if os.environ.get("GANGSCHED_SOAK") == "1" else "ci"
settings.load_profile(os.environ.get("GANGSCHED_HYPOTHESIS_PROFILE", _default))


# ---------------------------------------------------------------------------------------------
# Every decision of every test goes through the invariant checker.
#
# ``schedule()`` ends in ``close_session``; wrapping it here runs ``check_cycle`` (the
# invariants the cycle's configured plugins enforce) on the snapshot and decisions of each
# cycle any test makes (scenarios, the CLI, replays, the machines), so a decision that breaks
# an invariant fails the test that produced it, whatever that test asserts itself. Cycles over
# large snapshots (the FGD study, scale tests) are skipped to keep the run short; a test that
# builds a deliberately broken scheduler opts out with ``@pytest.mark.no_invariant_hook``.
# The hook also fails a cycle in which the placement gate refused an operation: actions check
# through the same rule owners first, so a refusal is an action proposing a bad placement.

import pytest  # noqa: E402

_HOOK_MAX_NODES, _HOOK_MAX_TASKS = 300, 3_000


@pytest.fixture(autouse=True)
def _check_every_decision(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("no_invariant_hook"):
        return
    import gangsched.scheduler as scheduler
    from gangsched.testing.invariants import check_cycle

    original = scheduler.close_session  # type: ignore[attr-defined]

    def checked(ssn: object) -> object:
        refused = list(ssn.refusals)  # type: ignore[attr-defined]
        assert not refused, f"the placement gate refused operations: {refused[:3]}"
        decisions = original(ssn)  # type: ignore[arg-type]
        snap = ssn.snapshot  # type: ignore[attr-defined]
        if len(snap.nodes) <= _HOOK_MAX_NODES and len(snap.tasks) <= _HOOK_MAX_TASKS:
            check_cycle(snap, decisions, ssn.config)  # type: ignore[attr-defined]
        return decisions

    monkeypatch.setattr(scheduler, "close_session", checked)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "no_invariant_hook: the test's cycles are not run through check_all"
    )
