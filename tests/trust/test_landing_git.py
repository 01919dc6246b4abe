"""gate.trust.landing on a real throwaway git repository: which commits land a verified commit
unchanged (merge of it, squash, rebase, same tree) and which do not (a later push, a sibling, a
commit git does not know). Fast: no gate run (tests/journey/test_landing.py runs the deploy job)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gate.trust.landing import landing

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


class Repo:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "t@example.com")
        self.git("config", "user.name", "t")

    def git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True, check=True).stdout.strip()

    def commit(self, message: str, **files: str) -> str:
        for name, text in files.items():
            (self.root / name).write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo(tmp_path)
    r.commit("main", app="a = 1\n", kv="bits = 16\n")
    return r


def test_merge_squash_and_rebase_land_the_head_and_a_later_push_or_a_sibling_do_not(repo: Repo) -> None:
    base = repo.git("rev-parse", "HEAD")
    repo.git("checkout", "-q", "-b", "pr")
    repo.commit("one", kv="bits = 8\n")
    head = repo.commit("two", kv="bits = 8\ngroup = 32\n")
    repo.git("checkout", "-q", "main")
    moved = repo.commit("main moves", notes="n\n")

    def on(branch: str, start: str, *steps: tuple[str, ...]) -> str:
        repo.git("checkout", "-q", "-b", branch, start)
        for step in steps:
            repo.git(*step)
        return repo.git("rev-parse", "HEAD")

    merged = on("m", moved, ("merge", "-q", "--no-ff", "-m", "merge", head))
    squashed = on("s", moved, ("merge", "-q", "--squash", head), ("commit", "-q", "-m", "squash"))
    rebased = on("r", head, ("rebase", "-q", moved))
    same_tree = on("t", base, ("merge", "-q", "--squash", head), ("commit", "-q", "-m", "squash, main unmoved"))
    later = on("later", head)
    later = repo.commit("pushed after", kv="bits = 4\ngroup = 32\n")
    after = on("a", moved, ("merge", "-q", "--no-ff", "-m", "merge later", later))
    later_squash = on("ls", moved, ("merge", "-q", "--squash", later), ("commit", "-q", "-m", "squash later"))
    sibling = on("sib", base)
    sibling = repo.commit("sibling", kv="bits = 8\ngroup = 64\n")
    other_merge = on("om", moved, ("merge", "-q", "--no-ff", "-m", "merge sibling", sibling))
    # an "evil merge": the approved head merged, with a change of the merge's own amended in
    evil = on("e", moved, ("merge", "-q", "--no-ff", "-m", "merge", head))
    (repo.root / "app").write_text("a = 2\n")
    repo.git("commit", "-q", "-a", "--amend", "--no-edit")
    evil = repo.git("rev-parse", "HEAD")

    landed = {
        "merged": merged,
        "squashed": squashed,
        "rebased": rebased,
        "same_tree": same_tree,
        "after": after,
        "later_squash": later_squash,
        "sibling": sibling,
        "other_merge": other_merge,
        "evil": evil,
    }
    how = {name: landing(head, commit, repo.root) for name, commit in landed.items()}
    assert {n: (found.how.split()[0] if found else None) for n, (found, _) in how.items()} == WANTED, how
    assert how["merged"][0] is not None and how["merged"][0].text.startswith(f"commit {merged} lands the verified")
    assert "changed since it was verified" in how["after"][1], how["after"]
    assert "other files than git's clean merge of its parents" in how["evil"][1], how["evil"]
    assert "another tree and another patch" in how["sibling"][1] and "not " + head[:12] in how["other_merge"][1]
    assert landing(head, head, repo.root)[0] is not None  # the head itself
    assert landing(head, base, repo.root)[0] is None  # main before the change holds none of it
    unknown = "0123456789abcdef0123456789abcdef01234567"
    assert landing(head, unknown, repo.root) == (None, f"git does not know commit {unknown} in {repo.root} "
                                                       "(a deploy job needs a full clone)")  # fmt: skip
    assert "git does not know the verified commit" in landing(unknown, merged, repo.root)[1]
    assert len(set(landed.values())) == len(landed)


WANTED = {
    "merged": "merge",
    "squashed": "squash",
    "rebased": "rebase",
    "same_tree": "same",
    "after": None,
    "later_squash": None,
    "sibling": None,
    "other_merge": None,
    "evil": None,
}


def test_verify_and_trace_of_the_merge_commit_accept_the_heads_approved_dossier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner, Result

    from gate.cli.main import cli
    from gate.errors import EXIT_OTHER_COMMIT
    from tests.trust.runs import quant_manifest, signed_run
    from tests.trust.trusted import make_keys, write_trust

    (tmp_path / "repo").mkdir()
    repo = Repo(tmp_path / "repo")
    base = repo.commit("main", kv="bits = 16\n")
    repo.git("checkout", "-q", "-b", "pr")
    head = repo.commit("int8", kv="bits = 8\n")
    repo.git("checkout", "-q", "main")
    repo.commit("main moves", notes="n\n")
    repo.git("merge", "-q", "--no-ff", "-m", "Merge pull request #4", head)
    merged = repo.git("rev-parse", "HEAD")
    repo.git("checkout", "-q", "-b", "sibling", base)
    sibling = repo.commit("sibling", kv="bits = 4\n")

    keys = make_keys(tmp_path / "keys", ("ci", "alice"))
    trust = write_trust(tmp_path / "trust.yaml", keys, approvers=("alice",))
    ledger = tmp_path / "audit" / "ledger.sqlite"
    monkeypatch.chdir(repo.root)  # gate reads git where it runs
    monkeypatch.setenv("GATE_TRUST", str(trust))
    out, _ = signed_run(tmp_path / "out", quant_manifest(tmp_path / "m.yaml", head), keys["ci.key"], ledger=ledger)

    def gate(*args: object) -> Result:
        return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)

    done = gate("approve", out, "--key", keys["alice.key"], "--reason", "ok", "--ledger", ledger)
    assert done.exit_code == 0, done.output
    verify = gate("verify", out, "--commit", merged, "--ledger", ledger)
    said = verify.output
    assert verify.exit_code == 0, said
    assert f"ok   commit {merged} lands the verified commit {head} (merge {merged[:12]}" in said, said
    assert "verdict APPROVED by alice" in said, said
    traced = gate("audit", "trace", merged, "--ledger", ledger)
    said = traced.output
    assert traced.exit_code == 0 and "status    APPROVED by alice" in said, said
    assert f"commit {merged} lands the verified commit {head}" in said, said
    other = gate("verify", out, "--commit", sibling[:10], "--ledger", ledger)
    said = other.output
    assert other.exit_code == EXIT_OTHER_COMMIT, said
    assert f"OTHER COMMIT: {out}: the signed statement is for commit {head}, not {sibling[:10]}" in said, said
    assert gate("audit", "trace", sibling, "--ledger", ledger).exit_code == 2
