"""engine-concurrent-conversations' body: measure the rounds, judge every reply, explain the judgement."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gate.checks._engine import (
    EnginePair,
    Judged,
    engine_check,
    failure_words,
    observation,
    problems_outcome,
    require_hits,
    reuse_block,
    same_vocabulary,
    seeded_prompt,
    send_together,
    tolerated_change,
)
from gate.checks._engine import judge as judge_reply
from gate.checks._eos import (
    EOS_REQUESTS,
    MECHANISM,
    EosSelection,
    eos_fields,
    eos_reach,
    select_eos_prompts,
    stop_problem,
)
from gate.checks._mechanisms import MechanismPlan, Step, log_counters, plan_mechanisms, reach
from gate.checks._noise import NoiseFloor, measure_noise, off_cache_fields
from gate.checks._topk import worst
from gate.checks.engine_concurrent_conversations import EngineConversationsParams
from gate.checks.engine_concurrent_conversations.evidence import (
    ConversationFailure,
    ConversationRequest,
    ConversationsEvidence,
)
from gate.core.check import CheckContext, Outcome
from gate.core.evidence import MechanismReach

if TYPE_CHECKING:
    from gate.protocols import EngineCompletion, EngineServer


@dataclass
class _Request:
    """One request of the workload, filled in as it is sent and judged; `_row` copies it to the evidence row."""

    id: int
    conversation: int
    tenant: int
    turn: int
    round: int
    kind: str
    prompt: list[int]
    window: tuple[float, float] = (0.0, 0.0)
    aim: str | None = None
    aimed_at: int | None = None
    reply: EngineCompletion | None = None
    want: EngineCompletion | None = None
    judged: Judged | None = None
    reask: Judged | None = None
    """A failing reply's prompt asked again alone, off the candidate's cache, against the reference."""
    budget: int | None = None
    """Tokens asked for, where not the workload's `new_tokens` (an end-of-sequence request's budget)."""
    extra: dict[str, Any] | None = None
    """Request fields: `ignore_eos: false` on a request that ends where the engine stops (gate.checks._eos)."""
    stop: str | None = None
    """Where the candidate stopped otherwise than the reference, in words (end-of-sequence requests)."""
    stop_alone: bool = False
    """The stop's words say it all: the replies agree up to where one ends (gate.checks._eos.StopProblem)."""

    def name(self) -> str:
        tenant = f"tenant {self.tenant}" if self.tenant >= 0 else "no system prefix"
        return f"request {self.id} (conversation {self.conversation} turn {self.turn}, {tenant})"

    @property
    def cached(self) -> int | None:
        """Prompt tokens the candidate says it reused for this request (None: not reported, or not sent)."""
        return None if self.reply is None else self.reply.cached_tokens

    def outcome(self) -> tuple[EngineCompletion, Judged]:
        """The candidate's reply and its comparison with the reference's answer alone (both measured)."""
        assert self.reply is not None and self.judged is not None
        return self.reply, self.judged

    def history(self) -> list[int]:
        """Its prompt and the candidate's reply: what the conversation's next turn starts with."""
        return [*self.prompt, *self.outcome()[0].tokens]


@dataclass(frozen=True)
class _Workload:
    """What every round's prompts are drawn from; the last `private` conversations open with no system prefix."""

    vocab: int
    base: int
    systems: list[list[int]]
    conversations: int
    private: int


@dataclass(frozen=True)
class Observations:
    """Every request sent, in order, and the shape of the workload that sent them."""

    sent: list[_Request]
    rounds: int
    overlapping_rounds: int
    slots: Any
    prefix: int
    width: int
    conversations: int
    geometry: str
    untouched: list[str]
    servers: dict[str, Any]
    mechanisms: list[MechanismReach] = field(default_factory=list)
    counters: dict[str, int] | None = None
    noise: NoiseFloor | None = None


Finding = Literal["failed", "not-exercised", "held"]


@dataclass(frozen=True)
class Judgement:
    """Per request its evidence row, the failing replies, what the cache served, and the finding."""

    finding: Finding
    rows: list[ConversationRequest]
    failures: list[ConversationFailure]
    detected_at: int | None
    fresh_hits: int
    resumed: int
    resumed_hits: int
    warned: int


