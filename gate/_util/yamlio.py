"""YAML loading that remembers where every key came from, so errors point at the line.

`locate` walks the composed node tree along a pydantic error location to the offending key's mark.
Hostile documents are refused with a located InputError before they are built (docs/reliability.md):
size, depth and alias-expanded node count are bounded, integers fit int64 and floats are finite.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, get_args, get_origin

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

_FastLoader: type[Any] | None = getattr(yaml, "CSafeLoader", None)
"""libyaml's parser and composer where PyYAML was built with it (several times faster): the same
events, nodes and marks; the document is built from the nodes by the duplicate-refusing constructor.
A document it refuses is parsed again in Python, so every error message is the one it always was."""

MAX_DOCUMENT_BYTES = 1024 * 1024
"""Largest manifest or policy file read (1 MiB; the largest shipped one is a few KiB)."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and sequences."""
MAX_NODES = 20_000
"""Most nodes in a document, counting what every alias expands to."""
INT64_MAX = 2**63 - 1
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_DIGITS = re.compile(r"[0-9a-fA-F]")
_constructor = yaml.SafeLoader("")


def _refused(path: str, message: str, mark: Any, field: str | None = None) -> InputError:
    """`message` about the document at `path`, placed at a parser mark (line 1, column 1 without one)."""
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    return InputError(path, message, line=line, col=col, field=field)


def _too_deep(path: str, text: str, loader: type[Any]) -> None:
    """Refuse nesting past MAX_DEPTH and more than MAX_NODES nodes from the parser's events, before the
    recursive composer and constructor run."""
    depth = nodes = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent, yaml.AliasEvent)):
                nodes += 1
                if nodes > MAX_NODES:
                    raise _refused(path, f"more than {MAX_NODES} nodes (limit of gate documents)", event.start_mark)
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _refused(
                        path, f"nested deeper than {MAX_DEPTH} levels (limit of gate documents)", event.start_mark
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError:
        return  # the composer reports syntax errors with their position


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for kv in node.value for n in kv]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _walk(node: yaml.Node) -> Iterator[tuple[yaml.Node, tuple[int | str, ...]]]:
    """Every node (keys included) with its path, each distinct node once (aliases share nodes)."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[int | str, ...]]] = [(node, ())]
    while stack:
        current, where = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current, where
        if isinstance(current, yaml.MappingNode):
            for k, v in current.value:
                stack.extend(((k, (*where, str(k.value))), (v, (*where, str(k.value)))))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend((v, (*where, i)) for i, v in enumerate(current.value))


def _refuse_expansion(root: yaml.Node, path: str) -> None:
    """Refuse a document over MAX_NODES once aliases expand, at the node where the growth happens
    (the smallest node over the limit: a billion-laughs block is named by its line)."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        nid = id(node)
        if children_done:
            children = [sizes[id(c)] for c in _children(node)]
            sizes[nid] = min(1 + sum(children), MAX_NODES + 1)
            visiting.discard(nid)
            if sizes[nid] > MAX_NODES and all(size <= MAX_NODES for size in children):
                message = f"more than {MAX_NODES} nodes once aliases are expanded (limit of gate documents)"
                raise _refused(path, message, node.start_mark)
            continue
        if nid in sizes:
            continue
        if nid in visiting:  # reached again from inside itself
            raise _refused(path, "recursive alias", node.start_mark)
        visiting.add(nid)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)


def _check_scalars(path: str, root: yaml.Node) -> None:
    """Integers within int64, floats finite, each refused at its own line."""
    for node, where in _walk(root):
        if not isinstance(node, yaml.ScalarNode) or node.tag not in (_INT_TAG, _FLOAT_TAG):
            continue
        field = _field_path(where)
        if node.tag == _INT_TAG:
            if len(_DIGITS.findall(node.value)) > 19 or abs(_constructor.construct_yaml_int(node)) > INT64_MAX:
                raise _refused(path, f"integer {node.value[:24]} is outside int64", node.start_mark, field)
        elif not math.isfinite(_constructor.construct_yaml_float(node)):
            raise _refused(path, f"{node.value[:24]} is not a finite number", node.start_mark, field)


def _parse(path: str, text: str, loader: type[Any]) -> tuple[yaml.Node | None, Any]:
    """The node tree and the data of one document, refusing what a gate document may not hold."""
    _too_deep(path, text, loader)
    node = yaml.compose(text, Loader=loader)
    if node is None:
        return None, None
    _refuse_expansion(node, path)
    _check_scalars(path, node)
    return node, _UniqueKeyLoader("").construct_document(node)


