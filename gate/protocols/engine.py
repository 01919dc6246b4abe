"""An engine gate did not write, behind an HTTP API: `EngineServing`, the servers it starts
(`EngineServer`, their completions and streams), its `CacheGeometry` and its slot files.
This module imports no torch at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from pathlib import Path


@runtime_checkable
class EngineCompletion(Protocol):
    """One greedy completion from an engine behind HTTP: what its API lets gate observe."""

    tokens: list[int]
    """Greedy token ids."""
    logprobs: list[float]
    """Logprob of each, under the engine's own (pre-sampling) distribution."""
    top: list[dict[int, float]]
    """Per position: the top-k token ids and their logprobs."""
    cached_tokens: int | None
    """Prompt tokens the server says it reused from its cache (None: it reports nothing)."""
    seconds: float
    """Wall time of the request."""
    finish_reason: str | None
    """Why generation ended, as the server says: `stop` (an end-of-sequence token), `length` (max_tokens);
    None where the reply does not say."""

    def summary(self) -> dict[str, Any]:
        """Tokens, cached tokens and time, for the evidence."""


class EngineStream(Protocol):
    """A streamed completion: the completion, and when each token arrived (seconds after the request was sent)."""

    completion: EngineCompletion
    token_s: list[float]


@runtime_checkable
class EngineServer(Protocol):
    """A running engine server, as an engine check uses it while it holds it."""

    flavor: str
    """vllm, sglang, llama.cpp, tgi or generic."""
    info: dict[str, Any]
    """What the server states: model, vocab_size, context_length, total_slots, build."""

    def complete(
        self, prompt: list[int], max_tokens: int, top_k: int, extra: dict[str, Any] | None = None
    ) -> EngineCompletion:
        """Greedy continuation of a token-id prompt with top-k logprobs at each position."""

    def stream(
        self, prompt: list[int], max_tokens: int, top_k: int, extra: dict[str, Any] | None = None
    ) -> EngineStream:
        """The same continuation streamed: each token's arrival time as the client sees it."""

    def reset_cache(self) -> str | None:
        """Drop the prefix cache through the engine's own endpoint; the endpoint, or None if it has none."""

    def unreset_tiers(self) -> list[str]:
        """The cache tiers of this server that `reset_cache` cannot reach, in words (e.g. llama.cpp's
        host-memory prompt cache, which no endpoint clears); empty when the reset reaches every tier
        that can hold anything. A reset is complete only when this is empty."""

    def restart(self) -> bool:
        """Stop the server and start a new process on the same launch in its place, every cache tier
        empty (handed over to later checks in the old one's place); False where gate did not launch it.
        A check whose reset leaves `unreset_tiers` empties them this way."""

    @property
    def reused(self) -> bool:
        """Handed over from an earlier check of this run (its cache reset), not started for this one."""

    def evidence(self) -> dict[str, Any]:
        """Command, port, start-up time and log tail, for the record."""


