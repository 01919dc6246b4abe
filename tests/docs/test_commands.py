"""The extractor tests/docs/test_docs_run.py runs the docs with, and the docs' own markers (fast)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.docs.commands import SHELL, all_blocks, blocks, comment_start

DOC = """\
# title

<!-- gate-docs: file trust.yaml -->
```yaml
a: 1
```

```sh
. .venv/bin/activate          # puts gate on PATH
gate run m.yaml --out out \\
    --param x=1   # exit 4: awaiting approval
# a comment line is no command
gate verify out --run-key k.pub   # offline; exit 7 unless deployable
echo "a # not a comment"  # exit 3
```

<!-- gate-docs: skip needs a live engine server -->
```bash
gate run engine.yaml --out e
```
"""


def parse(tmp_path: Path, text: str) -> list:
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "README.md").write_text(text)
    return blocks(tmp_path / "README.md", tmp_path)


def test_commands_joined_with_their_documented_exit_codes(tmp_path: Path) -> None:
    trust, shell, engine = parse(tmp_path, DOC)
    assert (trust.writes, trust.body, trust.skip) == ("trust.yaml", ["a: 1"], None)
    assert [(c.line, c.expect) for c in shell.commands] == [(9, 0), (10, 4), (13, 0), (14, 3)]
    assert shell.commands[1].text == "gate run m.yaml --out out \\\n--param x=1   # exit 4: awaiting approval"
    assert (engine.skip, engine.line, [c.text for c in engine.commands]) == (
        "needs a live engine server",
        18,
        ["gate run engine.yaml --out e"],
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("<!-- gate-docs: skip far away -->\n\ntext\n```sh\ngate x\n```\n", "directly above a fenced block"),
        ("<!-- gate-docs: skip -->\n```sh\ngate x\n```\n", "needs a reason or a file name"),
        ("<!-- gate-docs: skip why -->\n```yaml\na: 1\n```\n", "only a shell block can be skipped"),
        ("```sh\ngate x \\\n```\n", "no line after it"),
        ("```sh\ngate x\n", "never closes"),
        ("<!-- gate-docs: skipped why -->\n```sh\ngate x\n```\n", "not a gate-docs marker"),
    ],
)
def test_a_misplaced_or_malformed_marker_is_an_error_naming_its_line(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)) as raised:
        parse(tmp_path, text)
    assert str(raised.value).startswith("README.md:")


def test_the_docs_parse_and_every_shell_block_either_runs_or_says_why_not() -> None:
    """The skip list is exactly the marked blocks: an unmarked block has commands and runs."""
    found = all_blocks()
    shell = [b for b in found if b.lang in SHELL]
    assert len(shell) >= 25, len(shell)
    for block in shell:
        assert block.commands, f"{block.where}: a shell block with no command"
    skipped = {b.where for b in shell if b.skip is not None}
    assert {b.where for b in found if b.skip is not None} == skipped
    runnable = [c for b in shell if b.skip is None for c in b.commands]
    assert len(runnable) >= 40, len(runnable)
    assert any(b.file == "README.md" and b.writes == "trust.yaml" for b in found)


PLACEHOLDER = re.compile(r"<[a-z][a-z -]*>|\bM\.yaml\b|/shared/|postgresql://|\.\.\.|…")


def test_a_runnable_command_carries_no_placeholder() -> None:
    """`<commit>`, `M.yaml`, `/shared/...`, `...`: a block holding one must be made real or marked."""
    for block in all_blocks():
        if block.lang in SHELL and block.skip is None:
            for command in block.commands:
                last = command.text.splitlines()[-1]
                at = comment_start(last)
                code = command.text[: len(command.text) - len(last) + at] if at >= 0 else command.text
                assert not PLACEHOLDER.search(code), f"{command.where}: a placeholder in a runnable command: {code}"


def test_no_command_hides_in_an_untagged_block() -> None:
    """A bare fence is output or a synopsis (`text`), never commands the test would not see."""
    for block in all_blocks():
        if block.lang == "":
            starts = [line for line in block.body if re.match(r"\s*(gate|make|python|pip) ", line)]
            assert not starts, f"{block.where}: commands in an untagged block: tag it sh (or text for a synopsis)"


def test_the_readme_names_the_commands_that_run_what_make_test_leaves_out() -> None:
    """`make test` deselects the journey and the docs (pyproject addopts); README names `make journey`
    and `make docs-test`, each the script .ci/run runs, and the Makefile's install line is install.md's."""
    root = Path(__file__).resolve().parents[2]
    addopts = re.search(r'^addopts = "(.*)"$', (root / "pyproject.toml").read_text(), re.M)
    assert addopts and "not journey" in addopts.group(1) and "not docs" in addopts.group(1)
    makefile, ci = (root / "Makefile").read_text(), (root / ".ci" / "run").read_text()
    readme = (root / "README.md").read_text()
    for target, script in (("journey", ".ci/journey.sh"), ("docs-test", ".ci/docs.sh")):
        assert re.search(rf"^make {target} +# .*{re.escape(script)}", readme, re.M), target
        assert re.search(rf"^{target}: .*\n\tbash {re.escape(script)}$", makefile, re.M), target
        assert re.search(rf"^ *timed {re.escape(script)}\b", ci, re.M), script  # in a lane or not
    extras = re.search(r'pip install --quiet -c constraints.txt -e "(\.\[[a-z,]+\])"', makefile)
    assert extras and f'"{extras.group(1)}"' in (root / "docs" / "install.md").read_text().replace("\n", " ")


@pytest.mark.parametrize(
    ("variables", "engine", "vllm", "gated"),
    [
        (
            [],
            "--builds all --examples all --out benchmarks/engine-releases.md",
            "--out benchmarks/vllm-releases.md",
            "--table benchmarks/vllm-releases.md --out benchmarks/engine-releases-vllm.md",
        ),
        (
            ["BUILDS=b11549", "EXAMPLES=engine-llamacpp-hosted", "VLLM=0.32.0,0.31.0", "ENGINE_OUT=out/er"],
            "--builds b11549 --examples engine-llamacpp-hosted --out out/er/engine-releases.md",
            "--out out/er/vllm-releases.md --only 0.32.0 --only 0.31.0",
            "--table out/er/vllm-releases.md --out out/er/engine-releases-vllm.md --only 0.32.0 --only 0.31.0",
        ),
        (["BUILDS=b9538,b10068", "VLLM=none"], "--builds b9538,b10068 --examples all", None, None),
        (
            ["BUILDS=none", "VLLM=0.30.0"],
            None,
            "--out benchmarks/vllm-releases.md --only 0.30.0",
            "--table benchmarks/vllm-releases.md --out benchmarks/engine-releases-vllm.md --only 0.30.0",
        ),
    ],
)
def test_make_engine_releases_runs_the_engine_matrix_then_the_vllm_releases(
    variables: list[str], engine: str | None, vllm: str | None, gated: str | None
) -> None:
    """`make engine-releases` (README, docs/engines.md): engine_builds.py over the builds and examples
    asked (all by default; BUILDS=none: none), then vllm_releases.py over every release, those named
    (--only each), or none, then engine_vllm_releases.py gating the same releases from the table
    vllm_releases.py wrote. `make -n` on the real Makefile, the install stamp taken as made (-o)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        # under `make test` this make is nested: without --no-print-directory it ends "make[1]: Leaving ..."
        ["make", "-n", "--no-print-directory", "-o", ".venv/.gate-installed", "engine-releases", *variables],
        cwd=root, capture_output=True, text=True, check=True,
    )  # fmt: skip
    script = " ".join(done.stdout.replace("\\\n", " ").split())
    if engine is None:
        assert '[ "none" != none ]; then .venv/bin/python benchmarks/engine_builds.py' in script  # skipped
    else:
        assert f"benchmarks/engine_builds.py {engine}" in script
    if vllm is None:
        assert '[ "none" != none ]; then .venv/bin/python benchmarks/vllm_releases.py' in script  # skipped
    else:
        assert f"benchmarks/vllm_releases.py {vllm} || status=1" in script
        assert f"benchmarks/engine_vllm_releases.py {gated} || status=1" in script
        assert script.index("vllm_releases.py --out") < script.index("engine_vllm_releases.py")
    assert script.endswith("exit $status")
    assert re.search(r"^make engine-releases +# .*docs/engines\.md", (root / "README.md").read_text(), re.M)
