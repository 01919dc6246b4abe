"""YAML loading that remembers where every key came from, so errors point at the line.

pydantic reports a location like ("claim", "tolerance", "atol"); `locate` walks the composed YAML
node tree along that path (skipping union tags that are not keys) to the offending key's mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gate.errors import InputError


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys instead of silently keeping the last."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class LoadedYaml:
    """A parsed YAML document plus its node tree, for locating errors."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        try:
            self.node = yaml.compose(text, Loader=_UniqueKeyLoader)
            self.data: Any = yaml.load(text, Loader=_UniqueKeyLoader)
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark or err.context_mark
            line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
            problem = err.problem or str(err)
            raise InputError(path, f"invalid YAML: {problem}", line=line, col=col) from None
        except yaml.YAMLError as err:
            raise InputError(path, f"invalid YAML: {err}") from None

    def locate(self, loc: Sequence[int | str]) -> tuple[int, int]:
        """Line and column (1-based) of the deepest node on `loc` that exists."""
        return self.resolve(loc)[0]

    def resolve(self, loc: Sequence[int | str]) -> tuple[tuple[int, int], list[int | str]]:
        """(line, col) of the deepest node on `loc` that exists, and `loc` without the parts that
        are not keys of the document (pydantic's union tags such as `tolerance` in
        ("claim", "tolerance", "atol")). Parts past the deepest existing node are kept."""
        node = self.node
        if node is None:
            return (1, 1), list(loc)
        best = (node.start_mark.line + 1, node.start_mark.column + 1)
        kept: list[int | str] = []
        for i, part in enumerate(loc):
            if isinstance(node, yaml.MappingNode):
                match = next((kv for kv in node.value if kv[0].value == str(part)), None)
                if match is None:
                    if _is_union_tag(part) and i + 1 < len(loc):
                        continue
                    kept.extend(loc[i:])  # a key missing from the document
                    break
                key_node, node = match
                best = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                best = (node.start_mark.line + 1, node.start_mark.column + 1)
            else:
                kept.extend(loc[i:])
                break
            kept.append(part)
        return best, kept


# pydantic puts the tag of a union member into error locations: a discriminator value
# ("tolerance") or a validator description ("function-after[...]").
_UNION_TAGS = {"exact", "tolerance", "greedy-tokens", "distribution", "bounded-degradation"}


def _is_union_tag(part: int | str) -> bool:
    return isinstance(part, str) and (part in _UNION_TAGS or "[" in part)


def read_yaml(path: Path) -> LoadedYaml:
    """Read and parse a YAML file, turning I/O and syntax problems into InputError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(str(path), f"cannot read: {err.__class__.__name__}: {err}") from None
    return LoadedYaml(str(path), text)


def _field_path(loc: Sequence[int | str]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts) or "(document)"


def validation_error(doc: LoadedYaml, err: ValidationError, loc_prefix: Sequence[int | str] = ()) -> InputError:
    """The first pydantic error as a one-line InputError pointing at the YAML line."""
    first = err.errors(include_url=False)[0]
    (line, col), loc = doc.resolve((*loc_prefix, *first["loc"]))
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "missing":
        message = "required field is missing"
    return InputError(doc.path, message, line=line, col=col, field=_field_path(loc))


def parse_model(doc: LoadedYaml, model: type[BaseModel]) -> Any:
    """Validate a loaded document against a record model, raising a located InputError."""
    if not isinstance(doc.data, dict):
        raise InputError(doc.path, "expected a YAML mapping at the top level", line=1, col=1)
    try:
        return model.model_validate(doc.data)
    except ValidationError as err:
        raise validation_error(doc, err) from None
