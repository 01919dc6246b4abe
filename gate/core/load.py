"""Load a manifest file into a validated Manifest (no torch)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from gate._util.yamlio import LoadedYaml, parse_model, read_yaml
from gate.core.manifest import Manifest
from gate.errors import InputError


@dataclass
class LoadedManifest:
    path: Path
    manifest: Manifest
    doc: LoadedYaml
    sha256: str


def load_manifest(path: Path) -> LoadedManifest:
    """Parse and validate a manifest; errors are `FILE:LINE:COL: field: message` (exit 2)."""
    if not path.exists():
        raise InputError(str(path), "no such manifest file")
    # a directory, FIFO or device exists but is refused by read_yaml (read_regular), naming what it is
    doc = read_yaml(path)
    manifest: Manifest = parse_model(doc, Manifest)
    manifest = manifest.model_copy(update={"change": manifest.change.with_ci_commit()})
    return LoadedManifest(path, manifest, doc, hashlib.sha256(path.read_bytes()).hexdigest())


def validate_options(loaded: LoadedManifest) -> None:
    """Validate each path's options with its adapter's own Options model (imports the adapter)."""
    from pydantic import ValidationError

    from gate._util.yamlio import validation_error
    from gate.core.registry import adapter_names, load_adapter

    for role in ("reference", "candidate"):
        spec = getattr(loaded.manifest.subject, role)
        if spec.adapter not in adapter_names():
            raise loaded.doc.error_at(
                ("subject", role, "adapter"),
                f"unknown adapter {spec.adapter!r} (registered: {', '.join(adapter_names())})",
                f"subject.{role}.adapter",
            )
        adapter = load_adapter(spec.adapter)
        model = strict(adapter.Options)
        try:
            model.model_validate(spec.options)
        except ValidationError as err:
            raise validation_error(loaded.doc, err, ("subject", role, "options"), model=model) from None


def strict(model: type[BaseModel]) -> type[BaseModel]:
    """An adapter's Options model as gate validates a manifest by it: a key the model does not declare
    is an error (a typo must never be dropped silently), unless the model says `extra="allow"`."""
    if model.model_config.get("extra") in ("forbid", "allow"):
        return model
    config = ConfigDict(**{**model.model_config, "extra": "forbid"})
    return type(model.__name__, (model,), {"model_config": config, "__module__": model.__module__})
