"""The tests' name for :func:`gangsched.testing._carried.uncarried` (decisions of a long-lived
state against a fresh cycle, under gang-aware retry)."""

from __future__ import annotations

from gangsched.testing._carried import uncarried

__all__ = ["uncarried"]
