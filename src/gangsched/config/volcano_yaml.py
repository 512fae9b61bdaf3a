"""The YAML side of Volcano's ``volcano-scheduler.conf``: a strict loader and the dumper.

The loader is PyYAML's safe loader that also refuses a key repeated within one mapping and an
integer too long to convert; errors become :class:`~gangsched.errors.ConfigError` with the line
and column."""

from __future__ import annotations

from collections.abc import Mapping

import yaml

from gangsched.config.args import _MAX_INT_TEXT, _err


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects a key repeated within one mapping."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[object, object]:
    loader.flatten_mapping(node)
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, list | dict):
            continue  # unhashable keys are rejected by the base constructor
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """A YAML integer; one too long for Python's int-string conversion is a YAML error with
    its position (larger values than 64 bits are refused later, by the argument check)."""
    text = str(node.value)
    if len(text.replace("_", "")) > _MAX_INT_TEXT:
        raise yaml.constructor.ConstructorError(
            None, None, f"integer of {len(text)} characters is too long", node.start_mark
        )
    try:
        value = loader.construct_yaml_int(node)
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, "integer is too long", node.start_mark
        ) from None
    assert isinstance(value, int)
    return value


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{exc.problem or exc.context}{where}"
    return str(exc)


def load_volcano_yaml(text: object) -> object:
    """The plain data of a ``volcano-scheduler.conf`` text, its ``metrics`` section left out.

    YAML syntax errors, repeated keys and nesting past the parser's depth raise
    :class:`~gangsched.errors.ConfigError` (field ``yaml``); an empty text is refused."""
    if not isinstance(text, str | bytes):
        raise _err("yaml", f"expected YAML text, got {type(text).__name__}")
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise _err("yaml", f"not valid YAML: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise _err("yaml", "not valid YAML: nested too deeply") from None
    if data is None:
        raise _err("", "the configuration is empty")
    if isinstance(data, Mapping) and "metrics" in data:
        if data["metrics"] is not None and not isinstance(data["metrics"], Mapping):
            raise _err("metrics", "expected a mapping")
        data = {k: v for k, v in data.items() if k != "metrics"}
    return data


def dump_volcano_yaml(doc: Mapping[str, object]) -> str:
    """Volcano's text of a document already in Volcano's shape (keys in the given order)."""
    return yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=False)