def _schedule(conversations: int, turns: int, width: int, rng: random.Random) -> list[list[tuple[int, int]]]:
    """Rounds of up to `width` (conversation, turn): conversations not in the last round first (resumed
    after others), then fresh ones, then those of the last round."""
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


def system_prefix(params: EngineConversationsParams, pair: EnginePair) -> tuple[int, int]:
    """The tenants' system prefix length and the context's room (its length - 1)."""
    block = reuse_block(pair.candidate)
    room = min(pair.reference.max_len, pair.candidate.max_len) - 1
    wanted = max(params.min_prefix, params.prefix_blocks * block) if block else params.min_prefix
    return max(1, min(wanted, room - _growth(params))), room


def _growth(params: EngineConversationsParams) -> int:
    """Tokens a conversation's history grows by over its turns."""
    return params.turns * (params.turn_tokens + params.new_tokens)


def measure(ctx: CheckContext, params: EngineConversationsParams, pair: EnginePair, prefix: int) -> Observations:
    """Start both servers; send the seeded rounds to the candidate and each prompt alone to the reference."""
    reference, candidate = pair.reference, pair.candidate
    geometry = candidate.cache_geometry
    with reference.serve(label="reference") as ref, candidate.serve(label="candidate") as cand:
        vocab = same_vocabulary(ref, cand) or candidate.vocab_size
        slots = cand.info.get("total_slots")
        n_conv = params.conversations or max(8, min(16, 2 * int(slots or 3) + 2))
        width = params.max_concurrent or (min(8, int(slots) + 1) if slots else 4)
        base = ctx.seed * 1_000_003 + 7
        systems = [seeded_prompt(vocab, prefix, base + t) for t in range(params.tenants)]
        # at least one conversation opens with a system prefix
        work = _Workload(vocab, base, systems, n_conv, min(params.private, n_conv - 1))
        rounds = _schedule(n_conv, params.turns, width, random.Random(base))
        untouched = cand.unreset_tiers() if cand.reused else []
        limit = candidate.max_len - params.new_tokens - 1
        plan, fresh = None, []  # the aimed workload's fresh prompts: the noise floor is measured at these too
        if params.aim:
            room = min(reference.max_len, candidate.max_len) - 1 - params.new_tokens
            plan = plan_mechanisms(geometry, room, width, params.turn_tokens)
            fresh = [step.length for batch in plan.rounds for step in batch if step.how == "fresh"]
        noise = measure_noise(
            ctx,
            cand,
            candidate.salt_field,
            vocab=vocab,
            lengths=_prompt_lengths(params, work, prefix) + fresh,
            width=width,
            new_tokens=params.new_tokens,
            top_k=pair.top_k,
            limit=limit,
        )
        process = getattr(cand, "server", None)
        log_start = len(process.log_text()) if process is not None else 0
        send = _Sender(ctx, ref, cand, params.new_tokens, pair.top_k, noise, candidate.salt_field)
        aimed = [] if plan is None else _serve_aimed(send, plan, (vocab, base, -len(plan.rounds)))
        stopped = send.stops(aimed)
        sent = [] if stopped else _serve_rounds(send, params, work, rounds)
        for req in sent:  # numbered after the aimed requests, which went first
            req.id += len(aimed)
        stopped = stopped or send.stops(sent)
        selection: EosSelection | None = None
        ended: list[_Request] = []
        if params.eos_candidates and not stopped:  # last: the tenants' system prefixes are cached by now
            at = (len(aimed) + len(sent), len(rounds))
            selection, ended = _serve_eos(send, params, work, (width, limit), at)
        counters = log_counters(process.log_text()[log_start:], geometry.sliding_window) if process else None
        servers = {"reference": ref.evidence(), "candidate": cand.evidence()}
    reached = [] if plan is None else reach(plan, aimed, counters)
    if selection is not None:
        reached.append(eos_reach(selection, ended))
    everything = [*aimed, *sent, *ended]  # every round's number is its own: aimed < 0 <= seeded < end-of-sequence
    by_round = itertools.groupby(sorted(everything, key=lambda r: r.round), key=lambda r: r.round)
    windows = [sorted(r.window for r in batch) for _, batch in by_round]  # overlapping: two requests in flight at once
    overlapping = sum(1 for w in windows if any(later[0] < earlier[1] for earlier, later in itertools.pairwise(w)))
    return Observations(
        everything,
        len(rounds) + (0 if plan is None else len(plan.rounds)) + len({r.round for r in ended}),
        overlapping,
        slots,
        prefix,
        width,
        n_conv,
        geometry.words(),
        untouched,
        servers,
        reached,
        counters,
        noise,
    )


