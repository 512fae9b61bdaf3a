"""The close step makes the decisions' job statuses and task reasons from the last cycle's
mappings (no sort): the result is the mapping of this cycle's alone, in sorted order."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from gangsched._frozen import FrozenDict, refrozen

_KEYS = st.text(alphabet="abcxyz-0123", min_size=1, max_size=4)
_MAPS = st.dictionaries(_KEYS, st.integers(0, 3), max_size=12)


@given(_MAPS, _MAPS)
@example({"a": 1, "b": 2}, {"b": 3, "c": 1}).via("one key gone, one added after the rest")
@example({"b": 1, "c": 2}, {"a": 1, "c": 2}).via("a key added before those kept")
@example({"a": 1}, {}).via("every key gone")
def test_a_mapping_made_from_the_last_one_is_the_new_one_in_order(
    before: dict[str, int], after: dict[str, int]
) -> None:
    made = refrozen(FrozenDict(before), after)
    plain = FrozenDict(after)
    assert made == plain and list(made.items()) == list(plain.items())
    assert hash(made) == hash(plain)


def test_keys_that_do_not_sort_are_kept_as_a_frozen_dict_keeps_them() -> None:
    mixed: dict[object, int] = {"a": 1, 2: 2}
    made = refrozen(FrozenDict(mixed), {**mixed, 3: 3})
    assert list(made.items()) == list(FrozenDict({**mixed, 3: 3}).items())


def test_values_are_the_new_mapping_s_objects() -> None:
    last = FrozenDict({"a": [1], "b": [2]})
    now = {"a": [1], "b": [2], "c": [3]}
    made = refrozen(last, now)
    assert all(made[k] is now[k] for k in now)
