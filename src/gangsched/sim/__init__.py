"""Replays and studies built on the core (outside the core: these may touch files)."""
