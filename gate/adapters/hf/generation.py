"""Paths through `generate` itself: generate-static, generate-cache and generate-paged.

generate returns logits only for the token it picks, so every processed token's row is read from the
decoder's output by a forward hook and projected by the model's own head; the last row is checked
against generate's. generate-paged replays the request's whole history through one
`generate_batch(max_new_tokens=1)` per call, every batch row a request, at most `page_size` tokens per
forward; a pre-hook sends the session's positions (docs/hf-adapter.md, "Paths").
"""

from __future__ import annotations

import itertools
from contextlib import nullcontext
from typing import Any

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.paths import HFPath
from gate.adapters.hf.presets import kv_shape
from gate.adapters.hf.sessions import HistorySession
from gate.errors import AdapterUnavailable, SubjectCrash
from gate.protocols import Session, subject_call


class GeneratePath(HFPath):
    """A path whose sessions run `generate` (static) or continuous batching (paged)."""

    shared: Any = None
    """generate-cache: the one GenerationConfig every request's first generate call is handed."""
    keywords: dict[str, Any] | None = None
    """generate-cache with `config_via: keywords`: the cache keywords every request's first call is handed."""

    def faults(self) -> tuple[str, ...]:
        if self.kind == "generate-paged":
            return PAGED_FAULTS
        if self.kind == "generate-cache":  # a request's cache is generate's, built anew: no counter to keep
            return "stale-weights", "cross-request-handle", "stale-generate-cache", "missing-start-pos"
        return "stale-weights", "cross-request-handle", "reset-keeps-position"

    def first_call(self) -> tuple[Any, dict[str, Any]]:
        """generate-cache: the GenerationConfig and the keywords of a request's first generate call, the
        same objects every time (what a call changes in them, the next call inherits)."""
        greedy = {"return_dict_in_generate": True, "output_logits": True}
        if self.options.config_via == "keywords":
            if self.keywords is None:
                self.keywords = self._cache_settings()
            return compat.greedy_config(1, **greedy), self.keywords
        if self.shared is None:
            self.shared = compat.greedy_config(1, **greedy, **self._cache_settings())
        return self.shared, {}

    def _cache_settings(self) -> dict[str, Any]:
        """What names the cache generate builds (`cache_config` a new dict of the option's)."""
        settings: dict[str, Any] = {"cache_implementation": self.options.cache_implementation}
        if self.options.cache_config is not None:
            settings["cache_config"] = dict(self.options.cache_config)
        if self.options.cache_implementation == "static":
            if not compat.cache_api(self.model).generate_max_cache_len:
                raise AdapterUnavailable(
                    f"transformers {compat.cache_api(self.model).version}'s generate sizes the static cache "
                    "it builds to one call (no max_cache_len before 5.13), so a request's later calls "
                    "cannot carry it: use generate-static, whose adapter-built StaticCache is handed in"
                )
            settings["max_cache_len"] = self.options.max_cache_len or self.max_len
        return settings

    def cache_config_now(self) -> list[str] | None:
        """generate-cache: the keys of the `cache_config` the path hands generate, as generate left them."""
        config = (
            getattr(self.shared, "cache_config", None) if self.keywords is None else self.keywords.get("cache_config")
        )
        return sorted(config) if isinstance(config, dict) else None

    def libraries(self) -> tuple[str, ...]:
        backend = str((self.options.cache_config or {}).get("backend", "quanto"))
        quantized = self.kind == "generate-cache" and self.options.cache_implementation == "quantized"
        extra = {"quanto": ("optimum-quanto",), "hqq": ("hqq",)}.get(backend, ()) if quantized else ()
        return (*super().libraries(), *extra)

    def extra_identity(self) -> dict[str, Any]:
        if self.kind != "generate-cache":
            return super().extra_identity()
        return {"cache_implementation": self.options.cache_implementation, "cache_config": self.options.cache_config}

    def position_feeds(self) -> tuple[str, ...]:
        """generate-paged sends the session's positions as `position_ids`; generate-static lets generate
        count from the cache's own counter."""
        return ("position_ids",) if self.kind == "generate-paged" else ("cache counter",)

    def new_session(self, batch_size: int) -> Session:
        if self.kind == "generate-paged":
            compat.require_continuous_batching()
            return PagedSession(self, batch_size)
        return GenerateSession(self, batch_size)

    def layout_edges(self) -> dict[str, tuple[int, ...]]:
        if self.kind != "generate-paged":
            return super().layout_edges()
        return {"page": tuple(range(self.options.page_size, self.max_len, self.options.page_size))}

    def replay(self, history: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        """Run each row of `history` [B, L] as one request through continuous batching, sending
        `positions` [B, L]; the decoder's output rows [B, L, d] and the schedule it ran."""
        batch, length = history.shape
        hidden: torch.Tensor | None = None
        expected = [0] * batch
        pending: list[list[tuple[int, int, int, int]]] = []
        schedule: dict[str, Any] = {"forwards": 0, "tokens_per_forward": [], "max_requests_in_a_forward": 0}
        errors: list[BaseException] = []

        def before(_module: Any, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
            try:
                ids = (kwargs["input_ids"] if kwargs.get("input_ids") is not None else args[0])[0]
                sent = kwargs["position_ids"][0]
                assignment = _attribute(ids, sent, history, expected)
                mapped = sent.clone()
                for row, start, first, last in assignment:
                    mapped[first:last] = positions[row, start : start + last - first].to(mapped.device)
                pending.append(assignment)
                schedule["forwards"] += 1
                schedule["tokens_per_forward"].append(int(ids.shape[0]))
                schedule["max_requests_in_a_forward"] = max(schedule["max_requests_in_a_forward"], len(assignment))
                kwargs["position_ids"] = mapped[None]
            except BaseException as err:  # a hook runs on the engine's thread: keep it for the caller
                errors.append(err)
                raise
            return args, kwargs

        def after(_module: Any, _args: Any, output: Any) -> None:
            nonlocal hidden
            rows = output[0] if isinstance(output, tuple) else output.last_hidden_state
            if hidden is None:
                hidden = rows.new_full((batch, length, rows.shape[-1]), float("nan"))
            for row, start, first, last in pending.pop(0):
                hidden[row, start : start + last - first] = rows[0, first:last]

        base = self.model.base_model
        try:
            with (
                base.register_forward_pre_hook(before, with_kwargs=True),
                base.register_forward_hook(after),
                torch.no_grad(),
                subject_call("generate_batch", length=length, requests=batch),
            ):
                out = compat.generate_batch(self.model, history.tolist(), self.options.page_size, self.max_len, 1)
        except SubjectCrash:
            if errors:  # gate's own hook raised inside the engine: gate's error, not the subject's
                raise errors[0] from None
            raise
        if errors:
            raise errors[0]
        compat.failed_request(out, {"length": length})
        if hidden is None or bool(hidden.isnan().any()) or expected != [length] * batch:
            raise RuntimeError(f"continuous batching computed {expected} of {length} tokens per request")
        schedule["chosen"] = [list(result.generated_tokens) for result in out.values()]
        return hidden, schedule


def _attribute(
    ids: torch.Tensor, sent: torch.Tensor, history: torch.Tensor, expected: list[int]
) -> list[tuple[int, int, int, int]]:
    """Split one packed forward (token ids and the positions the engine sent, [N] each) into
    per-request segments: (row, first position, first slot, end slot). A segment starts where the
    positions stop counting up by one; it belongs to the first request (in submission order, which
    the scheduler keeps) that expects that position next and holds those token ids there."""
    cuts = [0] + [i for i in range(1, sent.shape[0]) if int(sent[i]) != int(sent[i - 1]) + 1] + [sent.shape[0]]
    assignment = []
    for first, last in itertools.pairwise(cuts):
        start, n = int(sent[first]), last - first
        segment = ids[first:last].to(history.device)
        owner = next(
            (
                r
                for r in range(history.shape[0])
                if expected[r] == start and torch.equal(history[r, start : start + n], segment)
            ),
            None,
        )
        if owner is None:
            raise RuntimeError(
                f"a forward of continuous batching ran tokens at positions {start}..{start + n - 1} no request expects"
            )
        expected[owner] += n
        assignment.append((owner, start, first, last))
    return assignment


CONFIG_VIA = {"generation-config": "GenerationConfig", "keywords": "cache_config dict, passed as keywords"}
"""What a generate-cache request's first call builds its cache from, by `config_via`."""


PAGED_FAULTS = ("off-by-one-pos", "missing-start-pos", "reset-keeps-position")
"""What a paged session can plant from outside: the positions it sends, what its reset forgets."""


class PagedSession(HistorySession):
    """Each call replays the history through continuous batching."""

    def __init__(self, path: GeneratePath, batch_size: int) -> None:
        super().__init__(path, batch_size)
        self.paged = path
        self.sent = self.history.clone()
        """The position each history token was sent with (what its K were rotated by)."""
        self.head = self.model.get_output_embeddings()
        self.schedule: dict[str, Any] = {}
        self.calls = 0

    def clear_cache(self) -> None:
        super().clear_cache()
        self.sent = self.sent[:, :0]

    def _run(self, phase: str, n: int) -> torch.Tensor:
        self.sent = torch.cat([self.sent, self.tamper.positions(phase, self._positions(n))], dim=1)
        hidden, self.schedule = self.paged.replay(self.history, self.sent)
        with torch.no_grad():
            logits: torch.Tensor = self.head(hidden[:, -n:]).float()
        chosen = torch.tensor([c[0] for c in self.schedule["chosen"]], device=logits.device)
        top = logits[:, -1].max(dim=-1).values
        picked = logits[:, -1].gather(1, chosen[:, None])[:, 0]
        if bool(((top - picked).abs() > 1e-3 * (1 + top.abs())).any()):
            raise RuntimeError("captured rows disagree with the tokens continuous batching chose")
        self.calls += 1
        self.forward_calls += self.schedule["forwards"]
        self.cached_steps += int(self.schedule["forwards"] > 1)
        if phase == "prefill":
            self._record_prefill(self.history[:, -n:])
        self.pos += n
        return logits

    def exercise(self) -> dict[str, Any]:
        layers, kv_heads, head_dim = kv_shape(self.model)
        page = self.paged.options.page_size
        pages = -(-int(self.history.shape[1]) // page)  # whole pages, every layer, the model's dtype
        kv_bytes = 2 * layers * pages * page * kv_heads * head_dim * int(self.model.dtype.itemsize) * self.batch_size
        return {
            "cache_len": int(self.history.shape[1]),
            "cached_steps": self.cached_steps,
            "cache_bytes": kv_bytes,
            "tokens_seen": self.pos,
            "forward_calls": self.forward_calls,
            "generate_batch_calls": self.calls,
            "page_size": self.paged.options.page_size,
            "last_call_forwards": self.schedule.get("forwards", 0),
            "last_call_tokens_per_forward": self.schedule.get("tokens_per_forward", [])[:32],
            "max_requests_in_a_forward": self.schedule.get("max_requests_in_a_forward", 0),
        }


class GenerateSession(HistorySession):
    """Each call is one generate(max_new_tokens=1) over the history, carrying generate's cache."""

    def __init__(self, path: GeneratePath, batch_size: int) -> None:
        super().__init__(path, batch_size)
        self.generating = path
        self.generate_calls = 0
        self.configs_shared = 0
        """generate-cache: requests whose cache generate built from the path's shared config."""
        self.positions_from_cache = True
        self.cache_built_by = ""
        self.head = self.model.get_output_embeddings()

    def _run(self, phase: str, n: int) -> torch.Tensor:
        settings: dict[str, Any] = {"return_dict_in_generate": True, "output_logits": True}
        kwargs: dict[str, Any] = {}
        api = compat.cache_api(self.model)
        size = self.path.options.max_cache_len or self.path.max_len
        first: tuple[Any, dict[str, Any]] | None = None
        if self.path.kind == "generate-cache":
            if self.cache is None:
                first = self.generating.first_call()  # the request's first call: generate builds the cache
                self.cache = self.tamper.generate_cache(self)
                self.cache_built_by = f"generate, from the path's one {CONFIG_VIA[self.path.options.config_via]}"
                self.configs_shared += 1
        elif self.cache is None or (compat.seq_length(self.cache) == 0 and self.cache_built_by == ""):
            if api.generate_max_cache_len:
                settings.update(cache_implementation="static", max_cache_len=size)
                self.cache_built_by = "generate"
            else:
                self.cache = compat.static_cache(self.model.config, size)
                self.cache_built_by = "adapter (generate before 5.13 sizes its static cache to one call)"
        if self.cache is not None and "cache_implementation" not in settings:
            kwargs[api.cache_kwarg] = self.cache
        if first is not None and self.cache is None:
            config, cache_keywords = first
            kwargs.update(cache_keywords)
        else:
            config = compat.greedy_config(1, **settings)
        had_cache = self.cache is not None and compat.seq_length(self.cache) > 0
        captured: list[torch.Tensor] = []

        def hook(_module: Any, _args: Any, output: Any) -> None:
            captured.append(output[0] if isinstance(output, tuple) else output.last_hidden_state)

        def sent(_module: Any, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
            # the positions generate sends with the call's tokens, as the session's tamper would send them
            if kwargs.get("position_ids") is not None:
                kwargs["position_ids"] = self.tamper.positions(phase, kwargs["position_ids"])
            return args, kwargs

        base = self.model.base_model
        generated_cache = self.path.kind == "generate-cache"
        with (
            base.register_forward_hook(hook),
            base.register_forward_pre_hook(sent, with_kwargs=True) if generated_cache else nullcontext(),
            torch.no_grad(),
            self.tamper.weights("prefill" if phase == "prefill" else "append", self.model),
            subject_call("generate", length=int(self.history.shape[1])),
        ):
            out = self.model.generate(
                self.history, attention_mask=torch.ones_like(self.history), generation_config=config, **kwargs
            )
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
            self._record_prefill(self.history[:, -n:])
        self.pos += n
        self.tamper.after_write(phase, self, n)
        return logits

    def clear_cache(self) -> None:
        """generate-cache: the old cache is dropped, not reset (the next first call builds its own)."""
        if self.path.kind == "generate-cache":
            self.cache = None
        super().clear_cache()

    def exercise(self) -> dict[str, Any]:
        record = super().exercise()
        record.update({"generate_calls": self.generate_calls, "cache_built_by": self.cache_built_by})
        if self.path.kind == "generate-cache":
            record["shared_config_builds"] = self.configs_shared
            record["cache_config_keys"] = self.generating.cache_config_now()
        return record
