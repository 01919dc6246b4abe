"""kvpress presses as eviction candidates (optional extra `gate[kvpress]`, its own environment).

A press (NVIDIA kvpress) hooks every attention layer during a prefill and keeps only the K/V its score
ranks highest. Appends then read the compressed cache at their true positions, with the cache position
counted from the compressed cache, as the model counts it for kvpress's pipeline. kvpress pins
transformers<5.3: the path runs where `bash .ci/kvpress.sh` installed it.

`press_scope: request` holds the press around every forward of the request (as kvpress's pipeline
does), entered and left around each forward so sessions sharing the model never see each other's hooks.
"""

from __future__ import annotations

import copy
from contextlib import ExitStack, nullcontext
from typing import Any

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.faults import PRESS_FAULTS, Tamper
from gate.adapters.hf.options import Options
from gate.adapters.hf.paths import HFPath
from gate.adapters.hf.presets import LoadedModel
from gate.adapters.hf.sessions import CacheSession, PrefixStore
from gate.errors import AdapterUnavailable
from gate.protocols import EvictionPolicy, EvictionStep, Session, subject_call


def build_press(name: str, compression_ratio: float) -> Any:
    try:
        import kvpress
    except ImportError as err:
        raise AdapterUnavailable(
            "kvpress is not installed here: it is an optional extra that pins transformers<5.3, so it runs in "
            f"its own environment (bash .ci/kvpress.sh, or pip install 'gate[kvpress]'): {err}"
        ) from err
    kind, settings = {
        "streaming-llm": ("StreamingLLMPress", {"n_sink": 4}),
        "snapkv": ("SnapKVPress", {"window_size": 16}),
        "knorm": ("KnormPress", {}),
        "expected-attention": ("ExpectedAttentionPress", {"n_future_positions": 64, "n_sink": 4}),
        "tova": ("TOVAPress", {}),
        "random": ("RandomPress", {"seed": 0}),
    }[name]
    return getattr(kvpress, kind)(compression_ratio=compression_ratio, **settings)


def press_policy(press: Any, compression_ratio: float) -> EvictionPolicy:
    """What a kvpress 0.5.x press promises (read from its fields): StreamingLLM protects `n_sink`
    sinks and the rest of the budget as the recent window; SnapKV its last `window_size` keys;
    ExpectedAttention its `n_sink` sinks; TOVA the last token; Knorm nothing."""
    name = type(press).__name__
    sink = int(getattr(press, "n_sink", 0) or 0)
    if name == "StreamingLLMPress":
        return EvictionPolicy(name, "position", sink, None, True, None, compression_ratio, "prefill")
    if name == "SnapKVPress":
        return EvictionPolicy(name, "snapkv", 0, int(press.window_size), True, None, compression_ratio, "prefill")
    score = {"KnormPress": "knorm"}.get(name, name)
    return EvictionPolicy(name, score, sink, 0, name == "TOVAPress", None, compression_ratio, "prefill")


def watch_press(path: PressPath) -> None:
    """Wrap the press's `score` and `compress` so every compression is recorded into the session run
    under it (`press.gate_watching`): the kept entries are found by matching each kept key row to the
    prompt's (the press gathers them unchanged), the scores are the press's own."""
    press = path.press
    score, compress = press.score, press.compress
    captured: dict[str, torch.Tensor] = {}

    def scored(*args: Any, **kwargs: Any) -> torch.Tensor:
        out: torch.Tensor = score(*args, **kwargs)
        captured["scores"] = out.detach()
        return out

    def compressed(
        module: Any, hidden_states: Any, keys: torch.Tensor, values: Any, attentions: Any, kwargs: Any
    ) -> Any:
        captured.clear()
        k_out, v_out = compress(module, hidden_states, keys, values, attentions, kwargs)
        log = getattr(press, "gate_watching", None)
        if log is not None:
            b, h, n, _ = keys.shape
            pool = torch.arange(n, device="cpu").expand(b, h, n)
            kept_from = (k_out[:, :, :, None, :] == keys[:, :, None, :, :]).all(-1).float().argmax(-1).cpu()
            scores = captured.get("scores")
            log.append(
                EvictionStep(
                    int(module.layer_idx),
                    n,
                    pool,
                    kept_from,
                    pool.gather(2, kept_from),
                    None if scores is None else scores.float().cpu(),
                    keys.detach().float().cpu(),
                )
            )
        return k_out, v_out

    press.score, press.compress = scored, compressed


RANK_SIGN = "evict-rank-sign"
"""The press path's planted eviction fault: the press keeps the lowest of its own score."""


