"""Proposal-and-verify paths: assisted generation with a draft model, and prompt-lookup decoding.

`sample()` runs transformers' own assisted generation, one prompt at a time, its rounds read from
outside the model (`verify_log`, `rounds`). Sessions verify teacher-forced: after each call's tokens
the proposer drafts k tokens and the target scores tokens and drafts in one forward; drafts the next
given tokens confirm are served from that pass, the rest are cropped. Fault `accept-all` makes the
target's output rank every drafted token first.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from gate.adapters.hf import compat, presets
from gate.adapters.hf.options import Options
from gate.adapters.hf.paths import HFPath
from gate.adapters.hf.presets import LoadedModel
from gate.adapters.hf.sessions import CacheSession
from gate.errors import AdapterUnavailable, UnknownFault
from gate.protocols import Session, subject_call
from gate.speculative.sampler import SpecStats, SpeculativeSample, warp

SPEC_FAULTS = ("accept-all",)


def rounds(calls: list[tuple[int, int]], prompt_len: int, final_len: int, k: int) -> SpecStats:
    """Per-round accounting from the target's verify passes, `calls`: (cache length before the pass,
    input length) per target forward. Round r scores the uncached tokens plus k_r drafts; after it the
    sequence has grown by m_r + 1 (m_r accepted drafts and one token from the target: a correction, or
    a bonus when all k_r were accepted), and the next pass starts at length L_{r+1} - 1."""
    stats = SpecStats(k=k, sequences=1, full_accepts=0)
    lengths = [prompt_len] + [start + 1 for start, _ in calls[1:]] + [final_len]  # L_r before each round
    for r, (start, n_input) in enumerate(calls):
        drafted = max(n_input - (lengths[r] - start), 0)  # beyond the uncached tokens
        grown = lengths[r + 1] - lengths[r]
        accepted = min(max(grown - 1, 0), drafted)
        stats.target_calls += 1
        stats.target_passes += 1
        stats.proposed += drafted
        stats.accepted += accepted
        stats.emitted += grown
        if drafted and accepted == drafted:
            # every round of transformers' loop ends with one target token: after k acceptances, a bonus
            stats.full_accepts = (stats.full_accepts or 0) + 1
            stats.bonus += 1
        elif drafted:
            stats.rejections += 1
    return stats


@contextmanager
def verify_log(model: Any, calls: list[tuple[int, int]], accept_all: bool, prompt_len: int) -> Iterator[None]:
    """Record (cache length, input length) of each target pass; with accept_all, make each drafted
    token the target's top choice in that pass's output (verification removed from outside)."""
    api = compat.cache_api(model)

    def pre(_module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        ids: torch.Tensor = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        cache = kwargs.get(api.cache_kwarg)
        calls.append((compat.seq_length(cache) if cache is not None else 0, int(ids.shape[1])))
        kwargs_seen.append(ids)

    def post(_module: Any, _args: Any, _kwargs: dict[str, Any], output: Any) -> Any:
        ids = kwargs_seen.pop()
        drafted = calls[-1][1] - (prompt_len if len(calls) == 1 else 1)  # the pass's input beyond its new tokens
        if accept_all and drafted > 0:
            # output rows are the last input rows; row -(drafted + 1) + j predicts ids[:, -drafted + j]
            rows = output.logits[:, -(drafted + 1) : -1]
            rows.scatter_(-1, ids[:, -drafted:, None], rows.amax(-1, keepdim=True) + 100.0)
        return output

    kwargs_seen: list[torch.Tensor] = []
    with model.register_forward_pre_hook(pre, with_kwargs=True), model.register_forward_hook(post, with_kwargs=True):
        yield


class HFSpeculativePath(HFPath):
    """assisted / prompt-lookup: a target model, and a draft model or an n-gram proposer."""

    def __init__(self, loaded: LoadedModel, options: Options, *, device: str, dtype: str, seed: int) -> None:
        super().__init__(loaded, options, device=device, dtype=dtype, seed=seed)
        self.draft: Any | None = None
        if self.kind == "assisted":
            assert options.draft is not None
            if options.draft == options.model and options.is_preset:
                self.draft = self.model  # the same weights; draft_layers may truncate a copy below
                self.draft_identity = dict(loaded.identity)
            else:
                draft = presets.load(options.draft, options.attn_implementation, device=device, dtype=dtype, seed=seed)
                self.draft, self.draft_identity = draft.model, draft.identity
            if options.draft_layers is not None:
                self.draft = presets.truncated_copy(self.draft, options.draft_layers)
                self.draft_identity = {
                    **self.draft_identity,
                    "draft_layers": options.draft_layers,
                    "weights_sha256": presets.sha256_tensors(self.draft.state_dict()),
                }
            self.num_draft_tokens = options.num_assistant_tokens
            if options.ensemble_weight is not None and not compat.cache_api(self.model).ensemble_verification:
                raise AdapterUnavailable(
                    f"transformers {compat.cache_api(self.model).version} has no static ensemble verification "
                    "(GenerationConfig.assistant_ensemble_weight: from 5.14; not in 5.2-5.13)"
                )
        else:
            self.num_draft_tokens = options.prompt_lookup_num_tokens
        self.accept_all = False

    def identity(self) -> dict[str, Any]:
        if self.kind == "assisted":
            extra = {"draft": self.draft_identity, "ensemble_weight": self.options.ensemble_weight}
        else:
            extra = {
                "max_matching_ngram_size": self.options.max_matching_ngram_size,
                "eos_token_id": self.eos_token_id(),
            }
        return {**super().identity(), "num_draft_tokens": self.num_draft_tokens, **extra}

    def new_session(self, batch_size: int) -> Session:
        return VerifySession(self, batch_size)

    def faults(self) -> tuple[str, ...]:
        return SPEC_FAULTS

    def with_fault(self, fault: str) -> HFSpeculativePath:
        if fault not in SPEC_FAULTS:
            raise UnknownFault(f"path {self.name} cannot apply fault {fault!r}; it offers {', '.join(SPEC_FAULTS)}")
        faulty = copy.copy(self)
        faulty.fault = fault
        faulty.accept_all = True
        faulty.name = f"{self.name}+{fault}"
        return faulty

    # ---- gate.protocols.SpeculativePath ---------------------------------------------------------------

    def sample(
        self, prompts: torch.Tensor, n_tokens: int, *, temperature: float, top_k: int | None, generator: torch.Generator
    ) -> SpeculativeSample:
        """Continue each prompt [B, T0] by n_tokens through transformers' assisted generation."""
        stats = SpecStats(k=self.num_draft_tokens)
        rows = []
        produced = []
        for row in prompts.to(self.device):
            with torch.random.fork_rng(devices=[torch.device(self.device)] if "cuda" in str(self.device) else []):
                torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)))
                tokens, round_stats, made = self._generate_one(row[None], n_tokens, temperature, top_k)
            rows.append(tokens)
            produced.append(made)
            stats = stats.add(round_stats)
        stopped = self.eos_token_id() is not None
        if stopped:
            stats.eos_stops = sum(made < n_tokens for made in produced)
        return SpeculativeSample(
            tokens=torch.cat(rows).to(prompts.device), stats=stats, produced=produced if stopped else None
        )

    def target_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> torch.Tensor:
        return warp(self.full_logits(contexts)[:, -1], temperature, top_k)

    def draft_next_token_probs(self, contexts: torch.Tensor, *, temperature: float, top_k: int | None) -> torch.Tensor:
        if self.draft is None:
            raise NotImplementedError("prompt lookup proposes copied n-grams: it has no draft distribution")
        with torch.no_grad():
            logits = compat.forward(self.draft, contexts.to(self.device), None, None).logits.float()
        return warp(logits[:, -1], temperature, top_k)

    def eos_token_id(self) -> int | None:
        """prompt-lookup: the EOS token generate is handed (option `eos_token`)."""
        choice = self.options.eos_token
        if self.kind != "prompt-lookup" or choice == "none":
            return None
        if choice == "model":
            value = getattr(self.model.config.get_text_config(decoder=True), "eos_token_id", None)
            value = value[0] if isinstance(value, list) and value else value
            if not isinstance(value, int):
                raise AdapterUnavailable(f"{self.loaded.name} declares no eos_token_id: set `eos_token` to a token id")
            return value
        if not 0 <= int(choice) < self.vocab_size:
            raise AdapterUnavailable(f"eos_token {choice} is outside the vocabulary of {self.vocab_size} tokens")
        return int(choice)

    def _generate_one(
        self, prompt: torch.Tensor, n_tokens: int, temperature: float, top_k: int | None
    ) -> tuple[torch.Tensor, SpecStats, int]:
        """Continue `prompt` [1, T0] by n_tokens: the tokens [1, n_tokens], the rounds, and how many
        tokens generate produced (up to its EOS token, included; the row is filled with that token
        after it). A continuation shorter than asked without the EOS is filled with -1, a token no model emits."""
        eos = self.eos_token_id()
        sampling = temperature > 0
        config = compat.transformers.GenerationConfig(
            do_sample=sampling,
            temperature=temperature if sampling else None,
            top_k=top_k if sampling else None,
            max_new_tokens=n_tokens,
            eos_token_id=eos,
            pad_token_id=0,
        )
        kwargs: dict[str, Any] = {}
        if self.draft is not None:
            draft_config = self.draft.generation_config
            draft_config.num_assistant_tokens = self.num_draft_tokens
            draft_config.num_assistant_tokens_schedule = "constant"
            draft_config.assistant_confidence_threshold = 0.0
            kwargs["assistant_model"] = self.draft
            if self.options.ensemble_weight is not None:
                config.assistant_ensemble_weight = self.options.ensemble_weight
        else:
            config.prompt_lookup_num_tokens = self.num_draft_tokens
            # 5.2-5.12's prompt-lookup generator crashes without an EOS token: a finding about the release
            config.max_matching_ngram_size = self.options.max_matching_ngram_size
        calls: list[tuple[int, int]] = []
        draft_passes = [0]

        def count(*_args: Any) -> None:
            draft_passes[0] += 1

        with (
            torch.no_grad(),
            verify_log(self.model, calls, self.accept_all, prompt.shape[1]),
            self.draft.register_forward_hook(count)
            if self.draft is not None and self.draft is not self.model
            else nullcontext(),
            subject_call("generate(assistant)", length=int(prompt.shape[1]), new_tokens=n_tokens),
        ):
            out = self.model.generate(
                prompt, attention_mask=torch.ones_like(prompt), generation_config=config, **kwargs
            )
        sequences = out if isinstance(out, torch.Tensor) else out.sequences
        stats = rounds(calls, prompt.shape[1], int(sequences.shape[1]), self.num_draft_tokens)
        stats.draft_passes = stats.draft_calls = draft_passes[0]
        got = sequences[:, prompt.shape[1] : prompt.shape[1] + n_tokens]
        produced = int(got.shape[1])
        if produced < n_tokens:
            stopped = eos is not None and produced > 0 and int(got[0, -1]) == eos
            fill = got.new_full((1, n_tokens - produced), eos if stopped and eos is not None else -1)
            got = torch.cat([got, fill], 1)
            produced = produced if stopped else n_tokens
        return got, stats, produced


