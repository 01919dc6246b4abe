"""Paths through `generate` itself: cache_implementation="static" and "paged".

generate-static: each prefill or append is one `generate(max_new_tokens=1)` call over the whole
history that carries the cache from call to call (generate builds the StaticCache itself on the
first call, sized by `max_cache_len` where generate knows it, 5.15+; before, the adapter builds the
same StaticCache and hands it in). generate returns logits only for the token it picks, so the
rows for every processed token are read from the decoder's output through a read-only forward
hook and projected by the model's own output head; the last row is checked against generate's.

generate-paged: transformers switches to continuous batching (`generate_batch`), which keeps its
paged cache inside one call and returns tokens, not logits. It serves greedy continuations
(`greedy_continuation`), not logit-level sessions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.paths import HFPath
from gate.adapters.hf.sessions import CacheSession
from gate.paths import AdapterUnavailable, Session


class GeneratePath(HFPath):
    """A path whose sessions run `generate` (static) or whose continuations run continuous batching (paged)."""

    def faults(self) -> tuple[str, ...]:
        return (
            ("stale-weights", "cross-request-handle", "reset-keeps-position") if self.kind == "generate-static" else ()
        )

    def new_session(self, batch_size: int) -> Session:
        if self.kind == "generate-paged":
            raise AdapterUnavailable(
                "generate-paged runs continuous batching, which returns tokens, not logits: use it for greedy "
                "continuations (greedy_continuation), not for logit-level sessions"
            )
        return GenerateSession(self, batch_size)

    def greedy_continuation(self, prompts: torch.Tensor, n_tokens: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Greedy continuation of each prompt [B, T0] by `n_tokens` through `generate` with this
        path's cache_implementation: tokens [B, n_tokens] and proof of exercise."""
        implementation = "paged" if self.kind == "generate-paged" else "static"
        settings: dict[str, Any] = {"cache_implementation": implementation}
        if implementation == "static" and compat.cache_api(self.model).generate_max_cache_len:
            settings["max_cache_len"] = prompts.shape[1] + n_tokens
        config = _greedy_config(n_tokens, **settings)
        started = time.perf_counter()
        with torch.no_grad(), _count_forwards(self.model) as calls:
            if implementation == "paged":  # generate reads this one from its kwargs to switch modes
                out = self.model.generate(
                    prompts.to(self.device), generation_config=config, cache_implementation="paged"
                )
            else:
                out = self.model.generate(prompts.to(self.device), generation_config=config)
        sequences = out if isinstance(out, torch.Tensor) else out.sequences
        if sequences.dim() == 3:  # continuous batching returns [1, B, T0 + n]
            sequences = sequences[0]
        exercise = {
            "cache_implementation": implementation,
            "forward_calls": calls[0],
            "generated_tokens": int(sequences.shape[1] - prompts.shape[1]) * int(sequences.shape[0]),
            "seconds": round(time.perf_counter() - started, 3),
        }
        return sequences[:, prompts.shape[1] :].to(prompts.device), exercise


def _greedy_config(n_tokens: int, **settings: Any) -> Any:
    return compat.generation_config(
        do_sample=False, max_new_tokens=n_tokens, eos_token_id=None, pad_token_id=0, **settings
    )


@contextmanager
def _count_forwards(model: Any) -> Iterator[list[int]]:
    calls = [0]

    def hook(*_args: Any) -> None:
        calls[0] += 1

    handle = model.register_forward_hook(hook)
    try:
        yield calls
    finally:
        handle.remove()


class GenerateSession(CacheSession):
    """Each call is one generate(max_new_tokens=1) over the history, carrying generate's cache."""

    def __init__(self, path: HFPath, batch_size: int) -> None:
        super().__init__(path, batch_size)
        self.history = torch.empty(batch_size, 0, dtype=torch.long, device=self.device)
        self.generate_calls = 0
        self.positions_from_cache = True
        self.cache_built_by = ""
        self.head = self.model.get_output_embeddings()

    def clear_cache(self) -> None:
        super().clear_cache()
        self.history = self.history[:, :0]

    def _step(self, phase: str, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.device)
        n = tokens.shape[1]
        if n == 0:
            return torch.empty(self.batch_size, 0, self.path.vocab_size)
        self.history = torch.cat([self.history, tokens], dim=1)
        settings: dict[str, Any] = {"return_dict_in_generate": True, "output_logits": True}
        kwargs: dict[str, Any] = {}
        api = compat.cache_api(self.model)
        size = self.path.options.max_cache_len or self.path.max_len
        if self.cache is None or (compat.seq_length(self.cache) == 0 and self.cache_built_by == ""):
            if api.generate_max_cache_len:
                settings.update(cache_implementation="static", max_cache_len=size)
                self.cache_built_by = "generate"
            else:
                self.cache = compat.static_cache(self.model.config, size)
                self.cache_built_by = "adapter (generate before 5.15 sizes its static cache to one call)"
        if self.cache is not None and "cache_implementation" not in settings:
            kwargs[api.cache_kwarg] = self.cache
        had_cache = self.cache is not None and compat.seq_length(self.cache) > 0
        captured: list[torch.Tensor] = []

        def hook(_module: Any, _args: Any, output: Any) -> None:
            captured.append(output[0] if isinstance(output, tuple) else output.last_hidden_state)

        handle = self.model.base_model.register_forward_hook(hook)
        try:
            with torch.no_grad(), self.tamper.weights("prefill" if phase == "prefill" else "append", self.model):
                out = self.model.generate(
                    self.history,
                    attention_mask=torch.ones_like(self.history),
                    generation_config=_greedy_config(1, **settings),
                    **kwargs,
                )
        finally:
            handle.remove()
        self.cache = compat.output_cache(out)
        self.generate_calls += 1
        self.forward_calls += len(captured)
        self.cached_steps += int(had_cache)
        with torch.no_grad():
            logits: torch.Tensor = self.head(torch.cat(captured, dim=1)).float()[:, -n:]
        if logits.shape[1] < n:
            # generate skipped tokens its cache claims to hold (a stale counter): no logits exist for
            # them, so they are served as NaN rows rather than silently shortened
            missing = torch.full((self.batch_size, n - logits.shape[1], logits.shape[2]), float("nan"))
            logits = torch.cat([missing.to(logits.device), logits], dim=1)
        # the hook must see what generate saw: its own logits for the last row
        gap = (logits[:, -1] - out.logits[0].float()).abs().max().item()
        if gap > 1e-3 * (1 + out.logits[0].abs().max().item()):
            raise RuntimeError(f"captured rows disagree with generate's own logits (max |Δ| = {gap})")
        if phase == "prefill":
            self._record_prefill(tokens)
        self.pos += n
        self.tamper.after_write(phase, self, n)
        return logits

    def exercise(self) -> dict[str, Any]:
        record = super().exercise()
        record.update({"generate_calls": self.generate_calls, "cache_built_by": self.cache_built_by})
        return record
