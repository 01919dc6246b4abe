"""Approvals follow the change through the merge: docs/audit.md's deploy job, run as written.

One approximate change is gated and approved at its pull request's head (two commits) in a
throwaway repository; main moves on. Then each way GitHub lands it makes a new commit, and the
deploy job of docs/audit.md (its `run:` lines, in a full clone, GITHUB_SHA the landed commit) runs
on the head's dossier: (a) a merge commit, (b) a squash, (c) a rebase deploy without a second
approval; (d) a commit pushed after the approval, merged, and (e) a sibling branch do not (exit 8,
both commits named). One run's dossier serves every case. Then the merge commit is gated again:
the head's approval counts for it (APPROVED, exit 0; its verify and trace too), and a run of the
later push still awaits one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.journey.test_ci_journey import GATE, REPO_ROOT, Stack, stack  # noqa: F401  (the fixture)

pytestmark = pytest.mark.journey

DEPLOYED = "deployed"


def recipe() -> list[str]:
    """The `run:` lines of docs/audit.md's deploy job, as written."""
    text = (REPO_ROOT / "docs" / "audit.md").read_text()
    job = text[text.index("deploy:\n  steps:") :]
    job = job[: job.index("```")]
    assert "fetch-depth: 0" in job, "the deploy job needs the git history to read the landing"
    return [m.group(1).split("  #")[0].strip() for m in re.finditer(r"- run: (.+)", job)]


def deploy(s: Stack, name: str, dossier: Path, ledger: Path, commit: str) -> tuple[bool, list[int], str]:
    """The deploy job in a fresh full clone (actions/checkout, fetch-depth 0), the dossier downloaded
    beside it: (deployed, each step's exit code, what the steps printed)."""
    job = s.repo.parent / f"job-{name}"
    subprocess.run(["git", "clone", "-q", str(s.repo), str(job)], check=True)
    subprocess.run(["git", "-C", str(job), "checkout", "-q", commit], check=True)
    shutil.copytree(dossier, job / "dossier")
    (job / "deploy.sh").write_text(f'#!/bin/sh\necho "$1" > {DEPLOYED}\n')
    (job / "deploy.sh").chmod(0o755)
    env = {**s.env, "GITHUB_SHA": commit, "GATE_LEDGER": str(ledger)}
    env["PATH"] = f"{Path(GATE).parent}{os.pathsep}{env['PATH']}"
    codes, said = [], ""
    for step in recipe():
        done = subprocess.run(["bash", "-c", step], cwd=job, env=env, capture_output=True, text=True, timeout=300)
        codes.append(done.returncode)
        said += done.stdout + done.stderr
        if done.returncode != 0:
            break
    return (job / DEPLOYED).is_file(), codes, said


