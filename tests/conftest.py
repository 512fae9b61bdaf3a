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

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile("soak", derandomize=False, print_blob=True, deadline=None)
settings.register_profile("dev", derandomize=False, deadline=None)

_default = "soak" if os.environ.get("GANGSCHED_SOAK") == "1" else "ci"
settings.load_profile(os.environ.get("GANGSCHED_HYPOTHESIS_PROFILE", _default))
