"""Kubernetes quantities → canonical int64 units (at most 2**53), and the resource column order."""

from __future__ import annotations

import math
import pickle
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched.errors import ConfigError, GangschedError, PlacementError, SnapshotError, SolverError
from gangsched.limits import MAX_QUANTITY
from gangsched.testing.strategies import quantity_pairs
from gangsched.units import (
    CPU,
    GPU,
    MEMORY,
    PODS,
    ResourceSpec,
    canonical_scale,
    format_quantity,
    format_resources,
    is_byte_resource,
    parse_quantity,
    parse_resources,
)

EXT = "example.com/fpga"

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL_UP = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


# ------------------------------------------------------------------------------------------
# The quantity table: (written, resource, canonical)

TABLE: list[tuple[object, str, int]] = [
    # cpu → millicores, rounded up
    ("500m", CPU, 500),
    ("2", CPU, 2000),
    (2, CPU, 2000),
    ("1.5", CPU, 1500),
    (1.5, CPU, 1500),
    (0.5, CPU, 500),
    (0.1, CPU, 100),
    ("0.1m", CPU, 1),
    ("1500000u", CPU, 1500),
    ("100u", CPU, 1),
    ("1n", CPU, 1),
    ("1000000n", CPU, 1),
    ("1000001n", CPU, 2),
    ("1k", CPU, 1_000_000),
    ("1e3", CPU, 1_000_000),
    ("1E3", CPU, 1_000_000),
    ("1e-3", CPU, 1),
    ("2.5e-1", CPU, 250),
    (".5", CPU, 500),
    ("1.", CPU, 1000),
    ("+1", CPU, 1000),
    ("0", CPU, 0),
    ("-0", CPU, 0),
    (0, CPU, 0),
    (" 250m ", CPU, 250),
    (np.int64(3), CPU, 3000),
    (np.float64(0.25), CPU, 250),
    # memory → bytes
    ("4Gi", MEMORY, 4 * 2**30),
    ("1G", MEMORY, 10**9),
    ("100Mi", MEMORY, 100 * 2**20),
    ("1e3", MEMORY, 1000),
    (1000000000, MEMORY, 10**9),
    ("1000000000", MEMORY, 10**9),
    (1e9, MEMORY, 10**9),
    ("1.5Gi", MEMORY, 3 * 2**29),
    ("1.5", MEMORY, 2),
    (1.5, MEMORY, 2),
    ("500m", MEMORY, 1),
    ("1500m", MEMORY, 2),
    ("1n", MEMORY, 1),
    ("7Pi", MEMORY, 7 * 2**50),
    ("8Pi", MEMORY, MAX_QUANTITY),
    (str(MAX_QUANTITY), MEMORY, MAX_QUANTITY),
    (MAX_QUANTITY, MEMORY, MAX_QUANTITY),
    ("10Gi", "ephemeral-storage", 10 * 2**30),
    ("1Gi", "hugepages-2Mi", 2**30),
    ("0.5", "hugepages-1Gi", 1),
    # nvidia.com/gpu → milli-GPU, rounded up
    (1, GPU, 1000),
    ("1", GPU, 1000),
    ("0.5", GPU, 500),
    (0.5, GPU, 500),
    ("250m", GPU, 250),
    ("8", GPU, 8000),
    ("1.0005", GPU, 1001),
    # pods and other extended resources → whole counts
    ("10", PODS, 10),
    (110, PODS, 110),
    (110.0, PODS, 110),
    ("1k", PODS, 1000),
    ("1e3", PODS, 1000),
    ("2000m", PODS, 2),
    ("4", EXT, 4),
    ("1Ki", EXT, 1024),
    ("3M", EXT, 3_000_000),
]


@pytest.mark.parametrize(("written", "resource", "expected"), TABLE, ids=repr)
def test_quantity_table(written: object, resource: str, expected: int) -> None:
    got = parse_quantity(written, resource)
    assert got == expected
    assert type(got) is int