@dataclass
class Pending:
    """Drafts already in the target's cache after a verify pass, with the rows that scored them."""

    tokens: torch.Tensor
    """[B, j] drafted tokens not yet confirmed by a given token."""
    logits: torch.Tensor
    """[B, j, V] the target's logits at those drafts' positions."""


class VerifySession(CacheSession):
    """Teacher-forced proposal and verification against a DynamicCache."""

    def __init__(self, path: HFSpeculativePath, batch_size: int) -> None:
        super().__init__(path, batch_size)
        self.spec = path
        self.history = torch.empty(batch_size, 0, dtype=torch.long, device=self.device)
        self.pending: Pending | None = None
        self.draft_cache: Any | None = None
        names = ("draft_forward_passes", "verify_passes", "proposed_tokens", "accepted_tokens", "rolled_back_tokens")
        self.counts = dict.fromkeys((*names, "rollbacks"), 0)

    def clear_cache(self) -> None:
        super().clear_cache()
        self.history = self.history[:, :0]
        self.pending = None
        self.draft_cache = None

    def _step(self, phase: str, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.device)
        if tokens.shape[1] == 0:
            return torch.empty(self.batch_size, 0, self.path.vocab_size)
        if self.cache is None:
            self.cache = compat.dynamic_cache(self.model.config)
        if phase == "prefill" and self.pending is None and compat.seq_length(self.cache) == 0:
            logits = self._verify(tokens, propose=False)
            self.history = tokens
            return logits
        rows = []
        i, n = 0, tokens.shape[1]
        while i < n and self.pending is not None and bool((self.pending.tokens[:, :1] == tokens[:, i : i + 1]).all()):
            rows.append(self.pending.logits[:, :1])  # a draft confirmed: already scored, already cached
            self.counts["accepted_tokens"] += 1
            rest = self.pending.tokens.shape[1] - 1
            self.pending = Pending(self.pending.tokens[:, 1:], self.pending.logits[:, 1:]) if rest else None
            self.pos += 1
            i += 1
        if i < n:
            self._roll_back()
            rows.append(self._verify(tokens[:, i:], propose=True))
        self.history = torch.cat([self.history, tokens], 1)
        return torch.cat(rows, 1)

    def _roll_back(self) -> None:
        if self.pending is None:
            return
        dropped = self.pending.tokens.shape[1]
        compat.drop_last(self.cache, dropped)
        self.counts["rolled_back_tokens"] += dropped
        self.counts["rollbacks"] += 1
        self.pending = None

    def _verify(self, tokens: torch.Tensor, *, propose: bool) -> torch.Tensor:
        """Score `tokens` [B, n] plus k drafts in one target pass; keep the drafts pending."""
        drafts = self._propose(torch.cat([self.history, tokens], 1)) if propose else tokens[:, :0]
        n, k = tokens.shape[1], drafts.shape[1]
        positions = torch.arange(self.pos, self.pos + n + k, device=self.device).expand(self.batch_size, -1)
        with torch.no_grad():
            logits = compat.forward(self.model, torch.cat([tokens, drafts], 1), self.cache, positions).logits.float()
        if k and self.spec.accept_all:
            logits = logits.clone()
            logits[:, n - 1 : n - 1 + k].scatter_(-1, drafts[..., None], logits.amax(-1, keepdim=True) + 100.0)
        self.forward_calls += 1
        self.cached_steps += int(self.pos > 0)
        self.counts["verify_passes"] += int(k > 0)
        self.counts["proposed_tokens"] += k * self.batch_size
        self.pos += n
        self.pending = Pending(drafts, logits[:, n : n + k]) if k else None
        scored: torch.Tensor = logits[:, :n]
        return scored

    def _propose(self, history: torch.Tensor) -> torch.Tensor:
        """k drafted tokens continuing `history` [B, T] (the same k for every row)."""
        k = self.spec.num_draft_tokens
        if self.spec.draft is None:
            return _prompt_lookup(history, k, self.spec.options.max_matching_ngram_size)
        draft = self.spec.draft
        if self.draft_cache is None:
            self.draft_cache = compat.dynamic_cache(draft.config)
        start = compat.seq_length(self.draft_cache)
        feed = history[:, start:]
        proposed = []
        with torch.no_grad():
            for _ in range(k):
                positions = torch.arange(start, start + feed.shape[1], device=self.device).expand(self.batch_size, -1)
                logits = compat.forward(draft, feed, self.draft_cache, positions).logits[:, -1]
                self.counts["draft_forward_passes"] += 1
                start += feed.shape[1]
                feed = logits.argmax(-1, keepdim=True)
                proposed.append(feed)
        compat.drop_last(self.draft_cache, k - 1)  # keep the draft cache at the committed history
        return torch.cat(proposed, 1)

    def exercise(self) -> dict[str, Any]:
        record = super().exercise()
        record["cache_len_with_drafts"] = record["cache_len"]
        record["cache_len"] = self.pos  # committed tokens; pending drafts are not the request's
        record.update(self.counts)
        record["num_draft_tokens"] = self.spec.num_draft_tokens
        record["proposer"] = "draft-model" if self.spec.draft is not None else "prompt-lookup"
        return record


def _prompt_lookup(history: torch.Tensor, k: int, max_ngram: int) -> torch.Tensor:
    """transformers' prompt-lookup rule per row: the tokens that followed the latest earlier
    occurrence of the longest matching trailing n-gram; rows agree on the shortest proposal."""
    found: list[list[int]] = []
    for row in history.tolist():
        matches = (  # longest n-gram first, latest occurrence first; what follows a match is never empty
            row[start + size : start + size + k]
            for size in range(min(max_ngram, len(row) - 1), 0, -1)
            for start in range(len(row) - size - 1, -1, -1)
            if row[start : start + size] == row[-size:]
        )
        found.append(next(matches, []))
    length = min(len(f) for f in found)
    return torch.tensor([f[:length] for f in found], dtype=torch.long, device=history.device).reshape(
        len(found), length
    )
