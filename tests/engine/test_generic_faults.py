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


SESSION_FAULTS = [g for g in GENERIC_FAULTS if g.session is not None and g.name != "block-truncated"]


@pytest.mark.parametrize("fault", SESSION_FAULTS, ids=lambda g: g.name)
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


class InertOwnFault:
    """The reference static path, whose own `off-by-one-pos` plants nothing (as an adapter's fault that
    cannot show on its architecture would): the control is unobservable at run time."""

    def __init__(self, inner: DecodePath) -> None:
        self.__dict__["inner"] = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.__dict__["inner"], name)

    def faults(self) -> tuple[str, ...]:
        return ("off-by-one-pos",)

    def with_fault(self, fault: str) -> DecodePath:
        return self.__dict__["inner"]  # type: ignore[no-any-return]


def test_an_own_fault_that_cannot_show_at_run_time_gets_the_generic_stand_in() -> None:
    from gate.checks.greedy_parity import GreedyParityParams, greedy_parity
    from gate.core.policy import ControlSpec
    from gate.core.result import ControlOutcome
    from gate.engine.controls import run_control
    from tests.support import reference

    candidate = InertOwnFault(build("static"))
    ctx = reference.ctx(build("full"), candidate)
    params = GreedyParityParams(tokens=[8], prompt_lengths=[7])
    clean = greedy_parity(ctx, params)
    assert clean.status == "pass"
    result = run_control(greedy_parity, ctx, params, clean, ControlSpec(fault="off-by-one-pos"))
    assert result.kind == "generic" and result.applied == "token-skipped"
    assert result.outcome == ControlOutcome.detected
    assert result.stand_in is not None and "unobservable at run time" in result.stand_in
    assert "generic token-skipped stands in" in result.message


def test_a_check_whose_controls_all_could_not_show_is_unproven_not_failed() -> None:
    from gate.core.result import ControlOutcome, ControlResult
    from gate.engine.controls import power_verdict, unproven_verdict

    controls = [
        ControlResult(fault="a", kind="generic", applied="x", outcome=ControlOutcome.unobservable),
        ControlResult(fault="b", outcome=ControlOutcome.unsupported),
    ]
    assert power_verdict("toy", controls) is None
    reason = unproven_verdict("toy", controls)
    assert reason is not None and "could show anything" in reason
    missed = [*controls, ControlResult(fault="c", kind="generic", applied="y", outcome=ControlOutcome.missed)]
    assert (
        unproven_verdict("toy", missed) is None
        and power_verdict("toy", missed) == "check toy has no power against fault c"
    )
