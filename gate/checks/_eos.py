"""Requests that end at the end-of-sequence token: chosen by the reference, judged at the stop.

Every other engine request gate sends asks for an exact length (`ignore_eos`), so a candidate that
stops somewhere else than the reference is never seen. These requests leave the engine's own stop on
and change nothing else (no logit bias, no stop string). The tiny seeded models rarely end a reply by
chance, so the prompts are chosen honestly: seeded prompts are sent to the REFERENCE alone, and those
whose reply stops at end-of-sequence are kept, with its reply as the answer to judge against.

The candidate must stop where the reference stops, with the same tokens up to and including the stop
and the same finish reason (`stop_problem`; a near-tie may move the stop, which the top-k rule decides).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from gate.core.evidence import MechanismReach
    from gate.protocols import EngineCompletion

EOS_CANDIDATES = 64
"""Seeded prompts the reference is asked to continue, to find those it ends at end-of-sequence."""
EOS_BUDGET = 64
"""Tokens each of them may decode: the examples' seed-0 tiny Llama ends 36 of 500 seeded 24-token prompts'
replies within 64 tokens on llama.cpp b11549 (and 1 of 64 of engine-llamacpp-prefix's openings within 32)."""
EOS_REQUESTS = 4
"""At most this many stopping prompts are sent to the candidate (together, then each continued)."""
MECHANISM = "eos-stop"


def eos_fields(flavor: str) -> dict[str, Any]:
    """The request fields that leave the engine's stop on (gate's adapter sets `ignore_eos` on llama.cpp, vLLM)."""
    return {"ignore_eos": False} if flavor in ("llama.cpp", "vllm") else {}


def stopped_at_eos(reply: EngineCompletion, budget: int) -> bool:
    """The reply ended at end-of-sequence within the budget (gate sends no stop strings)."""
    return reply.finish_reason == "stop" and len(reply.tokens) < budget


@dataclass
class EosSelection:
    tried: int
    budget: int
    chosen: list[tuple[list[int], EngineCompletion]] = field(default_factory=list)
    stopped: int = 0

    def words(self) -> str:
        if not self.chosen:
            return (
                f"no prompt of {self.tried} stopped at end-of-sequence within {self.budget} tokens on the "
                "reference: the end-of-sequence path was not reached"
            )
        lengths = ", ".join(str(len(reply.tokens)) for _, reply in self.chosen)
        return (
            f"{self.stopped} of {self.tried} seeded prompts stopped at end-of-sequence within {self.budget} tokens "
            f"on the reference; {len(self.chosen)} sent without ignore_eos (stopping after {lengths} tokens)"
        )


def select_eos_prompts(
    ask: Callable[[list[int], int, dict[str, Any]], EngineCompletion],
    prompts: Sequence[list[int]],
    fields: dict[str, Any],
    *,
    budget: int = EOS_BUDGET,
    keep: int = EOS_REQUESTS,
) -> EosSelection:
    """The first `keep` prompts the reference (`ask(prompt, budget, fields)`) ends at end-of-sequence."""
    out = EosSelection(tried=0, budget=budget)
    for prompt in prompts:
        reply = ask(list(prompt), budget, fields)
        out.tried += 1
        if stopped_at_eos(reply, budget):
            out.stopped += 1
            out.chosen.append((list(prompt), reply))
            if len(out.chosen) >= keep:
                break
    return out


class StopProblem(NamedTuple):
    """Where the candidate stopped otherwise than the reference."""

    words: str
    certain: bool
    """The replies agree up to where one ends: a failure whatever the tolerance (else the top-k rule decides)."""


def stop_problem(reference: EngineCompletion, candidate: EngineCompletion) -> StopProblem | None:
    """Where the candidate stops otherwise than the reference (None: the same stop, or an earlier divergence)."""
    want, got = list(reference.tokens), list(candidate.tokens)
    diverged = next((i for i in range(min(len(want), len(got))) if want[i] != got[i]), None)
    if diverged is not None:
        if diverged == len(want) - 1 and len(got) > len(want) - 1:
            return StopProblem(
                f"runs past the reference's end-of-sequence at token {diverged}: token {got[diverged]} where the "
                f"reference ended, {len(got)} tokens (finish_reason {candidate.finish_reason})",
                certain=False,
            )
        if diverged == len(got) - 1 and candidate.finish_reason == "stop":
            return StopProblem(
                f"stops early at token {diverged}: its reply ends there (finish_reason stop) where the reference's "
                f"goes on to {len(want)} tokens",
                certain=False,
            )
        return None
    if len(got) > len(want):
        words = (
            f"runs past the reference's end-of-sequence at token {len(want)}: {len(got)} tokens "
            f"(finish_reason {candidate.finish_reason}) where the reference's reply ended after {len(want)}"
        )
    elif len(got) < len(want):
        words = (
            f"stops early at token {len(got)}: {len(got)} tokens (finish_reason {candidate.finish_reason}) "
            f"where the reference's reply ended at end-of-sequence after {len(want)}"
        )
    elif candidate.finish_reason != reference.finish_reason:
        words = (
            f"the same {len(got)} tokens, but finish_reason {candidate.finish_reason} where the reference "
            f"says {reference.finish_reason} (its end-of-sequence at token {len(want) - 1})"
        )
    else:
        return None
    return StopProblem(words, certain=True)


def eos_reach(selection: EosSelection, sent: Sequence[Any]) -> MechanismReach:
    """The end-of-sequence mechanism for the workload's list: aimed at whenever prompts were tried,
    reached only when some the reference ended were sent to the candidate (with `extra`: the stop on)."""
    from gate.core.evidence import MechanismReach

    mine = [r for r in sent if getattr(r, "aim", None) == MECHANISM]
    ended = [r for r in mine if getattr(r, "extra", None) is not None and getattr(r, "reply", None) is not None]
    words = selection.words()
    if selection.chosen and not ended:
        words += "; none was sent to the candidate (the run stopped before)"
    elif ended:
        words += f"; {len(mine) - len(ended)} continued after their end-of-sequence"
    return MechanismReach(
        mechanism=MECHANISM,
        aimed=selection.tried > 0,
        lengths=[selection.budget],
        requests=len(mine),
        reached=bool(ended),
        evidence=words,
    )
