"""engine-slot-restore's body: save, restore and continue; truncated copies; judge; explain."""

from __future__ import annotations

import contextlib
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate._util.text import one_line
from gate.checks._engine import (
    EnginePair,
    bug_diagnosis,
    engine_check,
    failure_words,
    judge,
    observation,
    same_vocabulary,
    seeded_prompt,
)
from gate.checks.engine_slot_restore import EngineSlotRestoreParams
from gate.core.check import CheckContext, Outcome
from gate.errors import EngineBadReply, SubjectCrash
from gate.protocols import slot_files_absent, slot_store_of

if TYPE_CHECKING:
    from gate.protocols import EngineCompletion, EngineServer, SlotStore

FILE = "gate-slot-restore.bin"


def slot_store(server: EngineServer) -> SlotStore | str:
    """The server's slot files, or why it has none."""
    store = slot_store_of(server)
    return f"the {server.flavor} server offers no slot files gate can reach" if store is None else store


@dataclass(frozen=True)
class Run:
    """What every request of the check asks: the saved prompt, the full prompt continued after a restore,
    the unrelated overwrites; the tokens and top-k."""

    saved: list[int]
    full: list[int]
    others: list[list[int]]
    new_tokens: int
    top_k: int


def _run(vocab: int, length: int, params: EngineSlotRestoreParams, seed: int, top_k: int) -> Run:
    saved = seeded_prompt(vocab, length, seed * 32452843 + 11)
    full = saved + seeded_prompt(vocab, params.suffix, seed * 32452843 + 13)
    others = []
    for i in range(3):
        other = seeded_prompt(vocab, length, seed * 32452843 + 17 + i)
        if other[0] == saved[0]:  # shares no first token: any reuse of `full` is the restored state's
            other[0] = 3 + (saved[0] - 2) % (vocab - 3)
        others.append(other)
    return Run(saved, full, others, params.new_tokens, top_k)


@dataclass
class Restore:
    """One restore of the saved file and the continuation after it."""

    where: str
    slot: int
    reply: EngineCompletion | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None
    attributable: bool = False
    """Nothing but the file can hold the prompt's state in this server (it never saw the prompt)."""


@dataclass
class Malformed:
    """One truncated copy restored: refused, accepted or crashed, and the reply after it."""

    cut: str
    size: int
    slot: int
    outcome: str = "refused"
    detail: str = ""
    after: EngineCompletion | None = None
    crash: SubjectCrash | None = None


@dataclass
class Measured:
    want: EngineCompletion
    length: int
    saved: dict[str, Any]
    file_bytes: int
    restores: list[Restore]
    malformed: list[Malformed]
    servers: dict[str, Any]
    host_tiers: list[str]


def _restore(store: SlotStore, server: EngineServer, run: Run, slot: int, where: str) -> Restore:
    out = Restore(where, slot)
    try:
        out.engine = store.restore(slot, FILE)
    except EngineBadReply as err:
        out.refused = one_line(err, 300)
        return out
    out.reply = server.complete(run.full, run.new_tokens, run.top_k, store.pinned(slot))
    return out