def _serve_aimed(send: _Sender, plan: MechanismPlan, seeds: tuple[int, int, int]) -> list[_Request]:
    """The aimed rounds (gate.checks._mechanisms), numbered from `seeds`' third, -len(plan.rounds), so the
    seeded rounds keep theirs."""
    vocab, base, first_round = seeds
    sent: list[_Request] = []
    for number, batch in enumerate(plan.rounds, start=first_round):
        last = {r.conversation: r for r in sent}  # each conversation's latest request
        requests: list[_Request] = []
        for step in batch:
            prompt = _aimed_prompt(step, vocab, base + 7919 * (step.conversation + 1) + len(sent), last)
            words = step.words
            if step.how == "resume":
                words += f" ({_others_since(sent, step.conversation)} other conversations served since)"
            turn, kind = int(step.how in ("resume", "edit")), f"{words} [{step.mechanism}]"
            ident, at = len(sent) + len(requests), _aimed_at(step, last)
            requests.append(
                _Request(ident, step.conversation, -1, turn, number, kind, prompt, aim=step.mechanism, aimed_at=at)
            )
        sent += send(requests)
        if send.stops(requests):
            break
    return sent


def _others_since(sent: list[_Request], conversation: int) -> int:
    """Other conversations served since `conversation` was last."""
    served = [r.conversation for r in sent]
    last = max((i for i, c in enumerate(served) if c == conversation), default=-1)
    return len(set(served[last + 1 :]) - {conversation})


def _aimed_at(step: Step, last: dict[int, _Request]) -> int:
    """The length a step aims at: its shared prefix, its prompt, or the cut of its edited turn."""
    if step.how == "edit":
        return len(last[step.conversation].prompt) - step.length
    if step.how == "resume":
        return len(last[step.conversation].prompt)
    return step.length


def _aimed_prompt(step: Step, vocab: int, seed: int, last: dict[int, _Request]) -> list[int]:
    """A step's prompt, from the conversations sent before it (gate.checks._mechanisms.Step)."""
    if step.how == "fresh":
        return seeded_prompt(vocab, step.length, seed)
    if step.how == "share":
        assert step.source is not None
        return [*last[step.source].prompt[: step.length], *seeded_prompt(vocab, 8, seed)]
    if step.how == "resume":
        return [*last[step.conversation].history(), *seeded_prompt(vocab, step.length, seed)]
    prompt = last[step.conversation].prompt
    return [*prompt[: len(prompt) - step.length], *seeded_prompt(vocab, step.length, seed)]


def _prompt_lengths(params: EngineConversationsParams, work: _Workload, prefix: int) -> list[int]:
    """The length of every prompt the workload will send: what the noise floor is measured at."""
    return [
        (prefix if conv < work.conversations - work.private else 0)
        + turn * (params.turn_tokens + params.new_tokens)
        + params.turn_tokens
        for conv in range(work.conversations)
        for turn in range(params.turns)
    ]


def _serve_rounds(
    send: _Sender, params: EngineConversationsParams, work: _Workload, rounds: list[list[tuple[int, int]]]
) -> list[_Request]:
    """Every seeded round sent and judged; a control stops after the first round with a failing reply."""
    sent: list[_Request] = []
    for number, batch in enumerate(rounds):
        requests = _round_requests(params, work, batch, number, sent)
        sent += send(requests)
        if send.stops(requests):
            break
    return sent


