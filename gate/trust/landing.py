"""Whether a commit lands an approved (or verified) commit unchanged: merge, squash or rebase.

A dossier of a pull request's head stands for the commit that lands it only when git says that
commit holds exactly what was judged: a **merge** whose non-first parent is the judged commit and
whose tree is git's clean merge of its parents (`git merge-tree --write-tree`, git 2.38+); a
**squash** or **rebase** with the judged commit's tree, or the same `git patch-id` as the judged
change. Git is read from the repository gate runs in, never a network.
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gate._util.digest import ref_matches
from gate.trust.approval_predicate import ApprovalPredicate, ApprovalRefused, RunStatement, read_run_statement
from gate.trust.approvals import ApprovalRecord
from gate.trust.evidence import evidence_digest
from gate.trust.ledger import Entry
from gate.trust.statement import parse_statement

GIT_TIMEOUT_S = 30


@dataclass(frozen=True)
class Landing:
    judged: str
    landed: str
    how: str

    @property
    def text(self) -> str:
        return f"commit {self.landed} lands the verified commit {self.judged} ({self.how})"


def _git(repo: Path, *args: str, stdin: str | None = None) -> str | None:
    """git's stdout (stripped), or None when git fails."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def resolve(commit: str, repo: Path | None = None) -> str | None:
    return _git(repo or Path.cwd(), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")


def _patch_id(repo: Path, base: str, tip: str) -> str | None:
    if not (diff := _git(repo, "diff", "--binary", base, tip)):
        return None
    out = _git(repo, "patch-id", "--stable", stdin=diff + "\n")
    return out.split()[0] if out else None


def landing(judged: str, landed: str, repo: Path | None = None) -> tuple[Landing | None, str]:
    """(how `landed` lands `judged`, or None and why not). Both are commits or short shas."""
    where = repo or Path.cwd()
    old, new = resolve(judged, where), resolve(landed, where)
    if new is None:
        return None, f"git does not know commit {landed} in {where} (a deploy job needs a full clone)"
    if old is None:
        return None, f"git does not know the verified commit {judged} in {where} (fetch it: a full clone)"
    return _relation(old, new, where)


@functools.lru_cache(maxsize=4096)
def _relation(old: str, new: str, where: Path) -> tuple[Landing | None, str]:
    if old == new:
        return Landing(old, new, "the same commit"), ""
    parents = (_git(where, "rev-list", "--parents", "-n", "1", new) or "").split()[1:]
    if len(parents) > 1:
        if old in parents[1:]:
            # the merge must hold what git's own merge of its parents makes: a merge that resolved
            # conflicts by hand, or added changes of its own (an "evil merge"), holds code nobody gated
            clean = (_git(where, "merge-tree", "--write-tree", *parents) or "").split("\n")[0]
            if clean != _git(where, "rev-parse", f"{new}^{{tree}}"):
                return None, (
                    f"merge {new[:12]} of {old[:12]} holds other files than git's clean merge of its parents "
                    "(conflicts resolved by hand, or changes of its own): re-gate the merge commit"
                )
            return Landing(old, new, f"merge {new[:12]} of {old[:12]} into {parents[0][:12]}"), ""
        later = [p[:12] for p in parents[1:] if _git(where, "merge-base", "--is-ancestor", old, p) is not None]
        since = f" ({', '.join(later)} has commits after it: changed since it was verified)" if later else ""
        return None, f"merge {new[:12]} merges {', '.join(p[:12] for p in parents[1:])}, not {old[:12]}{since}"
    if not parents:
        return None, f"commit {new[:12]} has no parent, so it lands no change"
    if _git(where, "rev-parse", f"{old}^{{tree}}") == _git(where, "rev-parse", f"{new}^{{tree}}"):
        return Landing(old, new, f"same tree: {new[:12]} holds exactly the files of {old[:12]}"), ""
    base = _git(where, "merge-base", old, new)
    if base is None or base == old:
        return None, f"{new[:12]} does not hold the change of {old[:12]} as it was verified"
    judged_patch = _patch_id(where, base, old)
    count = int(_git(where, "rev-list", "--count", "--first-parent", f"{base}..{old}") or 0)
    for back, how in ((1, "squash"), (count, "rebase")):
        start = _git(where, "rev-parse", "--verify", "--quiet", f"{new}~{back}")
        if judged_patch and start and _patch_id(where, start, new) == judged_patch:
            return Landing(old, new, f"{how} {new[:12]}: the same patch as {old[:12]} onto {start[:12]}"), ""
    return None, f"{new[:12]} does not hold the change of {old[:12]} unchanged (another tree and another patch)"


@dataclass(frozen=True)
class AskedCommit:
    """What `gate verify DIR --commit ASKED` binds, how ASKED lands the signed commit, or why not."""

    bind: str | None
    landed: Landing | None = None
    other: str | None = None


def asked_commit(directory: Path, asked: str | None, repo: Path | None = None) -> AskedCommit:
    """Bind ASKED when the dossier names it (or none, or is unreadable: `check_run` says so); else
    the signed commit when ASKED lands it; else nothing, with the line naming both commits."""
    if asked is None:
        return AskedCommit(None)
    try:
        signed = read_run_statement(directory).commit
    except ApprovalRefused:
        return AskedCommit(asked)
    if signed is None or ref_matches(signed, asked):
        return AskedCommit(asked)
    found, why = landing(signed, asked, repo)
    if found is not None:
        return AskedCommit(signed, landed=found)
    return AskedCommit(None, other=f"the signed statement is for commit {signed}, not {asked}: {why}")


def run_commit(run: Entry) -> str | None:
    commit = (run.body.get("change") or {}).get("commit")
    return str(commit) if commit else None


def landed_runs(runs: Iterable[Entry], ref: str, repo: Path | None = None) -> dict[int, Landing]:
    """The run entries (by number) whose signed-for commit `ref` lands (`gate audit trace MERGE_SHA`)."""
    if resolve(ref, repo) is None:
        return {}
    seen: dict[str, Landing | None] = {}
    found: dict[int, Landing] = {}
    for run in runs:
        if not (commit := run_commit(run)):
            continue
        if commit not in seen:
            seen[commit] = landing(commit, ref, repo)[0]
        if (hit := seen[commit]) is not None:
            found[run.seq] = hit
    return found


@dataclass(frozen=True)
class LandedApproval:
    """An approval of the commit a run's commit lands: the run's evidence with its commit put back
    to the approved one (`evidence`, what the approval must name), and how it landed."""

    evidence: str
    landing: Landing

    def says(self, label: str) -> str:
        return f"{label} of {self.landing.judged}, landed by {self.landing.how}"


def approval_landing(
    record: ApprovalRecord | None, directory: Path, commit: str | None, run: RunStatement | None = None
) -> LandedApproval | None:
    """When `record` approved another commit (same manifest) that `commit`, DIR's run's, lands: DIR's
    evidence digest with the approved commit in place of its own, which the approval must name."""
    if record is None or not commit or not record.evidence_sha256:
        return None
    try:
        pred = ApprovalPredicate.model_validate(parse_statement(record.envelope.payload_bytes()).predicate)
        run = run or read_run_statement(directory)
    except (ValueError, ApprovalRefused):  # ValidationError is a ValueError
        return None
    if not pred.commit or pred.commit == commit or pred.manifest.sha256 != run.predicate.manifest.sha256:
        return None
    found, _why = landing(pred.commit, commit)
    if found is None:
        return None
    evidence = evidence_as_of(directory, run.statement.files(), pred.commit)
    return LandedApproval(evidence, found) if evidence else None


def landed_approvals(approvals: Iterable[Entry], have: list[Entry], directory: Path, commit: str | None) -> list[Entry]:
    """The approval entries, beyond `have`, of a commit that `commit` (DIR's run's) lands."""
    try:
        run = read_run_statement(directory)
    except ApprovalRefused:
        return []
    if run.predicate.verdict != "awaiting-approval":
        return []  # only an approximate change's run counts approvals
    known = {e.seq for e in have}
    found = []
    for entry in approvals:
        if entry.seq in known:
            continue
        landed = approval_landing(ApprovalRecord.of_entry(entry.body), directory, commit, run)
        if landed is not None and landed.evidence == entry.body.get("evidence_sha256"):
            found.append(entry)
    return found


def evidence_as_of(directory: Path, files: dict[str, str], commit: str) -> str | None:
    """DIR's evidence digest with the change's commit set to `commit` (None: no readable results)."""
    try:
        results = json.loads((directory / "results.json").read_bytes())
        results["manifest"]["change"]["commit"] = commit
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return evidence_digest(results, files)
