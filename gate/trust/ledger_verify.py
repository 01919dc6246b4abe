"""Verifying a ledger: the hash chain, every signed checkpoint, and checkpoints held elsewhere (which
catch truncation with its checkpoints, or a wholesale rewrite re-signed under a new key)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from gate.trust.keys import canonical_json
from gate.trust.ledger import GENESIS, Checkpoint, Entry, Ledger, entry_hash


@dataclass(frozen=True)
class Problem:
    """Something that does not verify; `seq`: the first entry it concerns (None: the whole ledger)."""

    seq: int | None
    message: str


class Findings:
    """A list of problems, read as a verdict: ok when empty."""

    problems: list[Problem]

    @property
    def ok(self) -> bool:
        return not self.problems

    def first_bad(self) -> Problem | None:
        if not self.problems:
            return None
        return min(self.problems, key=lambda p: -1 if p.seq is None else p.seq)


@dataclass
class ChainReport(Findings):
    """What `verify_chain` found."""

    size: int
    verified: int
    """Length of the prefix whose chain verified."""
    head: str
    """Hash of the last verified entry."""
    checkpoints: int
    """Checkpoints whose signature and head verified (stored and external)."""
    problems: list[Problem]


def _check_entry(entry: Entry, expected_seq: int, prev: str) -> str | None:
    if entry.seq != expected_seq:
        return f"entry {expected_seq} is missing (deleted?); the next stored entry is {entry.seq}"
    if entry.prev != prev:
        return f"entry {entry.seq} does not link to entry {entry.seq - 1} (reordered, or an entry replaced)"
    if entry_hash(entry.seq, prev, entry.raw.encode("utf-8")) != entry.hash:
        return f"entry {entry.seq} was edited: its body does not hash to the stored hash"
    try:
        canonical = canonical_json(json.loads(entry.raw))
    except ValueError:
        return f"entry {entry.seq} body is not valid JSON"
    if canonical != entry.raw.encode("utf-8"):
        return f"entry {entry.seq} body is not canonical JSON"
    return None


def _check_checkpoint(
    cp: Checkpoint, heads: list[str], size: int, origin: str, keyid: str, label: str
) -> Problem | None:
    """`heads[i]` is the verified hash of entry i (heads[0] = GENESIS)."""
    if bad := cp.verify_signature():
        return Problem(min(cp.size, size + 1) or None, f"{label}: {bad}")
    if cp.keyid != keyid:
        return Problem(
            None,
            f"{label} is signed by key {cp.keyid[:16]}, the ledger by {keyid[:16]}: "
            "the ledger was re-keyed or replaced",
        )
    if cp.origin != origin:
        return Problem(None, f"{label} is for ledger {cp.origin}, this is {origin}")
    if cp.size > size:
        return Problem(size + 1, f"{label} covers {cp.size} entries, the ledger holds {size}: truncated")
    if cp.size < len(heads) and heads[cp.size] != cp.head:
        return Problem(cp.size, f"{label} (signed {cp.time}) does not match entry {cp.size}: history was rewritten")
    return None


def verify_chain(
    ledger: Ledger,
    *,
    trusted: list[Checkpoint] | None = None,
    pinned_keyids: list[str] | None = None,
    every_checkpoint: bool = True,
) -> ChainReport:
    """Verify the hash chain, every stored checkpoint, and any `trusted` checkpoints held elsewhere.
    `pinned_keyids`: the keys the ledger's may be; `every_checkpoint=False` checks only the latest
    stored signature (a verified chain under a valid signed head is already authentic).

    Read the pin, the stored checkpoints, the entries, then the checkpoints again, so concurrent
    appends never look like a truncation or an uncovered entry."""
    problems: list[Problem] = []
    pinned = ledger.pinned()  # the latest checkpoint acknowledged to a writer (beside the file, or kept)
    early = ledger.checkpoints()
    origin, keyid = ledger.origin, ledger.keyid
    if pinned_keyids and keyid not in pinned_keyids:
        problems.append(Problem(None, f"the ledger is signed by key {keyid[:16]}, which is not a pinned key"))

    heads = [GENESIS]
    size = 0
    for position, entry in enumerate(ledger.entries(), 1):
        size = position
        if len(heads) == position:  # still on the verified prefix
            if bad := _check_entry(entry, position, heads[-1]):
                problems.append(Problem(position, bad))
            else:
                heads.append(entry.hash)

    def holds(cp: Checkpoint, what: str) -> bool:
        if problem := _check_checkpoint(cp, heads, size, origin, keyid, f"{what} {cp.size}"):
            problems.append(problem)
        return problem is None

    late = [cp for cp in ledger.checkpoints() if cp.size <= size]  # newer ones are for entries appended since
    stored = late + [cp for cp in early if cp.size > size]  # read before the entries: truly past them
    checked = sum(holds(cp, "stored checkpoint") for cp in (stored if every_checkpoint else stored[-1:]))
    covered = {cp.size for cp in stored}
    latest = max(covered, default=0)
    if latest < size:
        problems.append(
            Problem(
                latest + 1, f"entries {latest + 1}..{size} are covered by no signed checkpoint (written outside gate)"
            )
        )
    if missing := sorted(set(range(1, min(latest, size) + 1)) - covered):
        problems.append(Problem(missing[0], f"the checkpoint for size {missing[0]} was removed"))
    checked += sum(holds(cp, "held checkpoint") for cp in trusted or [])
    if pinned is not None:  # (not counted when it holds: it repeats a stored checkpoint)
        holds(pinned, "the pinned checkpoint")
    return ChainReport(size=size, verified=len(heads) - 1, head=heads[-1], checkpoints=checked, problems=problems)