def _malformed(store: SlotStore, server: EngineServer, run: Run, data: bytes, tail_cuts: list[int]) -> list[Malformed]:
    """Each truncated copy restored into the last slot, then the full prompt sent there; stops at a crash."""
    slot, whole = store.slots - 1, len(data)
    cuts = [(f"cut to half ({whole // 2} of {whole} bytes)", whole // 2)]
    cuts += [(f"less its last {n} byte{'s' if n > 1 else ''}", whole - n) for n in tail_cuts if 0 < n < whole]
    out = []
    for i, (cut, size) in enumerate(cuts):
        name = f"gate-slot-truncated-{i}.bin"
        (store.directory / name).write_bytes(data[:size])
        seen = Malformed(cut, size, slot)
        out.append(seen)
        try:
            seen.detail = one_line(store.restore(slot, name), 300)
            seen.outcome = "accepted"
        except EngineBadReply as err:
            seen.detail = one_line(err, 300)
        except SubjectCrash as crash:
            seen.outcome, seen.detail, seen.crash = "crashed", one_line(crash, 600), crash
            break
        try:
            seen.after = server.complete(run.full, run.new_tokens, run.top_k, store.pinned(slot))
        except SubjectCrash as crash:
            seen.outcome, seen.detail, seen.crash = "crashed", f"{seen.outcome}, then {one_line(crash, 300)}", crash
            break
    return out


def measure(ctx: CheckContext, params: EngineSlotRestoreParams, pair: EnginePair) -> Measured | str:
    """Steps 1-3, or why the candidate offers no slot files; the files gate wrote are removed afterwards."""
    dirs: list[Path] = []
    try:
        return _measure(ctx, params, pair, dirs)
    finally:
        for directory in dirs:
            for written in [directory / FILE, *directory.glob("gate-slot-truncated-*.bin")]:
                with contextlib.suppress(OSError):
                    written.unlink()


def _measure(ctx: CheckContext, params: EngineSlotRestoreParams, pair: EnginePair, dirs: list[Path]) -> Measured | str:
    limit = min(pair.reference.max_len, pair.candidate.max_len)
    length = max(2, min(params.length, limit - params.suffix - params.new_tokens - 1))
    with pair.reference.serve(label="reference") as ref, pair.candidate.serve(label="candidate") as cand:
        store = slot_store(cand)
        if isinstance(store, str):
            return store
        dirs.append(store.directory)
        vocab = same_vocabulary(ref, cand) or pair.candidate.vocab_size
        run = _run(vocab, length, params, ctx.seed, pair.top_k)
        want = ref.complete(run.full, run.new_tokens, run.top_k)
        a, b = 0, store.slots - 1
        cand.complete(run.saved, run.new_tokens, run.top_k, store.pinned(a))
        saved = store.save(a, FILE)
        data = (store.directory / FILE).read_bytes()
        for slot, other in zip(sorted({a, b}), run.others, strict=False):
            cand.complete(other, run.new_tokens, run.top_k, store.pinned(slot))
        restores = [_restore(store, cand, run, a, f"slot {a}, same server")]
        if b != a:
            restores.append(_restore(store, cand, run, b, f"slot {b} (another slot), same server"))
        servers = {"reference": ref.evidence(), "candidate": cand.evidence()}
        host_tiers = cand.unreset_tiers()
    if ctx.control:  # a control needs the comparison to see its fault, not another start: no restart
        return Measured(want, length, saved, len(data), restores, [], servers, host_tiers)
    with pair.candidate.serve(label="candidate, restarted", fresh=True) as fresh:
        store2 = slot_store(fresh)
        if isinstance(store2, str):
            return store2
        dirs.append(store2.directory)
        target = store2.directory / FILE
        if target.resolve() != (store.directory / FILE).resolve():
            shutil.copyfile(store.directory / FILE, target)
        fresh.complete(run.others[-1], run.new_tokens, run.top_k, store2.pinned(a))
        after_restart = _restore(store2, fresh, run, a, f"slot {a}, a restarted server")
        after_restart.attributable = True
        restores.append(after_restart)
        malformed = _malformed(store2, fresh, run, data, params.tail_cuts) if params.malformed else []
        servers["candidate_restarted"] = fresh.evidence()
    return Measured(want, length, saved, len(data), restores, malformed, servers, host_tiers)


def _death(crash: SubjectCrash) -> str:
    """The exit status and, where the log names one, the assertion that aborted the engine."""
    words = f"exit status {crash.where.get('exit_status')}"
    found = re.search(r"GGML_ASSERT\(.*?\) failed|Assertion .*? failed", str(crash.error))
    return words + (f", {found.group(0)}" if found else "")


def explain(ctx: CheckContext, m: Measured) -> Outcome:
    """The judgement of every restore and truncated copy, built once."""
    level = ctx.manifest.claim.level
    problems: list[str] = []
    rows: list[dict[str, Any]] = []
    observed: list[EngineCompletion] = []
    diagnosis: dict[str, Any] | None = None
    for r in m.restores:
        row: dict[str, Any] = {"where": r.where, "slot": r.slot, "engine_reply": r.engine}
        rows.append(row)
        if r.reply is None:
            row["refused"] = r.refused
            problems.append(f"{r.where}: the engine refused to restore the file it saved: {r.refused}")
            continue
        observed.append(r.reply)
        judged = judge(ctx, m.want, r.reply)
        row |= {"cached_tokens": r.reply.cached_tokens, "attributable_to_file": r.attributable, **judged.row()}
        if judged.failed:
            problems.append(f"{r.where}: the continuation after the restore differs: {failure_words(level, judged)}")
    if problems:
        diagnosis = bug_diagnosis("restored-state", list(problems))
    bad_files: list[str] = []
    crash = None
    for x in m.malformed:
        row = {"cut": x.cut, "bytes": x.size, "slot": x.slot, "outcome": x.outcome, "engine": x.detail}
        if x.after is not None:
            judged = judge(ctx, m.want, x.after)
            row |= {"after_cached_tokens": x.after.cached_tokens, **judged.row()}
            if judged.failed:  # served from corrupt state: wrong output, as a wrong restore is
                problems.append(f"after a file {x.cut} the reply differs: {failure_words(level, judged)}")
        if x.outcome == "accepted":
            bad_files.append(f"a slot file {x.cut} was accepted instead of refused")
        elif x.outcome == "crashed" and x.crash is not None:
            crash = x.crash
            bad_files.append(f"restoring a slot file {x.cut} killed the engine ({_death(x.crash)})")
        rows.append(row)
    findings = problems + bad_files
    if crash is not None and diagnosis is not None:
        # a wrong continuation from a good file is the finding about restored state (llama.cpp b9538 to
        # b9873 restore another prompt's context checkpoint); an abort on a truncated copy, on the same
        # build, is another finding, kept beside it rather than renaming it
        diagnosis = {**diagnosis, "problems": findings, "crash": crash.diagnosis()}
    elif crash is not None:
        diagnosis = {**crash.diagnosis(), "problems": findings}
    elif findings and diagnosis is None:
        diagnosis = bug_diagnosis("malformed-state", findings)
    # the proof: the restarted server's reuse (nothing else there held the prompt); a control run has no
    # restart, and its same-server reuse stands in (a control needs the fault seen, not the path proven)
    proof = [r.reply for r in m.restores if r.reply is not None and (r.attributable or ctx.control)]
    reused = max((r.cached_tokens or 0 for r in proof), default=None)
    evidence: dict[str, Any] = {
        "prompt_length": m.length,
        "saved": m.saved,
        "file_bytes": m.file_bytes,
        "restores": [x for x in rows if "where" in x],
        "malformed": [x for x in rows if "cut" in x],
        "host_memory_tiers": m.host_tiers,
        "servers": m.servers,
    }
    seen: dict[str, Any] = {
        "metrics": {"prompt_length": m.length, "problems": len(findings), "restored_reuse": reused},
        "evidence": evidence,
        "exercise": {"restored_tokens_reused_after_restart": reused},
        "observation": observation(observed),
    }
    if findings:  # wrong output fails (a restore unlike the reference, corrupt state served); a truncated file
        # not refused, with no wrong output, is a finding about the build: amber
        return Outcome(
            "fail" if problems else "warn", "; ".join(findings), **seen, detected_at=m.length, diagnosis=diagnosis
        )
    if not reused:
        return Outcome(
            "unproven",
            f"unproven: the restarted server reused {reused} prompt tokens after the restore of a {m.length}-token "
            "prompt's slot file, so its continuation did not come from the restored state: the restore path was "
            "not reached",
            **seen,
        )
    refused = [x for x in m.malformed if x.outcome == "refused"]
    words = [
        f"{len(m.restores)} restores of a saved {m.length}-token slot ({', '.join(r.where for r in m.restores)}) "
        f"continue as the reference answers alone; {'reused' if ctx.control else 'the restarted server reused'} "
        f"{reused} restored tokens"
    ]
    if refused:
        words.append(f"{len(refused)} truncated copies refused, and the server answered correctly after each")
    elif ctx.control or not m.malformed:
        words.append("truncated copies not restored in this run")
    return Outcome("pass", "; ".join(words), **seen)


@engine_check("engine-slot-restore", params=EngineSlotRestoreParams)
def engine_slot_restore(ctx: CheckContext, params: EngineSlotRestoreParams, pair: EnginePair) -> Outcome:
    """A slot saved to a file and restored (same slot, another slot, after a restart) continues as the
    reference answers alone; a truncated file is refused, never served or crashed on."""
    declined = slot_files_absent(pair.candidate)
    measured = measure(ctx, params, pair) if declined is None else declined  # no server starts to learn it
    if isinstance(measured, str):
        return Outcome("skip", f"no slot files to save and restore: {measured}", absent="slot-files")
    return explain(ctx, measured)
