"""The worked example of ``docs/testing.md``, run as written.

Every ``python`` block of the page is executed in order in one namespace. Then:

* the property test of the toy ``first_fit`` must fail, and the gang-atomicity checker must be
  the one that fires;
* the state machine driving ``first_fit`` must find the partial gang as well;
* the property test, the Decisions.from_dict sample and the state machine must all pass for
  ``gang_first_fit``.

Hypothesis runs derandomized here (fixed seed, no example database, one bug reported), so the
outcome does not depend on the run. The page's own ``@settings`` are kept as written: 200
examples for the property tests and 50 × 20 for the machine. The check that the machine finds
``first_fit``'s bug skips shrinking, which takes far longer than finding the bug.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from gangsched.testing import InvariantViolation, SchedulerMachine

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def _blocks(text: str) -> list[str]:
    """The page's python blocks, each padded with blank lines so that tracebacks point at
    the right line of the page."""
    out = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        first_line = text.count("\n", 0, match.start(1))
        out.append("\n" * first_line + match.group(1))
    return out


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    blocks = _blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 4
    previous = settings.get_current_profile_name()
    settings.register_profile(
        "docs-example", derandomize=True, database=None, report_multiple_bugs=False
    )
    settings.load_profile("docs-example")
    namespace: dict[str, Any] = {"__name__": "docs_testing_example"}
    try:
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)
    finally:
        settings.load_profile(previous)
    return namespace


def test_the_property_test_finds_the_toy_schedulers_partial_gang(example: dict[str, Any]) -> None:
    test_first_fit: Callable[[], None] = example["test_first_fit"]
    with pytest.raises(
        InvariantViolation, match=r"job '[^']+': partial gang: \d+ tasks ready"
    ) as info:
        test_first_fit()
    # the page quotes the shrunk failure: its first line is what the example raises
    quoted = re.search(r"```text\n(.*?)\n", DOC.read_text(encoding="utf-8"))
    assert quoted is not None
    assert quoted.group(1) == f"{type(info.value).__module__}.InvariantViolation: {info.value}"


def test_the_machine_finds_it_too(example: dict[str, Any]) -> None:
    machine = SchedulerMachine.for_scheduler(example["first_fit"], checks=example["TOY_CHECKS"])
    with pytest.raises(InvariantViolation, match=r"partial gang|role '[^']+' has"):
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=300,
                stateful_step_count=15,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.generate],
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )


def test_the_gang_aware_version_passes(example: dict[str, Any]) -> None:
    assert example["decisions"].binds[0].gpu_indices == (0, 1)
    example["test_gang_first_fit"]()
    example["test_gang_first_fit_through_cluster_life"]()
