"""The CI journey, end to end, as an integrator and an auditor walk it on a repository of their own.

A throwaway git repository stands for an inference stack (`stack/`, its gate manifests in `ci/`,
its trust policy); main and a pull request's heads are commits in it. Every command is one the
README, docs/baselines.md, docs/audit.md or the dossier print, run by the installed `gate` as a
subprocess in the repository, GitHub Actions' environment set (annotations, job summary):

1. main: `gate record` its reference's answers (docs/baselines.md);
2. the pull request's correct build, gated against main's recording: PASS, exit 0;
3. its broken build: FAIL, exit 1, the failing check and bug class named, annotated on the
   changed file;
4. an approximate change: AWAITING APPROVAL, exit 4; `gate approve` exactly as the dossier prints
   it; `gate verify` as it prints it; the identical re-run: APPROVED, exit 0, no new signature;
   `gate audit trace <commit>` VERIFIED without --dossier;
5. a waiver, its revocation, `gate audit verify` still VERIFIED;
6. `gate diff` of the pull request's two dossiers (and of its latest against the ledger's previous
   run), `gate history` of its manifest (the first failing commit) and of the approved one (HTML).

Nothing is written where no one asked (no ./.gate/ledger.sqlite, no staging folder named). Slow
(a few real runs, about a minute of CPU): marked `journey`, run by .ci/journey.sh from .ci/run.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.journey

REPO_ROOT = Path(__file__).resolve().parents[2]
GATE = str(Path(sys.executable).with_name("gate"))
LOG: list[str] = []
"""What each step printed (its verdict line and exit code), written to $GATE_JOURNEY_LOG when set."""

SERVING = """\
apiVersion: gate/v1
name: serving
description: the stack's chunked prefill (64-token chunks into a static cache), against a full pass
intervention: scheduling
claim:
  level: tolerance
identity: [token-ids, positions, attention-mask]
change:
  paths: [stack/prefill.py]
subject:
  reference:
    adapter: reference
    options: {preset: tiny, path: full}
  candidate:
    adapter: reference
    options: {preset: tiny, path: chunked, chunk_size: 64%(fault)s}
  device: cpu
  dtype: float32
  seed: 0
"""
REPLAYED = "    adapter: recorded\n    options: {baseline: baselines/main}\n"
"""The pull request's manifest: main's recorded answers as the reference (docs/baselines.md)."""


def serving(*, recorded: bool, fault: str = "") -> str:
    text = SERVING % {"fault": f", fault: {fault}" if fault else ""}
    if recorded:
        text = text.replace("    adapter: reference\n    options: {preset: tiny, path: full}\n", REPLAYED)
    return text


class Stack:
    """The throwaway repository, its CI secrets beside it, and the commands run in it."""

    def __init__(self, root: Path) -> None:
        self.repo, self.secrets = root / "stack", root / "secrets"
        self.summary = root / "step-summary.md"
        self.env = {
            **os.environ,
            "GATE_THREADS": "1",
            "GITHUB_ACTIONS": "true",
            "GITHUB_STEP_SUMMARY": str(self.summary),
            "GITHUB_WORKSPACE": str(self.repo),
            "GATE_CHANGED_FILES": str(root / "changed-files.txt"),
        }
        for name in ("GATE_LEDGER", "GATE_TRUST", "GATE_LEDGER_KEY", "GATE_REFERENCE_CACHE", "GATE_COMMIT"):
            self.env.pop(name, None)

    def gate(self, command: str, *, expect: int) -> str:
        """Run a printed `gate ...` command line in the repository; its exit code must be `expect`."""
        words = shlex.split(command)
        assert words[0] == "gate", command
        done = subprocess.run(
            [GATE, *words[1:]], cwd=self.repo, env=self.env, capture_output=True, text=True, timeout=600
        )
        output = done.stdout + done.stderr
        said = (
            "verdict",
            "VERIFIED",
            "NOT VERIFIED",
            "approved:",
            "verified:",
            "waiver #",
            "revocation #",
            "recorded ",
        )
        verdict = [line for line in output.splitlines() if line.strip().startswith(said)]
        LOG.append(f"$ {command}\n  exit {done.returncode}" + "".join(f"\n  {line}" for line in verdict[-3:]))
        assert done.returncode == expect, f"{command}: exit {done.returncode}, expected {expect}\n{output}"
        return output

    def git(self, *args: str) -> str:
        done = subprocess.run(["git", *args], cwd=self.repo, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def commit(self, message: str, files: dict[str, str]) -> str:
        """Write the files, commit them, and make the commit the one CI gates (GITHUB_SHA)."""
        for name, text in files.items():
            (self.repo / name).parent.mkdir(parents=True, exist_ok=True)
            (self.repo / name).write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        head = self.git("rev-parse", "HEAD")
        self.env["GITHUB_SHA"] = head
        return head

    def changed(self, *paths: str) -> None:
        Path(self.env["GATE_CHANGED_FILES"]).write_text("".join(f"{p}\n" for p in paths))


def printed_commands(dossier: Path, verb: str) -> list[str]:
    """The `gate VERB ...` lines of the dossier's What-next box, verbatim."""
    lines = [line.strip() for line in (dossier / "dossier.md").read_text().splitlines()]
    return [line for line in lines if line.startswith(f"gate {verb} ")]


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """main: the stack, its manifests (live reference, and main's recording as the reference), the
    trust policy; the CI keys outside the repository."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    s = Stack(tmp_path)
    s.repo.mkdir()
    s.secrets.mkdir()
    monkeypatch.chdir(tmp_path)
    s.git("init", "-q", "-b", "main")
    s.git("config", "user.email", "ci@example.com")
    s.git("config", "user.name", "ci")
    for who in ("ci", "alice", "bob"):  # `gate keygen --out PREFIX` (docs/audit.md: key rotation)
        s.gate(f"gate keygen --out {s.secrets / who}", expect=0)
        (s.repo / "keys").mkdir(exist_ok=True)
        shutil.copy(s.secrets / f"{who}.pub", s.repo / "keys" / f"{who}.pub")
    trust = """\
