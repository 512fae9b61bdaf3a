"""Readers for public traces and manifests (outside the core: these touch files)."""

from gangsched.io.openb import NodeTable, PodTable, load_nodes, load_pods

__all__ = ["NodeTable", "PodTable", "load_nodes", "load_pods"]
