"""``FrozenDict``'s ways in: any mapping is sorted by key (a plain dict, another mapping, another
``FrozenDict``, whose data is shared), and ``of_sorted`` holds a dict already in key order
as it is; each gives the same items in the same order, the same hash and equality."""

from __future__ import annotations

from types import MappingProxyType

from hypothesis import example, given
from hypothesis import strategies as st

from gangsched._frozen import FrozenDict

_DICTS = st.dictionaries(st.text(max_size=4), st.integers(-5, 5), max_size=12)


@given(_DICTS)
@example({"b": 1, "a": 2, "": 0})
def test_every_way_in_gives_the_sorted_items(d: dict[str, int]) -> None:
    want = sorted(d.items())
    made = [
        FrozenDict(d),
        FrozenDict(MappingProxyType(d)),
        FrozenDict(FrozenDict(d)),
        FrozenDict.of_sorted(dict(want)),
    ]
    for m in made:
        assert list(m.items()) == want
        assert m == d and hash(m) == hash(made[0]) and repr(m) == repr(made[0])


def test_of_sorted_holds_the_dict_it_is_given() -> None:
    data = {"a": 1, "b": 2}
    m = FrozenDict.of_sorted(data)
    assert m._data is data
    shared = FrozenDict(m)  # another FrozenDict of it shares the data, not a copy
    assert shared._data is data and shared == m


def test_a_plain_dict_is_copied_in_key_order() -> None:
    source = {"b": 2, "a": 1}
    m = FrozenDict(source)
    source["c"] = 3
    assert list(m.items()) == [("a", 1), ("b", 2)]
