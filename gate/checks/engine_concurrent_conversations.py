"""engine-concurrent-conversations: every reply of a concurrent multi-tenant chat workload equals the
same prompt answered alone by the reference.

A serving engine holds many conversations at once: several tenants, each with its own system
prefix, their conversations interleaved, more of them than it has slots, so a slot is handed from
one conversation to another and a conversation that comes back is restored from a cache tier (or
recomputed). State that crosses between requests there (a slot or a cached prefix of one
conversation served to another) is the leak this check looks for.

The workload is seeded: `tenants` system prefixes several cache blocks long (the length derived
from the candidate's cache geometry, gate.adapters.openai.geometry: `prefix_blocks` whole blocks,
at least `min_prefix` tokens for an engine that reuses any prefix), `conversations` conversations
of `turns` turns each (fresh private tokens per turn; each later turn's prompt is the whole history:
the previous prompt, the candidate's reply, the new turn). The requests go out in rounds of up to
`max_concurrent` at once (sent at the same moment from as many threads); each round mixes fresh
conversations with ones resumed after other conversations took their turns, and a conversation is
never sent in two rounds in a row while another one waits. Every reply of the candidate is then
compared with the reference's answer to exactly the same prompt, sent alone, under the claim
(the top-k rule and its tie awareness, gate.checks._topk).

A reply that fails names its request and the other request whose state it most likely carries:
another request whose reference answer it equals, else the other conversation's request whose
prompt shares the most tokens with it (the cached prefix it would have been served from), with
the requests in flight beside it.

Proof of exercise: some round overlapped in time, the candidate has more than one slot (where it
states its slots), and the candidate reported reused prompt tokens (the shared system prefixes
and the restored conversations). The cache tiers the handed-over server's reset could not reach
are named in the evidence and the message.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field

from gate.checks._engine import (
    NEW_TOKENS,
    PREFIX_BLOCKS,
    Judged,
    common_prefix,
    engine_pair,
    failure_words,
    judge,
    observation,
    require_hits,
    reuse_block,
    same_vocabulary,
    seeded_prompt,
)
from gate.checks._topk import worst
from gate.core.check import CheckContext, Outcome, Params, check
from gate.core.evidence import ConversationFailure, ConversationRequest, ConversationsEvidence

if TYPE_CHECKING:
    from gate.protocols import EngineCompletion, EngineServer


class EngineConversationsParams(Params):
    """The workload: tenants, conversations, turns and how many are in flight at once."""

    tenants: int = Field(default=3, ge=1, le=16)
    """Distinct system prefixes (tenants); conversation i belongs to tenant i mod tenants."""
    private: int = Field(default=2, ge=0, le=16)
    """Of the conversations, the last `private` open with no system prefix: no slot shares anything with
    them, so when one is resumed after others only a cache tier that kept it (llama.cpp's host-memory
    prompt cache) can serve its history."""
    conversations: int | None = Field(default=None, ge=2, le=64)
    """Conversations in the workload (default: twice the candidate's slots plus two, at least 8, at
    most 16: more conversations than slots, so slots are handed over and conversations restored)."""
    turns: int = Field(default=3, ge=1, le=8)
    """Turns per conversation."""
    turn_tokens: int = Field(default=24, ge=1, le=512)
    """Fresh private tokens each turn adds."""
    prefix_blocks: int = Field(default=PREFIX_BLOCKS, ge=1, le=64)
    """System prefix length in the candidate's reuse blocks (gate.adapters.openai.geometry)."""
    min_prefix: int = Field(default=256, ge=1, le=16384)
    """Shortest system prefix (for an engine that reuses any prefix, block 1, or states no block)."""
    max_concurrent: int | None = Field(default=None, ge=2, le=64)
    """Requests in flight at once (default: the candidate's slots plus one, so one waits; 4 where the
    engine states no slots; at most 8)."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens each reply decodes (and each one compared)."""