@pytest.mark.parametrize(("suffix", "factor"), sorted(BINARY.items()))
def test_every_binary_suffix(suffix: str, factor: int) -> None:
    # Amounts are bounded by 2**53 canonical units: 3Ei bytes and 3Pi cores are beyond it.
    for resource, scale in ((MEMORY, 1), (EXT, 1), (CPU, 1000)):
        if 3 * factor * scale <= MAX_QUANTITY:
            assert parse_quantity(f"3{suffix}", resource) == 3 * factor * scale
        else:
            with pytest.raises(SnapshotError, match="largest supported amount"):
                parse_quantity(f"3{suffix}", resource)


@pytest.mark.parametrize(
    ("suffix", "factor"),
    [("n", (1, 10**9)), ("u", (1, 10**6)), ("m", (1, 10**3))]
    + [(s, (f, 1)) for s, f in sorted(DECIMAL_UP.items())],
)
def test_every_decimal_suffix(suffix: str, factor: tuple[int, int]) -> None:
    num, den = factor
    # 7<suffix> in bytes, rounded up (7E bytes is beyond 2**53)
    if 7 * num // den <= MAX_QUANTITY:
        assert parse_quantity(f"7{suffix}", MEMORY) == -(-7 * num // den)
    else:
        with pytest.raises(SnapshotError, match="largest supported amount"):
            parse_quantity(f"7{suffix}", MEMORY)
    # in millicores, rounded up
    if 7 * num * 1000 // den <= MAX_QUANTITY:
        assert parse_quantity(f"7{suffix}", CPU) == -(-7 * num * 1000 // den)
    # counts must be whole
    if 7 * num // den > MAX_QUANTITY:
        pass
    elif (7 * num) % den == 0:
        assert parse_quantity(f"7{suffix}", EXT) == 7 * num // den
    else:
        with pytest.raises(SnapshotError, match="whole"):
            parse_quantity(f"7{suffix}", EXT)


def test_half_core_float_equals_500m() -> None:
    assert parse_quantity(0.5, CPU) == parse_quantity("500m", CPU) == 500


def test_plain_memory_number_is_bytes() -> None:
    assert parse_quantity(1000000000, MEMORY) == 1_000_000_000
    assert parse_quantity(1000000000, MEMORY) == parse_quantity("1G", MEMORY)


def test_gpu_devices_are_milli() -> None:
    assert parse_quantity(2, GPU) == 2 * parse_quantity("1000m", GPU)


# ------------------------------------------------------------------------------------------
# Rejections: every one is a SnapshotError naming the object and the field

MALFORMED = [
    "",
    " ",
    "abc",
    "m",
    "Gi",
    "1.5.5",
    "1Kb",
    "1K",
    "1gi",
    "1 Gi",
    "1e",
    "e3",
    "1e3Gi",
    "1Gi3",
    "0x10",
    "1_000",
    "1,5",
    "--1",
    "+-1",
    "١",
    "٣",
    "inf",
    "nan",
    "Infinity",
    "1e3.5",
    "1" * 200,
]


def _assert_names_context(err: SnapshotError, field: str) -> None:
    assert err.kind == "node"
    assert err.name == "n1"
    assert err.field == field
    assert "node 'n1'" in str(err)
    assert field in str(err)


@pytest.mark.parametrize("written", MALFORMED, ids=repr)
@pytest.mark.parametrize("resource", [CPU, MEMORY, GPU, PODS])
def test_malformed_quantity_rejected(written: str, resource: str) -> None:
    with pytest.raises(SnapshotError) as info:
        parse_quantity(written, resource, kind="node", name="n1", field=f"allocatable.{resource}")
    _assert_names_context(info.value, f"allocatable.{resource}")


@pytest.mark.parametrize("written", ["-1", -1, -0.5, "-500m", "-1Gi", "-1e3", -(2**70)], ids=repr)
@pytest.mark.parametrize("resource", [CPU, MEMORY, GPU, PODS])
def test_negative_quantity_rejected(written: object, resource: str) -> None:
    with pytest.raises(SnapshotError, match="negative") as info:
        parse_quantity(written, resource, kind="node", name="n1", field="allocatable.x")
    _assert_names_context(info.value, "allocatable.x")


@pytest.mark.parametrize("written", [math.nan, math.inf, -math.inf], ids=repr)
def test_non_finite_quantity_rejected(written: float) -> None:
    with pytest.raises(SnapshotError, match="finite") as info:
        parse_quantity(written, CPU, kind="node", name="n1", field="allocatable.cpu")
    _assert_names_context(info.value, "allocatable.cpu")


@pytest.mark.parametrize("written", [True, False])
def test_boolean_quantity_rejected(written: bool) -> None:
    with pytest.raises(SnapshotError, match="boolean") as info:
        parse_quantity(written, MEMORY, kind="node", name="n1", field="allocatable.memory")
    _assert_names_context(info.value, "allocatable.memory")


@pytest.mark.parametrize(
    "written", [None, [1], {"a": 1}, b"1", Decimal("1"), object(), np.bool_(True)], ids=repr
)
def test_non_quantity_types_rejected(written: object) -> None:
    with pytest.raises(SnapshotError, match="expected a quantity") as info:
        parse_quantity(written, CPU, kind="node", name="n1", field="allocatable.cpu")
    _assert_names_context(info.value, "allocatable.cpu")


@pytest.mark.parametrize(
    ("written", "resource"),
    [
        (2**63, MEMORY),
        (str(2**63), MEMORY),
        ("8Ei", MEMORY),
        ("9.3E", MEMORY),
        (1e19, MEMORY),
        (1e308, MEMORY),
        ("9223372036854775807", CPU),
        ("10E", CPU),
        (2**62, GPU),
        ("1e40", PODS),
        (10**5000, MEMORY),
    ],
    ids=lambda v: f"int{v.bit_length()}" if isinstance(v, int) else repr(v),
)
def test_overflow_beyond_int64_rejected(written: object, resource: str) -> None:
    with pytest.raises(SnapshotError) as info:
        parse_quantity(written, resource, kind="node", name="n1", field="allocatable.x")
    _assert_names_context(info.value, "allocatable.x")
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("written", ["1e41", "1e-41", "1e99999"])
def test_exponent_out_of_range_rejected(written: str) -> None:
    with pytest.raises(SnapshotError, match="out of range"):
        parse_quantity(written, MEMORY, kind="node", name="n1", field="allocatable.memory")


@pytest.mark.parametrize(
    ("written", "resource"),
    [("1.5", PODS), (0.5, PODS), ("500m", PODS), ("1.5", EXT), ("1n", EXT), (2.5, EXT)],
    ids=repr,
)
def test_counts_must_be_whole(written: object, resource: str) -> None:
    with pytest.raises(SnapshotError, match="whole") as info:
        parse_quantity(written, resource, kind="node", name="n1", field="allocatable.x")
    _assert_names_context(info.value, "allocatable.x")


def test_field_defaults_to_resource_name() -> None:
    with pytest.raises(SnapshotError) as info:
        parse_quantity("bad", MEMORY)
    assert info.value.field == MEMORY


# ------------------------------------------------------------------------------------------
# Properties


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_spellings_parse_per_resource(data: st.DataObject) -> None:
    resource = data.draw(st.sampled_from([CPU, MEMORY, GPU, PODS, EXT, "hugepages-2Mi"]))
    written, amount = data.draw(quantity_pairs(resource))
    assert parse_quantity(written, resource) == amount


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([CPU, MEMORY, GPU, PODS, EXT]),
    st.integers(0, MAX_QUANTITY),
)
def test_format_is_the_inverse_of_parse(resource: str, amount: int) -> None:
    written = format_quantity(amount, resource)
    assert parse_quantity(written, resource) == amount
    assert isinstance(written, int | str)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=12))