apiVersion: gate/trust/v1
people:
  ci: {keys: [keys/ci.pub]}
  alice: {keys: [keys/alice.pub]}
  bob: {keys: [keys/bob.pub]}
run-signers: [ci]
approvers:
  - {people: [alice], interventions: [quantisation, eviction], claims: ["*"]}
waivers:
  - {people: [bob], checks: [prefix-sweep, quality-slices], max-days: 14}
revokers: [alice, bob]
"""
    s.commit(
        "the stack on main",
        {
            ".gitignore": "out/\nbaselines/\naudit/\n",
            "stack/prefill.py": "CHUNK = 64  # tokens per prefill chunk, into a static cache\n",
            "ci/serving.yaml": serving(recorded=False),
            "ci/serving-vs-main.yaml": serving(recorded=True),
            "trust.yaml": trust,
        },
    )
    return s


def test_the_ci_journey(stack: Stack) -> None:
    s = stack
    ci, ledger = s.secrets / "ci.key", "audit/ledger.sqlite"
    run = f"--sign-key {ci} --ledger {ledger} --trust trust.yaml"  # README: gate run M --out D --sign-key K --ledger L

    # 1. main's reference answers, recorded, signed and bound to main's commit (docs/baselines.md:
    # gate record MANIFEST --out BASELINE --sign-key ci.key)
    main_sha = s.env["GITHUB_SHA"]
    s.gate(f"gate record ci/serving.yaml --out baselines/main --sign-key {ci}", expect=0)
    replay = f"{run} --baseline-commit {main_sha}"  # off GitHub: main's commit named (docs/baselines.md)

    # 2. the pull request's correct build, against main's recording: green
    s.git("checkout", "-q", "-b", "pr")
    s.commit("prefill: tidy the chunk loop", {"stack/prefill.py": "CHUNK = 64  # tokens per chunk\n"})
    s.changed("stack/prefill.py")
    out = s.gate(f"gate run ci/serving-vs-main.yaml --out out/pr {replay}", expect=0)
    assert "verdict: PASS" in out
    results = json.loads((s.repo / "out/pr/results.json").read_text())
    assert results["baseline"]["kind"] == "recorded baseline" and results["baseline"]["answers_read"] > 0

    # 3. its broken build (appended tokens encoded one position too far): red, named, annotated
    s.commit(
        "prefill: off-by-one in the appended positions",
        {
            "stack/prefill.py": "CHUNK = 64\nSTART = +1\n",
            "ci/serving-vs-main.yaml": serving(recorded=True, fault="off-by-one-pos"),
        },
    )
    out = s.gate(f"gate run ci/serving-vs-main.yaml --out out/broken {replay}", expect=1)
    results = json.loads((s.repo / "out/broken/results.json").read_text())
    failed = {c["check"]: c for c in results["checks"] if c["status"] == "fail"}
    assert results["verdict"] == "fail" and "prefix-sweep" in failed, out
    assert "::error file=stack/prefill.py" in out, out
    # the bug class is the one main's build run live gives (the replay traces layers against the
    # reference the recording names, built in this job: docs/baselines.md)
    diagnosis = failed["prefix-sweep"]["diagnosis"]
    assert diagnosis["bug_class"] == "positional-index", diagnosis

    # 4. an approximate change: awaiting approval, approved as printed, re-run: approved
    s.git("checkout", "-q", "main")
    s.git("checkout", "-q", "-b", "kv-int8")
    shutil.copy(REPO_ROOT / "examples" / "reference-quant-int8.yaml", s.repo / "ci" / "kv-int8.yaml")
    head = s.commit("kv cache: int8 codes", {"stack/kv.py": "BITS = 8\n"})
    approx = f"gate run ci/kv-int8.yaml --out out/int8 {run}"
    out = s.gate(approx, expect=4)
    assert "verdict: AWAITING APPROVAL" in out and ".partial-" not in out
    (approve,) = printed_commands(s.repo / "out/int8", "approve")
    assert f"--ledger {ledger}" in approve and "--trust trust.yaml" in approve, approve
    out = s.gate(approve.replace("YOUR.key", str(s.secrets / "alice.key")), expect=0)
    assert "approved: out/int8 by alice" in out and "site policy: none" in out
    (verify,) = printed_commands(s.repo / "out/int8", "verify")
    assert "APPROVED by alice" in s.gate(verify, expect=0)
    out = s.gate(approx, expect=0)  # the identical re-run: no new signature
    assert "verdict: APPROVED by alice" in out, out
    trace = s.gate(f"gate audit trace {head} --ledger {ledger} --trust trust.yaml", expect=0)  # README
    assert trace.rstrip().endswith("VERIFIED") and "status    APPROVED by alice" in trace, trace
    assert f"dossier   {s.repo / 'out/int8'}" in trace

    # 5. a waiver, its revocation, and the audit still verifies (docs/audit.md)
    s.git("checkout", "-q", "pr")
    from datetime import date, timedelta

    expires = (date.today() + timedelta(days=7)).isoformat()
    waive = (
        f"gate waive prefix-sweep --manifest ci/serving-vs-main.yaml --reason 'tracked in #12' "
        f"--expires {expires} --key {s.secrets / 'bob.key'} --ledger {ledger} --trust trust.yaml"
    )
    out = s.gate(waive, expect=0)
    waiver = out.split("waiver #", 1)[1].split(":", 1)[0]
    s.gate(f"gate revoke --waiver {waiver} --reason 'fixed in #13' --key {s.secrets / 'bob.key'} --ledger {ledger} "
           "--trust trust.yaml", expect=0)  # fmt: skip
    out = s.gate(f"gate audit verify --ledger {ledger} --trust trust.yaml --checkpoint out/int8", expect=0)
    assert out.rstrip().endswith("VERIFIED") and "was revoked by bob" in out, out

    # 6. the reviewer and the release manager read the journey's ledger (docs/cli.md): what changed
    # between the pull request's two dossiers, and where its check first failed
    broken_sha = s.git("rev-parse", "pr")
    out = s.gate(f"gate diff out/broken --ledger {ledger}", expect=0)
    assert "out/pr" in out and "prefix-sweep" in out and "fail" in out, out
    out = s.gate("gate diff out/pr out/broken --format md", expect=0)
    assert "prefix-sweep" in out and "|" in out, out
    out = s.gate(f"gate history ci/serving-vs-main.yaml --ledger {ledger}", expect=0)
    assert f"first failing commit: {broken_sha[:12]}" in out or f"first failing commit: {broken_sha}" in out, out
    out = s.gate(f"gate history reference-quant-int8 --ledger {ledger} --html out/history.html", expect=0)
    assert "approved by alice" in out, out
    assert "approved" in (s.repo / "out/history.html").read_text()

    # nothing written where no one asked, and no path names the staging folder
    assert not (s.repo / ".gate").exists() and not (s.repo.parent / ".gate").exists()
    listed = s.gate(f"gate audit list --json --ledger {ledger}", expect=0)
    dirs = [json.loads(line).get("dossier", {}).get("dir") for line in listed.splitlines()]
    assert ".partial-" not in json.dumps(dirs) and ".partial-" not in s.summary.read_text()
    target = os.environ.get("GATE_JOURNEY_LOG")
    if target:
        Path(target).write_text("\n".join(LOG) + "\n")