def _serve_eos(
    send: _Sender, params: EngineConversationsParams, work: _Workload, sizes: tuple[int, int], at: tuple[int, int]
) -> tuple[EosSelection, list[_Request]]:
    """Openings the reference ends at end-of-sequence (gate.checks._eos), sent together and judged at the
    stop, then each continued. `sizes`: requests at once, the longest prompt; `at`: the first id and round."""
    width, limit = sizes
    fields = eos_fields(send.cand.flavor)
    tenants = [i % len(work.systems) for i in range(params.eos_candidates)]
    seed = work.base + 7_000_000
    prompts = [
        [*work.systems[t], *seeded_prompt(work.vocab, params.turn_tokens, seed + i)] for i, t in enumerate(tenants)
    ]
    selection = select_eos_prompts(
        lambda prompt, budget, extra: send.ref.complete(prompt, budget, send.top_k, extra),
        prompts,
        fields,
        budget=params.eos_budget,
        keep=min(EOS_REQUESTS, width),
    )
    first_id, first_round = at
    opened: list[_Request] = []
    for i, (prompt, want) in enumerate(selection.chosen):
        tenant = tenants[prompts.index(prompt)]
        kind = f"fresh, ends at end-of-sequence on the reference [{MECHANISM}]"
        # conversations numbered from 2000
        req = _Request(first_id + i, 2000 + i, tenant, 0, first_round, kind, prompt, aim=MECHANISM)
        req.aimed_at, req.budget, req.extra, req.want = len(want.tokens), params.eos_budget, fields, want
        opened.append(req)
    if not opened:
        return selection, []
    sent = send(opened)
    if send.stops(opened):
        return selection, sent
    continued: list[_Request] = []
    for req in opened:
        own = seeded_prompt(work.vocab, params.turn_tokens, seed + 100_000 + req.conversation)
        prompt = [*req.history(), *own]
        if len(prompt) <= limit:
            number = first_id + len(opened) + len(continued)
            kind = f"continued after its end-of-sequence [{MECHANISM}]"
            continued.append(
                _Request(number, req.conversation, req.tenant, 1, first_round + 1, kind, prompt, aim=MECHANISM)
            )
    if continued:
        sent += send(continued)
    return selection, sent


@dataclass(frozen=True)
class _Sender:
    """Sends a round together to the candidate and judges each reply against the reference's answer alone."""

    ctx: CheckContext
    ref: EngineServer
    cand: EngineServer
    new_tokens: int
    top_k: int
    noise: NoiseFloor | None
    salt: str | None

    def __call__(self, requests: list[_Request]) -> list[_Request]:
        jobs = [(r.prompt, r.budget or self.new_tokens, self.top_k, r.extra) for r in requests]
        for req, (reply, window) in zip(requests, send_together(self.cand, jobs), strict=True):
            req.reply, req.window = reply, window
            self._judge(req)
        return requests

    def stops(self, requests: list[_Request]) -> bool:
        """A control stops after the first round with a failing reply."""
        return self.ctx.stop_at_first_failure and any(r.outcome()[1].failed for r in requests)

    def _judge(self, req: _Request) -> None:
        """A failing reply is asked again alone off the candidate's cache (blame from evidence)."""
        ctx, noise, new_tokens = self.ctx, self.noise, req.budget or self.new_tokens
        assert req.reply is not None
        if req.want is None:  # an end-of-sequence request's answer alone came with its choice
            req.want = self.ref.complete(req.prompt, new_tokens, self.top_k, req.extra)
        req.judged = judge_reply(ctx, req.want, req.reply, noise)
        if req.extra is not None:  # the engine's own stop: the candidate must end where the reference ends
            stop = stop_problem(req.want, req.reply)
            req.stop = None if stop is None else stop.words
            req.stop_alone = stop is not None and stop.certain
            if req.stop_alone:
                req.judged = Judged(req.judged.comparison, req.judged.exact, failed=True, warn=False)
        fields = off_cache_fields(self.cand, self.salt, f"reask-{req.id}") if req.judged.failed else None
        if fields is not None:  # the same prompt alone: nothing cached, nothing batched beside it
            again = self.cand.complete(req.prompt, new_tokens, self.top_k, {**(req.extra or {}), **fields})
            req.reask = judge_reply(ctx, req.want, again, noise)