def test_arbitrary_text_parses_or_raises_snapshot_error(text: str) -> None:
    for resource in (CPU, MEMORY, PODS):
        try:
            value = parse_quantity(text, resource, kind="task", name="t", field="request.x")
        except SnapshotError as err:
            assert err.kind == "task" and err.field == "request.x"
        else:
            assert 0 <= value <= MAX_QUANTITY


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_arbitrary_float_parses_or_raises_snapshot_error(value: float) -> None:
    try:
        got = parse_quantity(value, CPU)
    except SnapshotError:
        assert not math.isfinite(value) or value < 0 or value * 1000 > MAX_QUANTITY
    else:
        assert abs(got - value * 1000) <= 1 + 1e-9 * abs(value * 1000)


# ------------------------------------------------------------------------------------------
# Helpers around quantities


def test_canonical_scales_and_byte_resources() -> None:
    assert canonical_scale(CPU) == canonical_scale(GPU) == 1000
    assert canonical_scale(MEMORY) == canonical_scale(PODS) == canonical_scale(EXT) == 1
    assert is_byte_resource(MEMORY) and is_byte_resource("hugepages-1Gi")
    assert is_byte_resource("ephemeral-storage") and not is_byte_resource(PODS)


def test_format_quantity_forms() -> None:
    assert format_quantity(2000, CPU) == 2
    assert format_quantity(1500, CPU) == "1500m"
    assert format_quantity(500, GPU) == "500m"
    assert format_quantity(2**30, MEMORY) == 2**30
    assert format_resources({MEMORY: 1, CPU: 1000}) == {CPU: 1, MEMORY: 1}
    assert list(format_resources({MEMORY: 1, CPU: 1000})) == [CPU, MEMORY]