class LoadedYaml:
    """A parsed YAML document plus its node tree, for locating errors."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        if len(text) > MAX_DOCUMENT_BYTES:
            raise InputError(
                path, f"larger than {MAX_DOCUMENT_BYTES // 1024} KiB (limit of gate documents)", line=1, col=1
            )
        if _FastLoader is not None:
            try:
                self.node, self.data = _parse(path, text, _FastLoader)
                return
            except yaml.YAMLError:
                pass  # parsed again below: the Python parser's message and mark, as they always were
        try:
            self.node, self.data = _parse(path, text, _UniqueKeyLoader)
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark or err.context_mark
            line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
            problem = err.problem or str(err)
            raise InputError(path, f"invalid YAML: {problem}", line=line, col=col) from None
        except yaml.reader.ReaderError as err:  # a character YAML does not allow (NUL, ...): no mark, a position
            before = text[: err.position]
            line, col = before.count("\n") + 1, err.position - (before.rfind("\n") + 1) + 1
            raise InputError(
                path, f"invalid YAML: character {err.character!r} is not allowed", line=line, col=col
            ) from None
        except yaml.YAMLError as err:
            raise InputError(path, f"invalid YAML: {err}", line=1, col=1) from None

    def locate(self, loc: Sequence[int | str]) -> tuple[int, int]:
        """Line and column (1-based) of the deepest node on `loc` that exists."""
        return self.resolve(loc)[0]

    def error_at(self, loc: Sequence[int | str], message: str, field: str | None) -> InputError:
        """The error `message` about `field`, placed at the deepest node on `loc` that exists."""
        line, col = self.locate(loc)
        return InputError(self.path, message, line=line, col=col, field=field)

    def resolve(self, loc: Sequence[int | str]) -> tuple[tuple[int, int], list[int | str]]:
        """(line, col) of the deepest node on `loc` that exists, and `loc` without the parts that are not
        keys of the document (pydantic's union tags); parts past the deepest existing node are kept."""
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
    from gate._util.limited import read_regular

    data = read_regular(path, MAX_DOCUMENT_BYTES, "document", located=True)  # a FIFO or /dev/zero: refused, never read
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(str(path), f"cannot read: {err.__class__.__name__}: {err}") from None
    return LoadedYaml(str(path), text)


def _field_path(loc: Sequence[int | str]) -> str:
    """`claims[0].tolerance`: keys joined by dots, list indices in brackets."""
    return (
        "".join(f"[{p}]" if isinstance(p, int) else f"{'.' if i else ''}{p}" for i, p in enumerate(loc)) or "(document)"
    )


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The record models an annotation can hold (through Optional, unions, Annotated, list, dict)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def allowed_keys(model: type[BaseModel] | None, loc: Sequence[int | str]) -> set[str]:
    """Keys a mapping at `loc` (a path of keys into a document of `model`) may hold; empty when unknown."""
    models = [model] if model is not None else []
    for part in loc:
        if isinstance(part, int) or not models:
            continue  # list indices and dict keys keep the element model
        found: list[type[BaseModel]] = []
        for m in models:
            for name, info in m.model_fields.items():
                if part in (name, info.alias):
                    found.extend(_models_in(info.annotation))
        if not found and _is_union_tag(part):
            continue  # a discriminator value pydantic put into the location
        if found:
            models = found
        elif not any(get_origin(info.annotation) is dict for m in models for info in m.model_fields.values()):
            return set()
    return {info.alias or name for m in models for name, info in m.model_fields.items()}


def validation_error(
    doc: LoadedYaml, err: ValidationError, loc_prefix: Sequence[int | str] = (), model: type[BaseModel] | None = None
) -> InputError:
    """All pydantic errors as one InputError, one `FILE:LINE:COL: field: message` line each; a misspelled
    key gets a did-you-mean, and the "missing" error of the field it was meant to be is dropped."""
    errors = err.errors(include_url=False)
    missing = {(tuple(e["loc"][:-1]), str(e["loc"][-1])) for e in errors if e["type"] == "missing" and e["loc"]}
    meant: set[tuple[tuple[Any, ...], str]] = set()
    out: list[tuple[Any, str]] = []
    for e in errors:
        message = e["msg"]
        if e["type"] == "extra_forbidden" and e["loc"]:
            parent, key = tuple(e["loc"][:-1]), str(e["loc"][-1])
            siblings = [name for p, name in missing if p == parent]
            close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
            if close:
                meant.add((parent, close[0]))
            else:
                allowed = allowed_keys(model, parent) - {key}  # the model validated what sits at loc_prefix
                close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
            message = f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
        elif e["type"] == "missing":
            message = "required field is missing"
        out.append((e, message))
    found = []
    for e, message in out:
        if e["type"] == "missing" and (tuple(e["loc"][:-1]), str(e["loc"][-1])) in meant:
            continue
        (line, col), loc = doc.resolve((*loc_prefix, *e["loc"]))
        found.append(InputError(doc.path, message, line=line, col=col, field=_field_path(loc)))
    found.sort(key=lambda e: (e.line or 0, e.col or 0))
    first = found[0]
    first.more = found[1:]
    return first


def parse_model(doc: LoadedYaml, model: type[BaseModel]) -> Any:
    """Validate a loaded document against a record model, raising a located InputError."""
    if not isinstance(doc.data, dict):
        raise InputError(doc.path, "expected a YAML mapping at the top level", line=1, col=1)
    try:
        return model.model_validate(doc.data)
    except ValidationError as err:
        raise validation_error(doc, err, model=model) from None


def safe_scalar(text: str) -> Any:
    """A command-line value read as YAML (512, true, [1, 2], a string), never as an object tag."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text
