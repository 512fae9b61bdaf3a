"""Node affinity over every node at once, read from the cycle's label codes.

:class:`~gangsched.session.arrays.ClusterArrays` codes each label key's values as small ints
(-1: the node lacks the label). A requirement on a key becomes a lookup table over that key's
codes (one entry per distinct value, plus one for "absent") indexed by the node column, so a
requirement costs O(distinct values + nodes) whatever the operator; ``Gt`` and ``Lt`` parse
each distinct value once. A ``metadata.name`` field requirement marks the named node's row.

The records' own methods (:meth:`gangsched.model.affinity.NodeAffinity.allows`,
:meth:`~gangsched.model.affinity.NodeAffinity.preference`) state the same rules node by node;
the property tests hold the two equal.
"""

from __future__ import annotations

import numpy as np

from gangsched._types import BOOL, I64
from gangsched.model.affinity import (
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    parse_int64,
)
from gangsched.session.arrays import ClusterArrays

__all__ = ["preferred_sum", "required_mask", "requirement_mask", "term_mask"]


def requirement_mask(arrays: ClusterArrays, req: NodeSelectorRequirement, *, field: bool) -> BOOL:
    """Nodes meeting ``req``: a label requirement, or a node-name one (``field``)."""
    n = arrays.n_nodes
    if field:
        named = np.zeros(n, dtype=np.bool_)
        wanted = set(req.values)
        rows = [i for i, name in enumerate(arrays.node_names) if name in wanted]
        named[rows] = True
        return named if req.operator == "In" else ~named
    codes = arrays.label_codes.get(req.key)
    op = req.operator
    if codes is None:  # no node carries the key: every node reads "absent"
        return np.full(n, req.matches(None), dtype=np.bool_)
    if op == "Exists":
        exists: BOOL = codes >= 0
        return exists
    if op == "DoesNotExist":
        absent: BOOL = codes < 0
        return absent
    values = arrays.label_values[req.key]
    table = np.zeros(len(values) + 1, dtype=np.bool_)  # slot 0: absent
    table[0] = req.matches(None)
    if op in ("In", "NotIn"):
        hit = [code + 1 for v in req.values if (code := values.get(v)) is not None]
        if op == "In":
            table[hit] = True
        else:
            table[1:] = True
            table[hit] = False
    else:  # Gt / Lt: compare each distinct value once
        want = parse_int64(req.values[0])
        for value, code in values.items():
            have = parse_int64(value)
            if have is not None and want is not None:
                table[code + 1] = have > want if op == "Gt" else have < want
    out: BOOL = table[codes + 1]
    return out


def term_mask(arrays: ClusterArrays, term: NodeSelectorTerm) -> BOOL:
    """Nodes meeting every requirement of ``term``."""
    mask = np.ones(arrays.n_nodes, dtype=np.bool_)
    for req in term.match_expressions:
        mask &= requirement_mask(arrays, req, field=False)
    for req in term.match_fields:
        mask &= requirement_mask(arrays, req, field=True)
    return mask


def required_mask(arrays: ClusterArrays, affinity: NodeAffinity) -> BOOL:
    """Nodes the required terms let in (any term; every node when there is none)."""
    if not affinity.required:
        return np.ones(arrays.n_nodes, dtype=np.bool_)
    mask = np.zeros(arrays.n_nodes, dtype=np.bool_)
    for term in affinity.required:
        mask |= term_mask(arrays, term)
    return mask


def preferred_sum(arrays: ClusterArrays, affinity: NodeAffinity) -> I64:
    """Per node, the summed weights of the preferred terms it matches (Kubernetes'
    NodeAffinity score before normalisation)."""
    total = np.zeros(arrays.n_nodes, dtype=np.int64)
    for pref in affinity.preferred:
        total += np.where(term_mask(arrays, pref.preference), pref.weight, 0)
    return total
