"""Slice definitions: evals/<name>.yaml validated into `SliceSpec` (no torch, no datasets).

The shape of `SliceSpec` may not change without bumping its `apiVersion` (gate/evals/v1).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from gate.core.manifest import Record

Builder = Literal["retrieval", "copy", "numbers", "closure", "local"]


class SliceSpec(Record):
    """One evaluation slice: what it probes, how its rows are built, how long its contexts are."""

    api_version: Literal["gate/evals/v1"] = Field(alias="apiVersion")
    """Slice file format version."""
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Slice name, equal to the file name without .yaml; envelopes refer to it."""
    summary: str
    """What the slice probes and why an approximation could fail it."""
    builder: Builder
    """Row builder in gate.quality.builders."""
    dependency: Literal["long-range", "local"]
    """Where the answer's evidence lies: far back in the context, or within the last few tokens."""
    continuation: int = Field(gt=0, le=256)
    """k: tokens compared per sample (greedy match over k, per-token top-1 agreement and KL)."""
    samples: int = Field(default=48, gt=0)
    """Samples built when no envelope on the slice needs more."""
    max_samples: int = Field(default=2000, gt=0)
    """Never build more than this, whatever the power calculation asks for."""
    context_lengths: list[int] = Field(min_length=1)
    """Prompt lengths in tokens, clipped to the model's max_len minus k."""
    depths: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    """Relative positions (0 = start, 1 = end of the context) of the evidence."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Builder parameters (token space)."""
    text: dict[str, Any] = Field(default_factory=dict)
    """Templates for text space (models with a tokenizer)."""

    @model_validator(mode="after")
    def _ranges(self) -> SliceSpec:
        if any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise ValueError("depths must lie in [0, 1]")
        if any(n < 16 for n in self.context_lengths):
            raise ValueError("context lengths must be at least 16 tokens")
        if self.samples > self.max_samples:
            raise ValueError("samples must not exceed max_samples")
        return self

    def lengths_for(self, max_len: int) -> list[int]:
        """Context lengths that fit a model of `max_len` positions with k tokens to spare."""
        room = max_len - self.continuation
        if room < 16:
            raise ValueError(f"slice {self.name}: max_len {max_len} leaves no room for a context")
        return sorted({min(n, room) for n in self.context_lengths})


def evals_dir() -> Path:
    from gate._util.resources import data_dir

    return data_dir("slices")


def load_slice(name: str, directory: Path | None = None) -> SliceSpec:
    """Load and validate evals/<name>.yaml."""
    return _load(name, str(directory or evals_dir()))


@cache
def _load(name: str, directory: str) -> SliceSpec:
    import yaml

    path = Path(directory) / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(slice_names(Path(directory))) or "none"
        raise KeyError(f"no slice {name!r} under {directory} (known: {known})")
    spec = SliceSpec.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    if spec.name != name:
        raise ValueError(f"{path}: name {spec.name!r} differs from the file name")
    return spec


def slice_names(directory: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (directory or evals_dir()).glob("*.yaml"))