def _round_requests(
    params: EngineConversationsParams,
    work: _Workload,
    batch: list[tuple[int, int]],
    number: int,
    sent: list[_Request],
) -> list[_Request]:
    """The requests of round `number`, after the seeded requests `sent` before it."""
    last = {r.conversation: r for r in sent}  # each conversation's latest request
    requests: list[_Request] = []
    for conv, turn in batch:
        own = seeded_prompt(work.vocab, params.turn_tokens, work.base + 1000 * (conv + 1) + turn)
        tenant = conv % params.tenants if conv < work.conversations - work.private else -1
        if turn == 0:
            prompt, kind = [*(work.systems[tenant] if tenant >= 0 else []), *own], "fresh"
        else:
            prompt = [*last[conv].history(), *own]
            kind = "resumed after others" if last[conv].round < number - 1 else "continued"
        requests.append(_Request(len(sent) + len(requests), conv, tenant, turn, number, kind, prompt))
    return requests


def _suspect(failed: _Request, sent: list[_Request]) -> tuple[_Request | None, str]:
    """The other request whose reference answer a failing reply equals (never a guess), and the cause in words."""
    assert failed.reply is not None
    for other in sent:  # another conversation's request, sent before it or beside it
        same = other.want is not None and list(other.want.tokens) == list(failed.reply.tokens)
        if same and other.round <= failed.round and other.conversation != failed.conversation:
            return other, "its reply equals the reference's answer to that request"
    if failed.reask is None:
        return None, "not re-asked (the engine offers no request off its cache): the cause is not shown"
    company = sum(1 for r in sent if r.round == failed.round and r.id != failed.id)
    served = f"it was served with {failed.reply.cached_tokens or 0} cached tokens, {company} requests beside it"
    if failed.reask.failed:
        return None, (
            "asked again alone off the cache it still differs from the reference: this configuration computes "
            "the prompt differently, no state carried from another request"
        )
    return (
        None,
        f"asked again alone off the cache it matches the reference: the state it was served with did it ({served})",
    )


def _row(req: _Request) -> ConversationRequest:
    reply, judged = req.outcome()
    c = judged.comparison
    named = ("id", "conversation", "tenant", "turn", "round", "kind", "aim", "aimed_at", "stop")
    return ConversationRequest(
        **{field: getattr(req, field) for field in named},
        prompt_tokens=len(req.prompt),
        cached_tokens=reply.cached_tokens,
        tokens_match=not c.diverged,
        first_divergence=c.first_divergence,
        max_abs_dlogprob=c.max_abs_delta,
        tie=c.tie,
        failed=judged.failed,
        warned=judged.warn,
        eos=req.extra is not None,
    )


def _failure(req: _Request, sent: list[_Request], level: str) -> ConversationFailure:
    """A failing reply, named with the request whose state it may carry and those in flight beside it."""
    other, how = _suspect(req, sent)
    reply, judged = req.outcome()
    cached = reply.cached_tokens
    served = "" if req.aim is None else f", {len(req.prompt)}-token prompt, {cached} tokens served from the cache"
    words = failure_words(level, judged)
    if req.stop is not None:
        words = req.stop if req.stop_alone else f"{req.stop}; {words}"
    message = f"{req.name()}, {req.kind}{served}: {words}"
    if other is not None:
        company = [r.id for r in sent if r.round == req.round and r.id != req.id]
        message += f"; it carries the content of {other.name()}: {how}"
        if company:
            message += f" (in flight with requests {', '.join(map(str, company))})"
    else:
        message += f"; {how}"
    return ConversationFailure(
        request=req.id, other_request=None if other is None else other.id, how=how, message=message
    )