class CacheGeometry(BaseModel):
    """How an engine reuses cached state across requests, as it states it (vLLM's `cache_config_info`
    metric, llama.cpp's `/props`, a launch flag) or as a short probe of its reported hits measured."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    block_size: int | None = None
    """Tokens of the smallest unit the engine reuses: only whole blocks hit (vLLM: 16 on GPUs, 128 on
    its CPU backend); 1: any common prefix (llama.cpp); None: not known."""
    cache_dtype: str | None = None
    """The KV cache's element type as the engine names it (vLLM: auto, fp8, fp8_e5m2; llama.cpp: f16, q8_0)."""
    prefix_caching: bool | None = None
    """Whether the engine reuses a prefix across requests at all (None: not stated)."""
    source: str = "not stated"
    """Where the values come from (an endpoint, a launch flag, a probe, an engine default)."""
    sliding_window: int | None = None
    """Tokens a local (sliding-window) layer attends to (None: full attention, or not stated)."""
    sliding_layers: list[int] | None = None
    """Which layers are local when `sliding_window` is set (None: all of them, or not stated)."""
    slots: int | None = None
    """Requests the engine serves at once (llama.cpp `-np`, `/props` `total_slots`)."""
    kv_unified: bool | None = None
    """One KV buffer shared by every slot (llama.cpp `--kv-unified`, its default with `-np` auto)."""
    ubatch: int | None = None
    """Tokens of one compute micro-batch (llama.cpp `-ub`, 512 by default): its sliding-window cache
    keeps `sliding_window` cells per slot plus one micro-batch."""
    host_cache_mib: int | None = None
    """The host-memory prompt cache's size in MiB (llama.cpp `--cache-ram`; 0: off; None: not stated)."""
    checkpoints: int | None = None
    """Context checkpoints kept per slot (llama.cpp `--ctx-checkpoints`; 0: none; None: not stated)."""
    checkpoint_spacing: int | None = None
    """Fewest tokens between two context checkpoints (llama.cpp `--checkpoint-min-step`; None: not stated)."""
    mechanisms_from: str | None = None
    """Where the attention layout and the reuse mechanisms above come from (flags, `/props`, the model, the log)."""

    def words(self) -> str:
        """One line for `gate plan` and a check's message."""
        parts = ["block " + ("unknown" if self.block_size is None else str(self.block_size))]
        if self.cache_dtype is not None:
            parts.append(f"KV {self.cache_dtype}")
        if self.prefix_caching is not None:
            parts.append("prefix caching " + ("on" if self.prefix_caching else "off"))
        return ", ".join(parts) + f" ({self.source})"


@runtime_checkable
class SlotStore(Protocol):
    """A server's saved slot states, where the engine offers them (llama.cpp's `--slot-save-path DIR`
    and `POST /slots/N?action=save|restore|erase`) and gate can read the files (a server it launched).
    Each call answers the engine's reply as an object; a refusal is `EngineBadReply` naming the HTTP
    status, a server that dies on it `SubjectCrash`."""

    directory: Path
    """Where the server writes and reads its slot files (a file there is restored by its name)."""
    slots: int
    """Slots the server runs (ids 0 .. slots-1)."""

    def save(self, slot: int, filename: str) -> dict[str, Any]:
        """Write slot `slot`'s state to `filename` under `directory`."""

    def restore(self, slot: int, filename: str) -> dict[str, Any]:
        """Load `filename` from `directory` into slot `slot`, replacing what it held."""

    def erase(self, slot: int) -> dict[str, Any]:
        """Clear slot `slot`'s state."""

    def pinned(self, slot: int) -> dict[str, Any]:
        """Request fields that send a completion to slot `slot` (llama.cpp: `id_slot`)."""


@runtime_checkable
class EngineSlots(Protocol):
    """An engine server that may offer slot files (gate.adapters.openai's launched llama.cpp servers)."""

    def slot_store(self) -> SlotStore | str:
        """The server's slot files, or why it offers none (in words, for a check that declines)."""


@runtime_checkable
class SlotFilesPath(Protocol):
    """An engine path that can say, before its servers start, why they offer no slot files."""

    def slot_files_absent(self) -> str | None:
        """Why this path's servers offer no slot files gate can reach (in words); None when they may."""


@runtime_checkable
class EngineServing(Protocol):
    """An engine gate did not write, behind an OpenAI-compatible HTTP API (gate.adapters.openai),
    judged by the engine-* checks. It has no logits and no session: only completions."""

    flavor: str
    vocab_size: int
    max_len: int
    top_k: int
    """Top logprobs to request at each position."""
    salt_field: str | None
    """Request field that salts the prefix cache (vLLM: cache_salt), None when the engine has none."""
    cache_geometry: CacheGeometry
    """How the server reuses cached state (what the prefix sweep is planned on)."""

    def serve(
        self, *, label: str = "server", model: Any = None, fresh: bool = False
    ) -> AbstractContextManager[EngineServer]:
        """The server for the block: the one this run already started for the same launch, its prefix
        cache reset, or a new one kept until the run ends (its whole process group stopped then, on an
        exception and on Ctrl-C alike). `fresh`: a new process, stopped when the block ends (a
        restart). `model`: another model to load (from `changed_model`)."""

    def changed_model(self, perturb_seed: int) -> Any | None:
        """A model with other weights to restart on, or None where gate cannot restart the server on one."""
