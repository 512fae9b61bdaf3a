"""Reading input text safely: bytes → text, and YAML / JSON → plain data, within bounds.

Every file gangsched reads goes through here, so a hostile file gets a typed error instead of a
``UnicodeDecodeError``, a ``RecursionError`` or a memory blow-up:

* :func:`decode` accepts UTF-8 (with or without a byte-order mark) and UTF-16 with a byte-order
  mark, as YAML processors must; anything else (Latin-1, binary, UTF-16 without a mark) is an
  error naming the file and the first offending byte.
* :func:`parse_yaml` reads multi-document YAML (JSON is YAML) with a loader that bounds the
  nesting depth (:attr:`~gangsched.limits.Limits.max_nesting`), counting what an alias adds at
  the place it is used, rejects integer literals longer than any bounded field can hold, and
  merges ``<<:`` keys without the exponential duplication of PyYAML's default.
* :func:`read_source` reads a path, ``-`` meaning standard input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from gangsched.errors import SnapshotError

__all__ = [
    "MAX_INT_DIGITS",
    "IntegerTooLong",
    "NestingTooDeep",
    "bound_violation",
    "decode",
    "parse_yaml",
    "read_source",
    "yaml_error_detail",
]

#: Longest integer literal (characters, sign and ``_`` included) the YAML loader accepts; every
#: integer field gangsched reads is far below 10**60.
MAX_INT_DIGITS = 64

STDIN = "-"


class NestingTooDeep(yaml.MarkedYAMLError):
    """A document nests lists / mappings deeper than allowed."""


class IntegerTooLong(yaml.constructor.ConstructorError):
    """An integer literal longer than :data:`MAX_INT_DIGITS` characters."""


def decode(data: bytes, source: str) -> str:
    """``data`` as text: UTF-8 (optional BOM) or UTF-16 with a BOM; else a SnapshotError."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) and not data.startswith(b"\xff\xfe\x00\x00"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise SnapshotError(
                f"not valid UTF-16 text (bad bytes at offset {exc.start})",
                kind="file",
                name=source,
            ) from None
    if data.startswith((b"\x00\x00\xfe\xff", b"\xff\xfe\x00\x00")):
        raise SnapshotError("UTF-32 text is not supported; use UTF-8", kind="file", name=source)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start]
        raise SnapshotError(
            f"not UTF-8 text (byte 0x{bad:02x} at offset {exc.start}); save the file as UTF-8",
            kind="file",
            name=source,
        ) from None
    if "\x00" in text:
        raise SnapshotError(
            f"binary data (a NUL byte at offset {text.index(chr(0))}): not a text file "
            "(UTF-16 needs a byte-order mark)",
            kind="file",
            name=source,
        )
    return text


def read_source(path: str | Path, *, kind: str = "file") -> tuple[str, str]:
    """``(text, source name)`` of a file; ``-`` reads standard input (``<stdin>``)."""
    if str(path) == STDIN:
        try:
            data = sys.stdin.buffer.read()
        except (OSError, AttributeError, ValueError) as exc:
            raise SnapshotError(
                f"cannot read standard input: {exc}", kind=kind, name="<stdin>"
            ) from None
        return decode(data, "<stdin>"), "<stdin>"
    if not str(path):  # Path("") is the current directory: name what was given
        raise SnapshotError(
            "an empty file name (give a path, or - for standard input)", kind=kind, name=""
        )
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"cannot read: {exc.strerror or exc}", kind=kind, name=str(p)) from None
    return decode(data, str(p)), str(p)


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a depth bound, short integers and linear merge keys."""

    max_nesting = 64

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._below = 0  # height of the tallest child composed so far at the current level
        self._heights: dict[int, tuple[yaml.Node | None, int]] = {}

    def _too_deep(self, mark: Any) -> NestingTooDeep:
        return NestingTooDeep(
            None,
            None,
            f"nested deeper than {self.max_nesting} levels (Limits.max_nesting)",
            mark,
        )

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if self.check_event(yaml.AliasEvent):
            mark = event.start_mark
            node = super().compose_node(parent, index)
            height = self._heights.get(id(node), (node, 1))[1]
            if self._depth + height > self.max_nesting:
                raise self._too_deep(mark)
        else:
            mark, anchor = event.start_mark, event.anchor
            self._depth += 1
            if self._depth > self.max_nesting:
                raise self._too_deep(mark)
            outer = self._below
            self._below = 0
            try:
                node = super().compose_node(parent, index)
            finally:
                self._depth -= 1
            height = 1 + self._below
            self._below = outer
            if anchor is not None and not isinstance(node, yaml.ScalarNode):
                self._heights[id(node)] = (node, height)
        self._below = max(self._below, height)
        return node

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        super().flatten_mapping(node)
        # Keep the last entry of each scalar key (the one that wins), so merging a mapping
        # that merged others does not repeat their entries (exponential in the nesting).
        seen: set[tuple[str, str]] = set()
        kept: list[tuple[yaml.Node, yaml.Node]] = []
        for key, value in reversed(node.value):
            if isinstance(key, yaml.ScalarNode):
                ident = (key.tag, key.value)
                if ident in seen:
                    continue
                seen.add(ident)
            kept.append((key, value))
        kept.reverse()
        node.value = kept

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(str(node.value)) > MAX_INT_DIGITS:
            raise IntegerTooLong(
                None,
                None,
                f"integer literal of {len(str(node.value))} characters is out of range",
                node.start_mark,
            )
        value: int = super().construct_yaml_int(node)
        return value


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


def parse_yaml(text: str, *, max_nesting: int) -> list[Any]:
    """Every document of ``text`` (YAML or JSON), nulls included.

    Raises
    ------
    yaml.YAMLError
        Syntax errors, and :class:`NestingTooDeep` past ``max_nesting`` levels (both are
        :class:`yaml.MarkedYAMLError` with the position).
    """
    loader = _BoundedLoader(text)
    loader.max_nesting = max_nesting
    try:
        docs: list[Any] = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            docs.append(loader.get_data())
        return docs
    finally:
        loader.dispose()


def yaml_error_detail(exc: yaml.YAMLError) -> str:
    """A one-line description of a YAML error with its line and column."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem or exc.context} at line {mark.line + 1}, column {mark.column + 1}"
    return str(exc).replace("\n", " ")


def bound_violation(text: str, *, max_nesting: int) -> str | None:
    """Why ``text`` breaks a bound of :func:`parse_yaml` (too deep, too long an integer), or
    None when it does not (syntax errors are left to the caller's own parser)."""
    try:
        parse_yaml(text, max_nesting=max_nesting)
    except (NestingTooDeep, IntegerTooLong) as exc:
        return yaml_error_detail(exc)
    except yaml.YAMLError:
        return None
    return None
