"""The `openai` adapter: an engine gate did not write, behind an OpenAI-compatible HTTP API
(docs/engines.md has example manifests): a server at `base_url`, or a `launch` command gate starts
and always stops. Prompts are token ids. `controls` are the engine's negative controls: other launch
configurations that plant a known, real difference; `with_fault(name)` is the candidate launched so.

Secrets never enter a manifest: `headers` are templates over the variables the site lists in
`$GATE_HEADER_ENV`, redirects to another origin are not followed, and a launched server gets only a
few safe variables (environment.py). Every reply is checked as data (validate.py), each request
under one total deadline (transport.py). This module imports nothing heavy (`gate plan` stays instant).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from gate.adapters.openai.options import (
    Options,
    launch_context,
    launched_model_meta,
    model_context_length,
    model_vocab_size,
)
from gate.protocols import PathCapabilities


class OpenAIAdapter:
    """Builds an `EnginePath` (gate.adapters.openai.path) from Options."""

    name: ClassVar[str] = "openai"
    Options: ClassVar[type[BaseModel]] = Options

    def build(self, options: BaseModel, *, device: str, dtype: str, seed: int) -> Any:
        from gate.adapters.openai.path import EnginePath

        assert isinstance(options, Options)
        return EnginePath.probe(options, dtype=dtype, seed=seed)

    def capabilities(self, options: BaseModel) -> PathCapabilities:
        """The context from the launch command's own flag (llama.cpp `-c`/`--ctx-size`, per slot unless
        `--kv-unified`; vLLM `--max-model-len`) and `context_length`; a server reached at `base_url`
        states it only when it runs."""
        if not isinstance(options, Options):
            options = Options.model_validate(options.model_dump())
        from gate.adapters.openai.geometry import launch_geometry

        launch = options.launch
        found = launch_context(launch.command) if launch else None
        geometry = launch_geometry(launch.command, options.flavor, launched_model_meta(options)) if launch else None
        limits: list[tuple[int, str]] = [found] if found is not None else []
        if options.context_length is not None:
            limits.append((options.context_length, "option context_length"))
        max_len, source = min(limits) if limits else (None, "stated by the server when it runs")
        if limits and found is None:
            source += " (the server's own context may be shorter)"
        return PathCapabilities(
            path=f"openai:{options.flavor}",
            max_len=max_len,
            max_len_from=source,
            cache_geometry=geometry,
            offers=["EngineServing"],
        )


__all__ = ["OpenAIAdapter", "Options", "model_context_length", "model_vocab_size"]
