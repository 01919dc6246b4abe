"""Protocol-level faults (gate.engine.generic_faults): each changes what a session returns, the
adapter's own fault wins when it has one, and a fault that cannot apply says why."""

from __future__ import annotations

import pytest
import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.engine.generic_faults import GENERIC_FAULTS, FaultedPath, Planted, plant
from gate.protocols import DecodePath


def build(path: str) -> DecodePath:
    path_ = ReferenceAdapter().build(
        Options(preset="tiny", path=path, max_len=96), device="cpu", dtype="float32", seed=0
    )
    assert isinstance(path_, DecodePath)
    return path_


class Reloadable:
    """The reference static path plus a weight reload, as an adapter that can reload offers it."""

    def __init__(self, inner: DecodePath) -> None:
        self.__dict__["inner"] = inner
        self.__dict__["built"] = {k: v.clone() for k, v in inner.model.state_dict().items()}  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.__dict__["inner"], name)

    def reload_weights(self, version: int) -> None:
        state = {k: v + 0.05 * version for k, v in self.__dict__["built"].items()}
        self.__dict__["inner"].model.load_state_dict(state)


def sweep(path: DecodePath, tokens: torch.Tensor) -> torch.Tensor:
    """Prefill 20 tokens, append 5 as a chunk, then 1; reset; the same again: every row read."""
    session = path.new_session(tokens.shape[0])
    rows = []
    for _ in range(2):
        rows += [session.prefill(tokens[:, :20]), session.append(tokens[:, 20:25]), session.append(tokens[:, 25:26])]
        session.reset()
    return torch.cat(rows, dim=1)


@pytest.mark.parametrize("fault", [g for g in GENERIC_FAULTS if g.name != "block-truncated"], ids=lambda g: g.name)
def test_each_generic_fault_changes_what_sessions_return(fault: object) -> None:
    clean = build("static")
    path = Reloadable(clean) if getattr(fault, "name", "") == "weights-changed" else clean
    tokens = torch.randint(0, clean.vocab_size, (2, 26), generator=torch.Generator().manual_seed(0))
    faulty = FaultedPath(path, fault)  # type: ignore[arg-type]
    assert not torch.equal(sweep(path, tokens), sweep(faulty, tokens))  # type: ignore[arg-type]
    assert torch.equal(sweep(clean, tokens), sweep(clean, tokens))  # the clean path is left as built


def test_the_adapters_own_fault_is_preferred() -> None:
    planted = plant(build("static"), "prefix-sweep", "cross-request-handle")
    assert isinstance(planted, Planted) and planted.kind == "adapter"


def test_a_generic_fault_stands_in_only_where_it_can_prove_power() -> None:
    class NoFaults:
        def __init__(self, inner: DecodePath) -> None:
            self.__dict__["inner"] = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.__dict__["inner"], name)

        def faults(self) -> tuple[str, ...]:
            return ()

    path = NoFaults(build("static"))
    planted = plant(path, "prefix-sweep", "cross-request-handle")  # type: ignore[arg-type]
    assert isinstance(planted, Planted) and planted.kind == "generic" and planted.applied == "handle-swap"
    assert "proves only prefix-sweep" in str(plant(path, "mask-oracle", "cross-request-handle"))  # type: ignore[arg-type]
    assert "no generic fault stands in" in str(plant(path, "prefix-sweep", "mask-origin-reset"))  # type: ignore[arg-type]
    assert "cannot reload weights" in str(plant(path, "prefix-sweep", "stale-weights"))  # type: ignore[arg-type]
    assert "do not expose their cache length" in str(plant(path, "prefix-sweep", "truncated-last-block"))  # type: ignore[arg-type]
    recompute = NoFaults(build("full"))
    assert "recomputes" in str(plant(recompute, "prefix-sweep", "cross-request-handle"))  # type: ignore[arg-type]
