"""The sessions a test's cycles open, kept for the test to look into."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.session.core import Session


def sessions_opened(monkeypatch: pytest.MonkeyPatch) -> list[Session]:
    """From now on (for the test), every session opened is appended to the list returned."""
    opened: list[Session] = []
    original = Session.open.__func__  # type: ignore[attr-defined]

    def kept(cls: type[Session], *args: Any, **kwargs: Any) -> Session:
        ssn: Session = original(cls, *args, **kwargs)
        opened.append(ssn)
        return ssn

    monkeypatch.setattr(Session, "open", classmethod(kept))
    return opened
