"""Helpers for tests that call checks directly on reference-adapter paths (no runner)."""

from __future__ import annotations

from functools import cache
from typing import Any

from gate.adapters.reference import Options, ReferenceAdapter
from gate.adapters.reference.paths import ReferencePath
from gate.core.check import CheckContext
from gate.core.manifest import Manifest

MAX_LEN = 256
"""Small models keep the whole test set fast on a shared CPU; the 8000-token sweeps live in
benchmarks/ and examples/."""


@cache
def path(
    kind: str = "static",
    *,
    dtype: str = "float32",
    seed: int = 0,
    preset: str = "tiny",
    max_len: int = MAX_LEN,
    **options: Any,
) -> ReferencePath:
    built = ReferenceAdapter().build(
        Options(path=kind, preset=preset, max_len=max_len, **options), device="cpu", dtype=dtype, seed=seed
    )
    assert isinstance(built, ReferencePath)
    return built


def manifest(claim: dict[str, Any] | None = None, intervention: str = "layout") -> Manifest:
    return Manifest.model_validate(
        {
            "apiVersion": "gate/v1",
            "name": "test",
            "intervention": intervention,
            "claim": claim or {"level": "tolerance"},
            "subject": {
                "reference": {"adapter": "reference", "options": {"path": "full"}},
                "candidate": {"adapter": "reference", "options": {"path": "static"}},
            },
        }
    )


def ctx(
    reference: Any, candidate: Any, *, dtype: str = "float32", seed: int = 0, claim: dict[str, Any] | None = None
) -> CheckContext:
    return CheckContext(
        manifest=manifest(claim), reference=reference, candidate=candidate, seed=seed, device="cpu", dtype=dtype
    )