def test_an_approval_follows_the_change_it_approved_and_nothing_else(stack: Stack) -> None:  # noqa: F811
    s = stack
    ci, ledger = s.secrets / "ci.key", s.repo / "audit" / "ledger.sqlite"
    base = s.env["GITHUB_SHA"]

    # the pull request: two commits, gated and approved at its head
    s.git("checkout", "-q", "-b", "kv-int8")
    shutil.copy(REPO_ROOT / "examples" / "reference-quant-int8.yaml", s.repo / "ci" / "kv-int8.yaml")
    s.commit("kv cache: the int8 manifest", {"stack/kv.py": "BITS = 8\n"})
    head = s.commit("kv cache: int8 codes, grouped", {"stack/kv.py": "BITS = 8\nGROUP = 32\n"})
    out = s.gate(
        f"gate run ci/kv-int8.yaml --out out/int8 --sign-key {ci} --ledger {ledger} --trust trust.yaml", expect=4
    )
    assert "verdict: AWAITING APPROVAL" in out
    s.gate(
        f"gate approve out/int8 --key {s.secrets / 'alice.key'} --reason 'bounds hold' --ledger {ledger} "
        "--trust trust.yaml",
        expect=0,
    )
    dossier = s.repo / "out" / "int8"

    # main moves on meanwhile
    s.git("checkout", "-q", "main")
    moved = s.commit("docs: the serving notes", {"stack/NOTES.md": "serving notes\n"})
    assert moved != base

    def land(branch: str, *steps: tuple[str, ...]) -> str:
        s.git("checkout", "-q", "-b", branch, moved)
        for step in steps:
            s.git(*step)
        return s.git("rev-parse", "HEAD")

    merged = land("land-merge", ("merge", "-q", "--no-ff", "-m", "Merge pull request #4", head))
    squashed = land("land-squash", ("merge", "-q", "--squash", head), ("commit", "-q", "-m", "kv cache: int8 (#4)"))
    s.git("checkout", "-q", "-b", "land-rebase", head)
    s.git("rebase", "-q", moved)
    rebased = s.git("rev-parse", "HEAD")
    assert len({head, merged, squashed, rebased}) == 4

    # (d) a change pushed after the approval, then merged; (e) a sibling branch
    s.git("checkout", "-q", "-b", "kv-int4", head)
    later = s.commit("kv cache: int4 after all", {"stack/kv.py": "BITS = 4\nGROUP = 32\n"})
    after = land("land-after", ("merge", "-q", "--no-ff", "-m", "Merge pull request #4 (updated)", later))
    s.git("checkout", "-q", "-b", "sibling", base)
    sibling = s.commit("kv cache: another branch", {"stack/kv.py": "BITS = 8\nGROUP = 64\n"})

    for name, commit, how in (
        ("merge", merged, "merge"),
        ("squash", squashed, "squash"),
        ("rebase", rebased, "rebase"),
    ):
        shipped, codes, said = deploy(s, name, dossier, ledger, commit)
        assert (shipped, codes) == (True, [0, 0, 0]), f"{name}: {codes}\n{said}"
        assert f"commit {commit} lands the verified commit {head}" in said, said
        assert how in said and "APPROVED by alice" in said and said.count("lands the verified commit") == 2, said
    for name, commit in (("after", after), ("sibling", sibling)):
        shipped, codes, said = deploy(s, name, dossier, ledger, commit)
        assert (shipped, codes) == (False, [8]), f"{name}: {codes}\n{said}"
        assert f"OTHER COMMIT: dossier: the signed statement is for commit {head}, not {commit}" in said, said
        assert "APPROVED" not in said, said
        assert ("changed since it was verified" in said) == (name == "after"), said

    # re-gated at the landed commit: the approval of the head counts (same evidence but the commit);
    # re-gated after a later push: it does not
    run = f"--sign-key {ci} --ledger {ledger} --trust trust.yaml"
    s.git("checkout", "-q", "land-merge")
    s.env["GITHUB_SHA"] = merged
    out = s.gate(f"gate run ci/kv-int8.yaml --out out/merged {run}", expect=0)
    assert "verdict: APPROVED by alice" in out, out
    assert f"of {head}, landed by merge {merged[:12]} of {head[:12]}" in out, out
    out = s.gate(f"gate verify out/merged --trust trust.yaml --commit {merged} --ledger {ledger}", expect=0)
    assert f"landed by merge {merged[:12]}" in out and "APPROVED by alice" in out, out
    out = s.gate(f"gate audit trace {merged} --trust trust.yaml --ledger {ledger}", expect=0)
    assert out.rstrip().endswith("VERIFIED") and "status    APPROVED by alice" in out, out
    s.git("checkout", "-q", "land-after")
    s.env["GITHUB_SHA"] = after
    out = s.gate(f"gate run ci/kv-int8.yaml --out out/after {run}", expect=4)
    assert "verdict: AWAITING APPROVAL" in out and "landed by" not in out, out

    # a commit no clone knows is said so, and is no landing either
    shipped, codes, said = deploy(s, "head", dossier, ledger, head)
    assert (shipped, codes) == (True, [0, 0, 0]), said
    unknown = "0123456789abcdef0123456789abcdef01234567"
    verify = subprocess.run(
        [GATE, "verify", "out/int8", "--trust", "trust.yaml", "--commit", unknown],
        cwd=s.repo,
        env=s.env,
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 8, verify.stdout + verify.stderr
    assert f"git does not know commit {unknown}" in verify.stderr
