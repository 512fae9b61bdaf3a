"""Dependency declarations: ranges, not pins; stated reasons for upper bounds; the oldest
supported versions (ci/minimum.txt) are exactly the lower bounds; the demo installs only what
it needs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
_REQ = re.compile(r"^\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*(.*)$")


def _requirements() -> dict[str, list[str]]:
    meta = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    groups: dict[str, list[str]] = {"": list(meta["dependencies"])}
    groups.update(meta["optional-dependencies"])
    return groups


def _lower_bounds(spec: str) -> list[str]:
    return re.findall(r">=\s*([0-9][0-9A-Za-z.]*)", spec)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_no_dependency_is_an_exact_pin() -> None:
    for group, reqs in _requirements().items():
        for req in reqs:
            assert "==" not in req and "~=" not in req, f"[{group}] {req} is pinned"
            match = _REQ.match(req)
            assert match is not None
            assert _lower_bounds(match.group(2)), f"[{group}] {req} has no lower bound"


def test_every_upper_bound_says_why_next_to_it() -> None:
    lines = PYPROJECT.read_text(encoding="utf-8").splitlines()
    capped = [i for i, line in enumerate(lines) if re.search(r'^\s*"[^"]*<[^"]*"', line)]
    assert capped, "ortools is expected to carry an upper bound"
    for i in capped:
        same_line = "#" in lines[i].split('"')[-1]
        above = lines[i - 1].lstrip().startswith("#")
        assert same_line or above, f"pyproject.toml line {i + 1}: upper bound without a reason"
        if not same_line:
            comment = []
            j = i - 1
            while j >= 0 and lines[j].lstrip().startswith("#"):
                comment.append(lines[j])
                j -= 1
            assert "upper bound" in " ".join(comment).lower(), lines[i]


def test_minimum_constraints_are_the_declared_lower_bounds() -> None:
    pins: dict[str, str] = {}
    for raw in (ROOT / "ci" / "minimum.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"ci/minimum.txt: {raw!r} is not a pin"
            pins[_canonical(name)] = version.strip()
    bounds: dict[str, str] = {}
    for group in ("", "test", "plot"):
        for req in _requirements()[group]:
            match = _REQ.match(req)
            assert match is not None
            (low,) = _lower_bounds(match.group(2))
            bounds[_canonical(match.group(1))] = low
    assert set(pins) == set(bounds)
    for name, low in bounds.items():
        pinned = pins[name].split(".")
        # ">=9.9" is met at its lowest by 9.9.<first build>, ">=2.0" by 2.0.0
        assert pinned[: len(low.split("."))] == low.split(".") or pins[name] == low + ".0", (
            f"{name}: ci/minimum.txt pins {pins[name]}, pyproject.toml says >={low}"
        )


def test_release_tools_are_in_the_dev_extra() -> None:
    dev = {_canonical(re.split(r"[<>=\[ ;]", r, maxsplit=1)[0]) for r in _requirements()["dev"]}
    assert {"build", "twine"} <= dev


def test_make_run_installs_only_the_plot_extra() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    run_rule = re.search(r"^\$\(BIN\)/\.installed-run:.*?\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert run_rule is not None
    assert "-e '.[plot]'" in run_rule.group(1)
    assert re.search(r"^run: \$\(BIN\)/\.installed-run$", makefile, flags=re.M)


def test_ci_builds_and_checks_the_distributions() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test\n" in ci and "asv check --python=same" in ci and "make docs" in ci
    assert "make smoke" in ci  # builds and checks the distributions, then installs the wheel
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "python -m build" in makefile and "twine check --strict" in makefile
    assert re.search(r"^smoke: dist$", makefile, flags=re.M)
    smoke = makefile.split("\nsmoke: dist\n", 1)[1].split("\n\n", 1)[0]
    assert "pip install --quiet $(DIST)/*.whl" in smoke and "[" not in smoke.split("whl")[0]
    assert "gangsched --version" in smoke and "python -m gangsched --help" in smoke
