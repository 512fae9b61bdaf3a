"""Check that the installed versions are exactly the pins of a constraints file.

``make test-minimum`` runs this after installing with ``-c ci/minimum.txt``, so the test suite
that follows is known to run on the oldest supported versions and not on whatever the resolver
picked instead. Exit status 1 names every package that differs.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def pins(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, sep, pinned = line.partition("==")
            if not sep:
                raise SystemExit(f"{path}: {raw!r} is not a 'name==version' pin")
            out[name.strip()] = pinned.strip()
    return out


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else "ci/minimum.txt")
    bad = []
    for name, pinned in pins(path).items():
        try:
            have = version(name)
        except PackageNotFoundError:
            have = "not installed"
        if have != pinned:
            bad.append(f"{name}: {have}, expected {pinned}")
        else:
            print(f"{name}=={have}")
    for line in bad:
        print(f"check_minimum: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
