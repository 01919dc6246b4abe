"""The evidence record of engine-concurrent-conversations (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gate.core.evidence import EvidenceRecord, MechanismReach, _Record


class ConversationRequest(_Record):
    """One request of the concurrent workload, compared with the reference's answer to its prompt alone."""

    id: int
    """The request's number, in the order the rounds sent them."""
    conversation: int
    """Its conversation."""
    tenant: int
    """Its tenant (the system prefix its conversation opens with; -1: none, a private conversation)."""
    turn: int
    """Its turn in the conversation (0: a fresh conversation)."""
    round: int
    """The round it was sent in (a round's requests go out at the same moment)."""
    kind: str
    """fresh, continued (its conversation was in the round before) or resumed after others."""
    prompt_tokens: int
    """Prompt length (the whole history for a later turn)."""
    cached_tokens: int | None
    """Prompt tokens the candidate says it reused (None: not reported)."""
    tokens_match: bool
    """The candidate's greedy tokens equal the reference's."""
    first_divergence: int | None
    """First generated position where they differ."""
    max_abs_dlogprob: float
    """Largest |Δlogprob| over aligned tokens and shared top-k entries."""
    tie: bool
    """The divergence is a tie (inside the reference's top-k within tolerance)."""
    failed: bool
    """The reply breaks the claim."""
    warned: bool
    """Within the claim, but over the logprob tolerance (or a tie)."""
    aim: str | None = None
    """The reuse mechanism the request was aimed at (gate.checks._mechanisms; None: a seeded round's)."""
    aimed_at: int | None = None
    """The length it aimed at: the shared prefix, the long prompt, the edited turn's cut; for an
    end-of-sequence request (aim `eos-stop`), the tokens the reference decoded up to and including its stop."""
    eos: bool = False
    """Sent without ignore_eos: the engine ended the reply where it stops (gate.checks._eos)."""
    stop: str | None = None
    """Where the candidate stopped otherwise than the reference, in words (an end-of-sequence request)."""


class ConversationFailure(_Record):
    """A reply that broke the claim, with the other request whose state it most likely carries."""

    request: int
    """The failing request."""
    other_request: int | None
    """The other conversation's request named with it (None: none was sent before it)."""
    how: str
    """Why that one: its reference answer equals this reply, or its prompt shares the most tokens."""
    message: str
    """The failure in words, naming both requests."""


class ConversationsEvidence(EvidenceRecord):
    """engine-concurrent-conversations: every reply of a concurrent multi-tenant workload against the reference."""

    claim: str
    """The claim each reply was judged under."""
    cache_geometry: str
    """The candidate's cache geometry the system prefix length was derived from."""
    system_prefix: int
    """Tokens of each tenant's system prefix."""
    tenants: int
    """Distinct system prefixes."""
    conversations: int
    """Conversations in the workload."""
    turns: int
    """Turns per conversation."""
    max_concurrent: int
    """Requests sent at once in a round."""
    candidate_slots: int | None
    """Slots the candidate states (None: not stated)."""
    rounds: int
    """Rounds planned."""
    rounds_overlapping: int
    """Rounds in which requests were in flight together."""
    requests: list[ConversationRequest]
    """Every request sent, in order."""
    failures: list[ConversationFailure]
    """The replies that broke the claim."""
    cache_tiers_not_reset: list[str]
    """Cache tiers of the handed-over candidate that its reset before this check could not reach."""
    noise_floor: dict[str, Any] | None = None
    """The candidate's measured noise (gate.checks._noise): same-prompt pairs alone and in batches, off the
    cache, their worst |Δlogprob| and the floor the replies were judged against; None: not measurable."""
    servers: dict[str, Any]
    """Each server's command, port, start-up time and log tail."""
    mechanisms: list[MechanismReach] = Field(default_factory=list)
    """The candidate's reuse mechanisms: aimed at and reached, or why not (gate.checks._mechanisms)."""
    engine_log_counters: dict[str, int] | None = None
    """What the candidate's log says its cache did during the check (None: its log does not say)."""


__all__ = ["ConversationFailure", "ConversationRequest", "ConversationsEvidence"]
