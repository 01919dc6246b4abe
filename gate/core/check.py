"""The check API: a decorated function from (context, params) to an Outcome.

    @check("prefix-sweep", params=PrefixSweepParams)
    def prefix_sweep(ctx: CheckContext, params: PrefixSweepParams) -> Outcome: ...

The runner turns the Outcome into a `CheckResult` and runs the negative controls the policy names.
A control sets `ctx.stop_at_first_failure`: the check walks its schedule in the positive run's
order (probing first where the fault `ctx.control` is likely to show) and returns at the first
failing item, with `detected_at` naming it. `ctx.cache` is shared by every check of one run and its
controls: memoise what does not depend on the candidate there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import torch

    from gate.core.manifest import Manifest
    from gate.protocols import DecodePath


class Params(BaseModel):
    """Base for check parameters: unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


P = TypeVar("P", bound=Params)
T = TypeVar("T")


class Memo(Protocol):
    """What checks ask of the run-scoped cache: a value by key, computed once."""

    def get(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T: ...


class NoMemo:
    """A memo that remembers nothing (contexts built outside a run)."""

    def get(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        return compute()


Length = Annotated[int, Field(ge=1, le=1_000_000)]
"""A token count or prompt length in check params: positive and bounded (claimed work is bounded)."""
Lengths = Annotated[list[Length], Field(min_length=1, max_length=256)]
"""A list of lengths in check params: at most 256 of them."""
PrefixLengths = Annotated[list[Annotated[int, Field(ge=0, le=1_000_000)]], Field(min_length=1, max_length=256)]
"""Prefix lengths in check params: 0 (no prefix) allowed, never negative, at most 256 of them."""


@dataclass
class CheckContext:
    """What a check receives: both paths, the manifest, and run settings."""

    manifest: Manifest
    reference: DecodePath
    candidate: DecodePath
    seed: int
    device: str
    dtype: str
    control: str | None = None
    """Name of the fault applied to `candidate`, when this is a negative-control run."""
    log: Callable[[str], None] = lambda _msg: None
    """Progress messages (shown on a terminal, plain lines in CI)."""
    progress: Callable[[str, int, int], None] = lambda _task, _done, _total: None
    """Progress inside a long step: (task, done, total), e.g. ("lengths swept", 40, 96). The CLI
    shows a bar on a terminal and a plain line every few seconds in CI."""
    stop_at_first_failure: bool = False
    """Control mode: return at the first failing length, step or batch (a positive run covers all)."""
    cache: Memo = field(default_factory=lambda: NoMemo())
    """Run-scoped memo shared by the checks of one run and their controls: the runner passes a
    gate.engine.run_cache.RunCache; a context built by hand computes everything (NoMemo)."""


@dataclass
class Outcome:
    """What a check returns. `observation` is what the check judged (e.g. the candidate's logits),
    used by the control engine to confirm that a fault really changed the computation."""

    status: Literal["pass", "fail", "warn", "skip", "unproven"]
    """unproven: the check ran but could not cover what the policy requires (e.g. lengths the path
    cannot reach); the message says what was wanted and what was reachable."""
    message: str
    metrics: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    exercise: dict[str, Any] = field(default_factory=dict)
    """Proof the candidate path ran. A pass with an empty `exercise` is turned into an error."""
    diagnosis: dict[str, Any] | None = None
    detected_at: int | None = None
    """Smallest prefix length (or other index) at which the check failed."""
    observation: torch.Tensor | None = None
    observation_in_run_order: bool = False
    """`observation` is flat and laid out in the order a control walks the check's schedule, so a
    control that stopped early is compared on the prefix it observed."""
    lacking: dict[str, str] = field(default_factory=dict)
    """Assertions the check could not make on this candidate -> the capability it lacks, in words.
    With status `unproven` and nothing else wrong, the policy rule's `missing_capability` decides
    what they mean for the gate."""
    tolerated_change: float | None = None
    """How far the check lets the candidate's `observation` move from the reference's and still
    pass (e.g. the dtype-aware tolerance band): a faulted run that moved it no further and passed is
    unobservable, not a lack of power. None: any change the check passes counts as missed."""
    covered_by: dict[str, str] = field(default_factory=dict)
    """For a check that cannot run on this candidate (status `skip`), or one that ran only through an
    optional capability: the checks of the same plan that observe its rule at model level -> what
    each observes. The runner holds it unproven-not-applicable (a warning, never a pass) while every
    one of them passed with its power shown, and unproven as the policy says otherwise."""
    underpowered: dict[str, str] = field(default_factory=dict)
    """Faults (control names) whose effect at this run's settings is below the check's power -> the
    settings that would make it observable ("raise max_samples to 5200"). A control of such a fault
    that the check passes is *unobservable*, never *missed*."""
    absent: str | None = None
    """For a check that cannot run on this candidate (status `skip`): what the path lacks (e.g.
    `cross-request-cache`). Where the policy rule's `not_applicable.without` names it, the check is
    not-applicable (no warning); otherwise the skip is judged as before."""
    rounding_spread: float | None = None
    """How far a correct path's own rounding can move `observation`: a faulted run that moves it no
    further failed through noise (unobservable, never power). None: failures are judged beyond rounding."""


@dataclass(frozen=True)
class CheckSpec(Generic[P]):
    """A registered check: its name, its params model and its function."""

    name: str
    params: type[P]
    fn: Callable[[CheckContext, P], Outcome]
    summary: str = ""

    def __call__(self, ctx: CheckContext, params: P) -> Outcome:
        return self.fn(ctx, params)


def check(name: str, *, params: type[P]) -> Callable[[Callable[[CheckContext, P], Outcome]], CheckSpec[P]]:
    """Register a function as a gate check (expose it through the `gate.checks` entry point)."""

    def wrap(fn: Callable[[CheckContext, P], Outcome]) -> CheckSpec[P]:
        doc = (fn.__doc__ or "").strip().splitlines()
        return CheckSpec(name=name, params=params, fn=fn, summary=doc[0] if doc else "")

    return wrap