def test_parse_resources_sorts_and_converts() -> None:
    got = parse_resources({MEMORY: "1Gi", CPU: "250m", PODS: 3}, kind="node", name="n", field="a")
    assert got == {CPU: 250, MEMORY: 2**30, PODS: 3}
    assert list(got) == sorted(got)
    assert parse_resources(None, kind="node", name="n", field="a") == {}


@pytest.mark.parametrize("value", ["4", ["cpu"], 3, ("cpu", 1)], ids=repr)
def test_parse_resources_rejects_non_mappings(value: object) -> None:
    with pytest.raises(SnapshotError, match="mapping") as info:
        parse_resources(value, kind="node", name="n1", field="allocatable")
    _assert_names_context(info.value, "allocatable")


@pytest.mark.parametrize("key", ["", 3, None], ids=repr)
def test_parse_resources_rejects_bad_resource_names(key: object) -> None:
    with pytest.raises(SnapshotError, match="resource name") as info:
        parse_resources({key: 1}, kind="node", name="n1", field="allocatable")
    _assert_names_context(info.value, "allocatable")


def test_parse_resources_names_the_resource_field() -> None:
    with pytest.raises(SnapshotError) as info:
        parse_resources({CPU: "1", MEMORY: "lots"}, kind="node", name="n1", field="allocatable")
    _assert_names_context(info.value, "allocatable.memory")


def test_resource_spec_orders_columns() -> None:
    spec = ResourceSpec.from_names([PODS, "a/z", MEMORY, EXT, CPU, "a/z"])
    assert spec.names == (CPU, MEMORY, GPU, "a/z", EXT, PODS)
    assert spec.index(MEMORY) == 1
    assert spec.gpu_column == spec.index(GPU) == 2
    assert len(spec) == 6
    assert ResourceSpec.from_names([]).names == (CPU, MEMORY, GPU)


def test_resource_spec_unknown_name_is_a_snapshot_error() -> None:
    spec = ResourceSpec.from_names([CPU])
    with pytest.raises(SnapshotError, match="unknown resource") as info:
        spec.index("example.com/unknown")
    assert info.value.kind == "resource" and info.value.name == "example.com/unknown"


# ------------------------------------------------------------------------------------------
# The error hierarchy


def test_error_hierarchy() -> None:
    for cls in (SnapshotError, ConfigError, PlacementError):
        assert issubclass(cls, GangschedError)
    assert issubclass(SolverError, PlacementError)


def test_error_message_and_attributes() -> None:
    err = SnapshotError("negative quantity '-1'", kind="task", name="train-3", field="request.cpu")
    assert str(err) == "task 'train-3': request.cpu: negative quantity '-1'"
    assert (err.kind, err.name, err.field, err.detail) == (
        "task",
        "train-3",
        "request.cpu",
        "negative quantity '-1'",
    )
    assert str(SnapshotError("bad", kind="snapshot", field="nodes")) == "snapshot: nodes: bad"
    assert str(ConfigError("bad")) == "bad"


@pytest.mark.parametrize("cls", [SnapshotError, ConfigError, PlacementError, SolverError])
def test_errors_pickle_with_their_parts(cls: type[GangschedError]) -> None:
    err = cls("why", kind="job", name="j", field="queue")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert (back.detail, back.kind, back.name, back.field) == ("why", "job", "j", "queue")
    assert str(back) == str(err)