class PressSession(CacheSession):
    """A session through a press: counts the cache position from the compressed cache, as the model
    does when kvpress's pipeline passes none (the true one would mask a multi-token append over slots
    the compressed cache does not hold). Positions (RoPE) stay the true ones."""

    def __init__(self, path: PressPath, batch_size: int) -> None:
        super().__init__(path, batch_size)
        self.press = path.press
        self.pressed_forwards = 0
        self.evictions: list[EvictionStep] | None = None
        """Where the press's compressions are recorded once watched (gate.protocols.EvictionReport)."""

    # ---- gate.protocols.EvictionReport: what the press promises and what it kept -------------

    def eviction_policy(self) -> EvictionPolicy:
        return press_policy(self.press, self.path.options.compression_ratio)

    def watch_evictions(self) -> list[EvictionStep]:
        if self.evictions is None:
            self.evictions = []
        return self.evictions

    def _cache_position(self, phase: str, positions: torch.Tensor) -> torch.Tensor | None:
        planted = self.tamper.cache_position(phase, positions)
        if planted is not None or self.cache is None:
            return planted
        seen = compat.seq_length(self.cache)  # what the model counts from when given none
        return torch.arange(seen, seen + positions.shape[1], device=self.device)

    # ---- gate.protocols.CacheCropping: how many K/V pairs the press kept ----------------------

    def cache_length(self) -> int:
        """K/V pairs the cache holds: the fewest any layer kept (a press chooses per layer)."""
        return min(compat.kept_tokens(self.cache), default=0) if self.cache is not None else 0

    def crop(self, length: int) -> None:
        """Keep only the first `length` pairs of every layer; the position count goes on, as after a press."""
        if self.cache is not None:
            compat.drop_last(self.cache, self.cache_length() - length, lossy=True)


class PressPath(HFPath):
    """A DynamicCache compressed by a press."""

    def __init__(self, loaded: LoadedModel, options: Options, *, device: str, dtype: str, seed: int) -> None:
        super().__init__(loaded, options, device=device, dtype=dtype, seed=seed)
        assert options.press is not None
        self.press = build_press(options.press, options.compression_ratio)
        watch_press(self)
        if not compat.cache_api(self.model).takes_cache_position:
            raise AdapterUnavailable(
                f"kvpress hooks read `cache_position`, which transformers {compat.cache_api(self.model).version} "
                "no longer passes to attention layers (removed in 5.4); kvpress supports transformers<5.3"
            )

    def libraries(self) -> tuple[str, ...]:
        return (*super().libraries(), "kvpress")

    def extra_identity(self) -> dict[str, Any]:
        return {name: getattr(self.options, name) for name in ("press", "compression_ratio", "press_scope")}

    def new_session(self, batch_size: int) -> Session:
        return PressSession(self, batch_size)

    def faults(self) -> tuple[str, ...]:
        return (*super().faults(), *PRESS_FAULTS, RANK_SIGN)

    def with_fault(self, fault: str) -> HFPath:
        if fault != RANK_SIGN and fault not in PRESS_FAULTS:
            return super().with_fault(fault)
        faulty = copy.copy(self)
        faulty.fault, faulty.store = fault, PrefixStore()
        faulty.tamper = Tamper() if fault == RANK_SIGN else PRESS_FAULTS[fault]()
        faulty.name = f"{self.name}+{fault}"
        if fault == RANK_SIGN:  # a fresh press whose score is negated before the reader sees it
            assert self.options.press is not None
            faulty.press = build_press(self.options.press, self.options.compression_ratio)
            score = faulty.press.score
            faulty.press.score = lambda *args, **kwargs: -score(*args, **kwargs)
            watch_press(faulty)
        return faulty

    def around_forward(self, session: CacheSession, phase: str) -> Any:
        """The press around a request's first prefill, or (scope `request`) around every forward; a
        model it cannot hook is a crash of the subject."""
        if self.options.press_scope == "prefill" and not (phase == "prefill" and session.pos == 0):
            return nullcontext()
        pressed = ExitStack()
        self.press.gate_watching = session.evictions if isinstance(session, PressSession) else None
        with subject_call(f"{type(self.press).__name__}.__call__", length=session.pos):
            pressed.enter_context(self.press(self.model))
        if isinstance(session, PressSession):
            session.pressed_forwards += 1
        return pressed

    def extra_exercise(self, session: CacheSession) -> dict[str, Any]:
        cache = session.cache
        if cache is None:
            return {}
        return {
            **self.extra_identity(),
            "pressed_forwards": session.pressed_forwards if isinstance(session, PressSession) else 0,
            "kept_tokens": compat.kept_tokens(cache),
            "evicted_tokens": compat.evicted_tokens(cache, session.pos),
        }