def judge(obs: Observations, level: str) -> Judgement:
    """Each reply's row, what a failing one may carry, and whether the run exercised concurrency (pure)."""
    rows = [_row(req) for req in obs.sent]
    failed = [req for req in obs.sent if req.outcome()[1].failed]
    failures = [_failure(req, obs.sent, level) for req in failed]
    resumed = [r for r in rows if r.kind == "resumed after others"]
    finding: Finding = "held"
    if failures or (obs.noise is not None and obs.noise.defects):
        finding = "failed"
    elif obs.overlapping_rounds == 0 or (obs.slots is not None and int(obs.slots) < 2):
        finding = "not-exercised"
    return Judgement(
        finding=finding,
        rows=rows,
        failures=failures,
        detected_at=min(len(r.prompt) for r in failed) if failed else None,
        fresh_hits=sum(1 for r in rows if r.kind == "fresh" and (r.cached_tokens or 0) > 0),
        resumed=len(resumed),
        resumed_hits=sum(1 for r in resumed if (r.cached_tokens or 0) > (obs.prefix if r.tenant >= 0 else 0)),
        warned=sum(1 for r in rows if r.warned),
    )


def explain(params: EngineConversationsParams, level: str, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement, built once: fail (a reply differs, or nothing ran at once), warn or pass."""
    metrics = {
        "requests": len(j.rows),
        "failed": len(j.failures),
        "rounds": obs.rounds,
        "rounds_overlapping": obs.overlapping_rounds,
        "system_prefix": obs.prefix,
        "fresh_with_shared_prefix_hit": j.fresh_hits,
        "resumed_after_others": j.resumed,
        "resumed_restored_past_prefix": j.resumed_hits,
        "max_abs_dlogprob": worst(r.max_abs_dlogprob for r in j.rows),
        "mechanisms_aimed": sum(1 for m in obs.mechanisms if m.aimed),
        "mechanisms_reached": sum(1 for m in obs.mechanisms if m.reached),
    }
    exercise = {
        "compared_replies": len(j.rows),
        "rounds_overlapping": obs.overlapping_rounds,
        "cached_prompt_tokens": sum(r.cached_tokens or 0 for r in j.rows),
        "resumed_after_others": j.resumed,
    }
    seen = {
        "metrics": metrics,
        "evidence": ConversationsEvidence(
            claim=level,
            cache_geometry=obs.geometry,
            system_prefix=obs.prefix,
            tenants=params.tenants,
            conversations=obs.conversations,
            turns=params.turns,
            max_concurrent=obs.width,
            candidate_slots=None if obs.slots is None else int(obs.slots),
            rounds=obs.rounds,
            rounds_overlapping=obs.overlapping_rounds,
            requests=j.rows,
            failures=j.failures,
            cache_tiers_not_reset=obs.untouched,
            noise_floor=None if obs.noise is None else obs.noise.evidence(),
            servers=obs.servers,
            mechanisms=obs.mechanisms,
            engine_log_counters=obs.counters,
        ).dump(),
        "exercise": exercise,
        "observation": observation([r.reply for r in obs.sent if r.reply is not None]),
        "tolerated_change": tolerated_change(
            level, max((r.judged.comparison.tolerance for r in obs.sent if r.judged), default=0.0)
        ),
        "observation_in_run_order": True,
    }
    tiers = f"; not reset before this check (the engine's reset cannot reach them): {'; '.join(obs.untouched)}"
    tiers = (tiers if obs.untouched else "") + (f"; {obs.noise.words()}" if obs.noise is not None else "")
    if j.finding == "failed":
        shown = "; ".join(f.message for f in j.failures[:3])
        more = f"; and {len(j.failures) - 3} more" if len(j.failures) > 3 else ""
        message = f"{len(j.failures)} of {len(j.rows)} replies differ from the reference alone: {shown}{more}"
        defects = [f"not noise: {d}" for d in (obs.noise.defects if obs.noise is not None else [])]
        if defects:
            message = "; ".join([*defects[:3], message])
        message += tiers + mechanism_words(obs.mechanisms)
        problems = [*defects, *(f.message for f in j.failures)]
        return problems_outcome(problems, j.detected_at, "continuous-batching", message=message, **seen)
    if j.finding == "not-exercised":  # nothing served at once: nothing to judge, never a failure of the subject
        why = (
            f"the candidate states {obs.slots} slot: it serves one request at a time"
            if obs.slots is not None and int(obs.slots) < 2
            else f"{obs.overlapping_rounds} of {obs.rounds} rounds had requests in flight together"
        )
        message = (
            f"not exercised: {why}, so no two conversations were served at once (launch it with more parallel slots)"
        )
        return Outcome("unproven", message + tiers, **seen)
    slots = "slots not stated" if obs.slots is None else f"{obs.slots} slots"
    held = (
        f"{level} holds for every one of {len(j.rows)} replies ({obs.conversations} conversations of {params.turns} "
        f"turns over {params.tenants} tenants' {obs.prefix}-token system prefixes, {obs.rounds} rounds of up to "
        f"{obs.width} at once, {obs.overlapping_rounds} overlapping; {slots}), each against the reference's answer "
        f"to the same prompt alone; {j.fresh_hits} fresh conversations reused a shared prefix, {j.resumed_hits} of "
        f"{j.resumed} resumed after others were served from the cache past their system prefix"
        + (f"; {j.warned} within the claim but over the logprob tolerance{_worst_warned(obs, j)}" if j.warned else "")
        + mechanism_words(obs.mechanisms)
    )
    return Outcome("warn" if j.warned else "pass", held + tiers, **seen)


def _worst_warned(obs: Observations, j: Judgement) -> str:
    """The warned reply that moved furthest, against the noise floor measured off the cache."""
    worst = max((r for r in j.rows if r.warned), key=lambda r: r.max_abs_dlogprob)
    served = f"{worst.cached_tokens or 0} of {worst.prompt_tokens} prompt tokens served from the cache"
    words = f" (the furthest: request {worst.id}, {worst.kind}, {served}: max |Δlogprob| {worst.max_abs_dlogprob:.3g}"
    if obs.noise is not None and obs.noise.floor > 0:
        ratio = worst.max_abs_dlogprob / obs.noise.floor
        where = "beyond it, not noise" if ratio > 1 else "within it (a near-tie flipped)"
        words += f", {ratio:.1f} x the noise floor {obs.noise.floor:.3g} measured off the cache: {where}"
    return words + ")"


def mechanism_words(mechanisms: list[MechanismReach]) -> str:
    """The mechanisms the aimed requests reached, and those they did not or could not (with why)."""
    if not mechanisms:
        return ""
    reached = [m.mechanism for m in mechanisms if m.reached]
    missed = [f"{m.mechanism} ({m.evidence})" for m in mechanisms if m.aimed and not m.reached]
    reasons: dict[str, list[str]] = {}
    for m in mechanisms:
        if not m.aimed:
            reasons.setdefault(m.evidence, []).append(m.mechanism)
    unaimed = [f"{', '.join(names)} ({why})" for why, names in reasons.items()]
    words = f"; mechanisms reached: {', '.join(reached) or 'none'}"
    words += f"; aimed at but not reached: {'; '.join(missed)}" if missed else ""
    return words + (f"; not reachable: {'; '.join(unaimed)}" if unaimed else "")


@engine_check("engine-concurrent-conversations", params=EngineConversationsParams)
def engine_concurrent_conversations(ctx: CheckContext, params: EngineConversationsParams, pair: EnginePair) -> Outcome:
    """Every reply of a concurrent multi-tenant, multi-turn workload equals the reference's answer alone."""
    prefix, room = system_prefix(params, pair)
    if prefix + _growth(params) > room:
        return Outcome(
            "unproven",
            f"the context ({room + 1} tokens) cannot hold a {prefix}-token system prefix and {params.turns} turns "
            f"of {params.turn_tokens} + {params.new_tokens} tokens; lower turns or turn_tokens",
        )
    obs = measure(ctx, params, pair, prefix)
    judgement = judge(obs, pair.level)
    if judgement.finding == "held":
        where = f"in any of the {len(judgement.rows)} requests (shared system prefixes, resumed conversations)"
        require_hits([r.cached_tokens for r in judgement.rows], where)
    return explain(params, pair.level, obs, judgement)
