"""Every command a dossier's "What next" box prints ends with the exit code printed beside it.

Each example runs as a reader would from the repository root (`gate run examples/NAME.yaml --out
out/NAME --sign-key CI.key`, in a farm: a temporary directory linking this checkout's examples,
policies, ... with the keys `CI.key` and `YOUR.key` that the printed commands name and a trust.yaml
naming them as run signer and approver). Then every step its dossier.md prints runs verbatim, in
printed order (the approval before the verify that counts it), and must exit with the code its
`expect exit N` line says, which the dossier derived from its own results (gate.report.next_steps).

The fast case (the normal suite): the amber pass of issue 49, a correct third-party engine offering
the attention probe (tests/plugins/gate-plugin-tinylm), whose reproduce command must name the checks
that stand in for mask-oracle or it ends UNPROVEN. The slow lane (marked `next_steps`, run by
.ci/next-steps.sh, `make next-steps-test`): every shipped example that runs on a CPU in the main
environment (reference-* and hf-*, as benchmarks/examples.py runs them), less the ones documented
as rejected (a manifest the policy refuses: nothing runs, nothing is printed) and the kvpress ones
(their own venv: .ci/kvpress.sh).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gate.core.manifest import ClaimLevel
from gate.core.result import GateResult
from gate.engine.runner import decide
from gate.report.next_steps import expected_run
from gate.trust.keys import generate_keypair
from tests.report import results as fx

REPO_ROOT = Path(__file__).resolve().parents[2]
TINYLM = REPO_ROOT / "tests" / "plugins" / "gate-plugin-tinylm"
LINKED = ["examples", "policies", "scenarios", "benchmarks", "checks", "evals", "templates", "tests"]
"""What the farm links from this checkout (read, never written: every --out goes to the farm's out/)."""
TIMEOUT_S = 600
EXPECT = re.compile(r"^expect exit (\d+)(?: \((.+)\))?$")
TRUST = """\
apiVersion: gate/trust/v1
people:
  ci: {keys: [CI.pub]}
  you: {keys: [YOUR.pub]}
run-signers: [ci]
approvers:
  - {people: [you], interventions: ["*"], claims: ["*"]}
"""


@dataclass(frozen=True)
class Printed:
    command: str
    expect_exit: int
    expect: str


def printed_steps(dossier: Path) -> list[Printed]:
    """The What-next box of DIR/dossier.md: each command verbatim with the exit code printed under it
    (a command printed without one fails here: every step must say where it ends)."""
    if not (dossier / "dossier.md").exists():  # a run stopped before any check (exit 2 or 3): nothing printed
        return []
    lines = [line.strip() for line in (dossier / "dossier.md").read_text().splitlines()]
    if "### What next" not in lines:
        return []
    box = lines[lines.index("### What next") + 1 :]
    box = box[: next((i for i, line in enumerate(box) if line.startswith("### ")), len(box))]
    steps: list[Printed] = []
    command, inside = None, False
    for line in box:
        if line == "```":
            inside = not inside
        elif inside:
            command = line
        elif (found := EXPECT.match(line)) and command is not None:
            steps.append(Printed(command, int(found.group(1)), found.group(2) or ""))
            command = None
        else:
            assert command is None, f"{dossier}: printed without its expected exit code: {command}"
    assert command is None, f"{dossier}: printed without its expected exit code: {command}"
    return steps


def environment(*paths: Path) -> dict[str, str]:
    """This interpreter's `gate` first on PATH, this checkout (and `paths`) importable first, nothing a
    CI runner or the reader's shell set that would change what gate finds (a ledger, a trust policy)."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GATE_", "CI", "RUNNER_"))}
    python_path = [str(REPO_ROOT), *(str(p) for p in paths), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        **keep,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(python_path),
        "GATE_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "NO_COLOR": "1",
    }


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """COMMAND as a reader types it, in a shell at `cwd`."""
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def make_farm(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        (root / name).symlink_to(REPO_ROOT / name)
    for who in ("CI", "YOUR"):  # what `gate keygen --out CI` (YOUR) makes
        generate_keypair(root / who)
    (root / "trust.yaml").write_text(TRUST)
    return root


def run_printed(directory: Path, cwd: Path, env: dict[str, str]) -> list[Printed]:
    """Every step DIR's dossier prints, run as printed in order; each must end as it says."""
    steps = printed_steps(directory)
    for step in steps:
        ran = shell(step.command, cwd, env)
        said = next((line for line in ran.stdout.splitlines() if line.startswith(("verdict:", "verified:"))), "")
        assert ran.returncode == step.expect_exit, (
            f"{step.command}\n  printed: expect exit {step.expect_exit} ({step.expect}); ended {ran.returncode}: "
            f"{said or ran.stderr.strip()[-600:]}"
        )
    return steps


@pytest.mark.parametrize(
    "result",
    [fx.passing_run(), fx.failing_parity_run(), fx.speculative_run(), fx.slice_run(), fx.awaiting_run()],
    ids=["passing", "failing", "speculative", "slices", "awaiting"],
)
def test_a_predicted_exit_is_the_one_the_runner_decides(result: GateResult) -> None:
    """expected_run judges a `--check` subset of a dossier's results by the rule the runner applies
    (gate.engine.runner.decide, which gate.report may not import): the two never drift apart."""
    names = [c.check for c in result.checks]
    claim = ClaimLevel(result.manifest["claim"]["level"])
    subsets = [[n] for n in names] + [names[:2], names]
    for only in subsets:
        chosen = [c for c in result.checks if c.check in only]
        not_run = [n for n in names if n not in only]
        _verdict, code, _summary = decide(chosen, claim, not_run)
        assert expected_run(result, only)[0] == (code if not_run else result.exit_code), only


def test_an_amber_pass_reproduces_mask_oracle_with_its_stand_ins(tmp_path: Path) -> None:
    """tinylm with its attention probe: mask-oracle ran, none of its controls could, and the sweep and
    the fuzzer stand in for it (a warning, exit 0). Alone it would end UNPROVEN (exit 6); the printed
    command names the stand-ins and ends as the dossier predicts, a partial run (exit 5)."""
    env = environment(TINYLM)
    farm = make_farm(tmp_path / "farm")
    text = (REPO_ROOT / "tests/engine/tinylm/kv-cache.yaml").read_text()
    probed = text.replace("options: {engine: kv-cache}", "options: {engine: kv-cache, probe: true}")
    assert probed != text
    (farm / "probed.yaml").write_text(probed)
    ran = shell("gate run probed.yaml --out out/probed --sign-key CI.key", farm, env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    steps = run_printed(farm / "out/probed", farm, env)
    (reproduce,) = steps  # a pass: no verify step, nothing to approve
    assert reproduce.command == (
        "gate run probed.yaml --out out/probed-mask-oracle --check mask-oracle --check prefix-sweep "
        "--check schedule-fuzz -v"
    )
    assert (reproduce.expect_exit, reproduce.expect) == (5, "PARTIAL RUN")
    # without its stand-ins the same check is judged otherwise: why they are in the command
    alone = shell("gate run probed.yaml --out out/alone --check mask-oracle", farm, env)
    assert alone.returncode == 6, alone.stdout + alone.stderr


def _documented(path: Path) -> str:
    return path.read_text().split("\n", 1)[0].removeprefix("# gate-expect: ").strip()


LANE = sorted(
    p.stem
    for p in (REPO_ROOT / "examples").glob("*.yaml")
    if p.stem.startswith(("reference-", "hf-"))
    and not p.stem.startswith("hf-kvpress-")
    and _documented(p) != "rejected"
)
if chosen := os.environ.get("GATE_NEXT_STEPS_EXAMPLES"):  # a named subset (.ci/next-steps.sh ci)
    unknown = set(chosen.split(",")) - set(LANE)
    assert not unknown, f"GATE_NEXT_STEPS_EXAMPLES names no example of the lane: {sorted(unknown)}"
    LANE = [name for name in LANE if name in chosen.split(",")]


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_farm(tmp_path_factory.mktemp("next-steps") / "farm")


@pytest.mark.next_steps
@pytest.mark.parametrize("name", LANE)
def test_every_printed_step_of_an_example_ends_as_predicted(name: str, farm: Path) -> None:
    env = environment()
    manifest, out = f"examples/{name}.yaml", f"out/{name}"
    ran = shell(f"gate run {shlex.quote(manifest)} --out {shlex.quote(out)} --sign-key CI.key", farm, env)
    assert ran.returncode not in (2, 124), ran.stdout + ran.stderr
    steps = run_printed(farm / out, farm, env)
    if ran.returncode in (1, 4, 6):  # a failure, an approval or an unproven check always has a next step
        assert steps, f"{name}: exit {ran.returncode}, and the dossier prints no next step"