@dataclass
class _Request:
    """One request of the workload."""

    id: int
    conversation: int
    tenant: int
    turn: int
    round: int
    kind: str
    prompt: list[int]
    window: tuple[float, float] = (0.0, 0.0)
    reply: EngineCompletion | None = None
    want: EngineCompletion | None = None
    judged: Judged | None = None

    def name(self) -> str:
        tenant = f"tenant {self.tenant}" if self.tenant >= 0 else "no system prefix"
        return f"request {self.id} (conversation {self.conversation} turn {self.turn}, {tenant})"


def _schedule(conversations: int, turns: int, width: int, rng: random.Random) -> list[list[tuple[int, int]]]:
    """Rounds of (conversation, turn): each conversation's turns in order, at most once per round, up
    to `width` per round; conversations not in the last round go first (resumed after others), then
    fresh ones in order, then those of the last round."""
    next_turn = [0] * conversations
    started: list[int] = []
    fresh = list(range(conversations))
    rounds: list[list[tuple[int, int]]] = []
    last: set[int] = set()
    while any(t < turns for t in next_turn):
        waiting = [c for c in started if next_turn[c] < turns and c not in last]
        rng.shuffle(waiting)
        pick = waiting[: max(1, width // 2)] if fresh else waiting[:width]
        while fresh and len(pick) < width:
            pick.append(fresh.pop(0))
        if len(pick) < width:
            again = [c for c in started if next_turn[c] < turns and c in last and c not in pick]
            pick += again[: width - len(pick)]
        if not pick:
            pick = [c for c in started if next_turn[c] < turns and c not in pick][:width]
        batch = []
        for c in pick:
            if c not in started:
                started.append(c)
            batch.append((c, next_turn[c]))
            next_turn[c] += 1
        rng.shuffle(batch)
        rounds.append(batch)
        last = set(pick)
    return rounds


def _suspect(failed: _Request, sent: list[_Request]) -> tuple[_Request | None, str]:
    """The other request whose state a failing reply most likely carries, and how it was found."""
    assert failed.reply is not None
    others = [r for r in sent if r.id != failed.id and r.round <= failed.round]
    for other in others:
        same = other.want is not None and list(other.want.tokens) == list(failed.reply.tokens)
        if same and other.conversation != failed.conversation:
            return other, "its reply equals the reference's answer to that request"
    foreign = [r for r in others if r.conversation != failed.conversation]
    if not foreign:
        return None, "no other conversation's request was sent before it"
    best = max(foreign, key=lambda r: (common_prefix(r.prompt, failed.prompt), r.round == failed.round, -r.id))
    shared = common_prefix(best.prompt, failed.prompt)
    return best, f"the other conversation's prompt sharing the most with it ({shared} tokens)"


@check("engine-concurrent-conversations", params=EngineConversationsParams)
def engine_concurrent_conversations(ctx: CheckContext, params: EngineConversationsParams) -> Outcome:
    """Every reply of a concurrent multi-tenant, multi-turn workload equals the reference's answer alone."""
    pair = engine_pair(ctx, "engine-concurrent-conversations")
    if isinstance(pair, Outcome):
        return pair
    reference, candidate, level, top_k = pair
    geometry = candidate.cache_geometry
    block = reuse_block(candidate)
    with reference.serve(label="reference") as ref, candidate.serve(label="candidate") as cand:
        vocab = same_vocabulary(ref, cand) or candidate.vocab_size
        slots = cand.info.get("total_slots")
        n_conv = params.conversations or max(8, min(16, 2 * int(slots or 3) + 2))
        n_private = min(params.private, n_conv - 1)  # at least one conversation opens with a system prefix
        width = params.max_concurrent or (min(8, int(slots) + 1) if slots else 4)
        room = min(reference.max_len, candidate.max_len) - 1
        grows = params.turns * (params.turn_tokens + params.new_tokens)
        wanted = max(params.min_prefix, params.prefix_blocks * block) if block else params.min_prefix
        prefix = max(1, min(wanted, room - grows))
        if prefix + grows > room:
            return Outcome(
                "unproven",
                f"the context ({room + 1} tokens) cannot hold a {prefix}-token system prefix and {params.turns} turns "
                f"of {params.turn_tokens} + {params.new_tokens} tokens; lower turns or turn_tokens",
            )
        base = ctx.seed * 1_000_003 + 7
        systems = [seeded_prompt(vocab, prefix, base + t) for t in range(params.tenants)]
        rounds = _schedule(n_conv, params.turns, width, random.Random(base))
        untouched = cand.unreset_tiers() if cand.reused else []
        sent: list[_Request] = []
        history: dict[int, list[int]] = {}
        last_round: dict[int, int] = {}
        overlapping_rounds = 0
        failed_round: int | None = None
        for number, batch in enumerate(rounds):
            requests: list[_Request] = []
            for conv, turn in batch:
                own = seeded_prompt(vocab, params.turn_tokens, base + 1000 * (conv + 1) + turn)
                tenant = conv % params.tenants if conv < n_conv - n_private else -1
                if turn == 0:
                    prompt, kind = [*(systems[tenant] if tenant >= 0 else []), *own], "fresh"
                else:
                    prompt = [*history[conv], *own]
                    kind = "resumed after others" if last_round[conv] < number - 1 else "continued"
                requests.append(_Request(len(sent) + len(requests), conv, tenant, turn, number, kind, prompt))
            _send_together(cand, requests, params.new_tokens, top_k)
            if len(requests) > 1 and _overlapped(requests):
                overlapping_rounds += 1
            for req in requests:
                assert req.reply is not None
                history[req.conversation] = [*req.prompt, *req.reply.tokens]
                last_round[req.conversation] = number
                req.want = ref.complete(req.prompt, params.new_tokens, top_k)  # alone, on the reference
                req.judged = judge(ctx, req.want, req.reply)
            sent += requests
            if any(r.judged is not None and r.judged.failed for r in requests) and failed_round is None:
                failed_round = number
                if ctx.stop_at_first_failure:
                    break
        servers = {"reference": ref.evidence(), "candidate": cand.evidence()}
    return _outcome(
        ctx,
        params,
        level,
        sent,
        rounds=len(rounds),
        overlapping_rounds=overlapping_rounds,
        slots=slots,
        prefix=prefix,
        width=width,
        n_conv=n_conv,
        geometry=geometry.words(),
        untouched=untouched,
        servers=servers,
    )


def _send_together(server: EngineServer, requests: list[_Request], new_tokens: int, top_k: int) -> None:
    """Send a round's requests at the same moment, one thread each; each reply and its time window kept."""
    barrier = threading.Barrier(len(requests))

    def send(req: _Request) -> None:
        barrier.wait()
        start = time.perf_counter()
        req.reply = server.complete(req.prompt, new_tokens, top_k)
        req.window = (start, time.perf_counter())

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        list(pool.map(send, requests))


def _overlapped(requests: list[_Request]) -> bool:
    """Some two requests of the round were in flight at the same time."""
    ordered = sorted(r.window for r in requests)
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(ordered))


def _outcome(
    ctx: CheckContext,
    params: EngineConversationsParams,
    level: str,
    sent: list[_Request],
    *,
    rounds: int,
    overlapping_rounds: int,
    slots: Any,
    prefix: int,
    width: int,
    n_conv: int,
    geometry: str,
    untouched: list[str],
    servers: dict[str, Any],
) -> Outcome:
    failures: list[ConversationFailure] = []
    rows: list[ConversationRequest] = []
    for req in sent:
        assert req.reply is not None and req.judged is not None
        c = req.judged.comparison
        rows.append(
            ConversationRequest(
                id=req.id,
                conversation=req.conversation,
                tenant=req.tenant,
                turn=req.turn,
                round=req.round,
                kind=req.kind,
                prompt_tokens=len(req.prompt),
                cached_tokens=req.reply.cached_tokens,
                tokens_match=not c.diverged,
                first_divergence=c.first_divergence,
                max_abs_dlogprob=c.max_abs_delta,
                tie=c.tie,
                failed=req.judged.failed,
                warned=req.judged.warn,
            )
        )
        if req.judged.failed:
            other, how = _suspect(req, sent)
            words = failure_words(level, req.judged)
            message = f"{req.name()}, {req.kind}: {words}"
            if other is not None:
                company = [r.id for r in sent if r.round == req.round and r.id != req.id]
                message += f"; it may carry the state of {other.name()}: {how}"
                if company:
                    message += f" (in flight with requests {', '.join(map(str, company))})"
            failures.append(
                ConversationFailure(
                    request=req.id,
                    other_request=None if other is None else other.id,
                    how=how,
                    message=message,
                )
            )
    reported = [r.cached_tokens for r in rows]
    fresh_hits = sum(1 for r in rows if r.kind == "fresh" and (r.cached_tokens or 0) > 0)
    resumed = [r for r in rows if r.kind == "resumed after others"]
    resumed_hits = sum(1 for r in resumed if (r.cached_tokens or 0) > (prefix if r.tenant >= 0 else 0))
    evidence = ConversationsEvidence(
        claim=level,
        cache_geometry=geometry,
        system_prefix=prefix,
        tenants=params.tenants,
        conversations=n_conv,
        turns=params.turns,
        max_concurrent=width,
        candidate_slots=None if slots is None else int(slots),
        rounds=rounds,
        rounds_overlapping=overlapping_rounds,
        requests=rows,
        failures=failures,
        cache_tiers_not_reset=untouched,
        servers=servers,
    )
    metrics = {
        "requests": len(rows),
        "failed": len(failures),
        "rounds": rounds,
        "rounds_overlapping": overlapping_rounds,
        "system_prefix": prefix,
        "fresh_with_shared_prefix_hit": fresh_hits,
        "resumed_after_others": len(resumed),
        "resumed_restored_past_prefix": resumed_hits,
        "max_abs_dlogprob": worst(r.max_abs_dlogprob for r in rows),
    }
    exercise = {
        "compared_replies": len(rows),
        "rounds_overlapping": overlapping_rounds,
        "cached_prompt_tokens": sum(r.cached_tokens or 0 for r in rows),
        "resumed_after_others": len(resumed),
    }
    completions = [r.reply for r in sent if r.reply is not None]
    outcome = Outcome(
        "pass",
        "",
        metrics,
        evidence.dump(),
        exercise,
        observation=observation(completions),
        observation_in_run_order=True,
    )
    tiers = (
        f"; not reset before this check (the engine's reset cannot reach them): {'; '.join(untouched)}"
        if untouched
        else ""
    )
    if failures:
        shown = "; ".join(f.message for f in failures[:3])
        more = f"; and {len(failures) - 3} more" if len(failures) > 3 else ""
        outcome.status = "fail"
        outcome.message = (
            f"{len(failures)} of {len(rows)} replies differ from the reference alone: {shown}{more}{tiers}"
        )
        outcome.detected_at = min(len(r.prompt) for r in sent if r.judged is not None and r.judged.failed)
        outcome.diagnosis = {"problems": [f.message for f in failures]}
        return outcome
    problems = []
    if overlapping_rounds == 0 or (slots is not None and int(slots) < 2):
        problems.append(
            f"not exercised: {overlapping_rounds} of {rounds} rounds had requests in flight together and the "
            f"candidate has {slots} slot(s); no two conversations were ever served at once (launch it with more "
            "parallel slots)"
        )
    if problems:
        outcome.status, outcome.message = "fail", "; ".join(problems) + tiers
        outcome.diagnosis = {"problems": problems}
        return outcome
    require_hits(reported, f"in any of the {len(rows)} requests (shared system prefixes, resumed conversations)")
    warned = sum(1 for r in rows if r.warned)
    outcome.message = (
        f"{level} holds for every one of {len(rows)} replies ({n_conv} conversations of {params.turns} turns over "
        f"{params.tenants} tenants' {prefix}-token system prefixes, {rounds} rounds of up to {width} at once, "
        f"{overlapping_rounds} overlapping; {'slots not stated' if slots is None else f'{slots} slots'}), each "
        f"against the reference's answer to the same prompt alone; {fresh_hits} fresh conversations reused a "
        f"shared prefix, {resumed_hits} of {len(resumed)} resumed after others were served from the cache past their "
        "system prefix" + (f"; {warned} within the claim but over the logprob tolerance" if warned else "") + tiers
    )
    if warned:
        outcome.status = "warn"
    return outcome
