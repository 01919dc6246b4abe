"""`path: speculative` for the reference adapter: the reference decoder as target, a smaller draft.

candidate: {adapter: reference, options: {path: speculative, speculative: {k: 2, draft: layer-skip}}}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from gate.adapters.reference.options import SpeculativeOptions

if TYPE_CHECKING:
    from gate.adapters.reference.options import Options
    from gate.models.reference import Transformer
    from gate.protocols import DecodePath
    from gate.speculative.path import SpeculativeDecodePath


def _draft_model(
    target: Transformer, spec: SpeculativeOptions, *, device: str, dtype: str, seed: int
) -> tuple[Transformer, str]:
    import copy
    from dataclasses import replace

    from torch import nn

    from gate.models.reference import ModelConfig, build_model
    from gate.tensors import DTYPES

    config = target.config
    if spec.draft == "layer-skip":
        keep = spec.draft_layers or max(1, config.n_layers // 2)
        if keep > config.n_layers:
            raise ValueError(f"draft_layers {keep} exceeds the target's {config.n_layers} layers")
        draft = copy.deepcopy(target)
        draft.layers = nn.ModuleList(list(draft.layers)[:keep])
        draft.config = replace(config, n_layers=keep)
        return draft, f"layer-skip {keep}/{config.n_layers}"
    draft_seed = seed + 1 if spec.draft_seed is None else spec.draft_seed
    cfg = ModelConfig.from_preset(
        spec.draft, n_layers=spec.draft_layers, vocab_size=config.vocab_size, max_len=config.max_len
    )
    return build_model(cfg, seed=draft_seed, device=device, dtype=DTYPES[dtype]), f"{spec.draft} seed {draft_seed}"


def build_speculative(
    model: Transformer, options: Options, *, device: str, dtype: str, seed: int
) -> SpeculativeDecodePath:
    """Target: the built reference model (a full path). Draft: as `options.speculative` says."""
    from gate.adapters.reference.paths import ReferencePath, build_full
    from gate.speculative.path import SpeculativeDecodePath

    spec = options.speculative or SpeculativeOptions()
    target = build_full(model, options, device=device, dtype=dtype, seed=seed)
    draft_model, kind = _draft_model(model, spec, device=device, dtype=dtype, seed=seed)
    draft = ReferencePath(name=f"reference:draft[{kind}]", model=draft_model, dtype=dtype, device=device, seed=seed)
    # ReferencePath exposes max_len/uses_cache as read-only properties; the protocol's are plain
    path = SpeculativeDecodePath(cast("DecodePath", target), cast("DecodePath", draft), spec.k, draft_kind=kind)
    return path.with_fault(spec.fault) if spec.fault else path
