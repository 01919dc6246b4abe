"""Keys and a trust policy for the trust tests: a CI run signer, approvers, a waiver granter, strangers."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from gate.trust.keys import generate_keypair

PEOPLE = ("ci", "alice", "bob", "carol", "dave", "erin", "frank", "mallory")


def make_keys(root: Path, names: tuple[str, ...] = PEOPLE) -> dict[str, Path]:
    """`name.key` and `name.pub` for each name under root."""
    found = {}
    for name in names:
        key, pub, _ = generate_keypair(root / name)
        found[f"{name}.key"], found[f"{name}.pub"] = key, pub
    return found


def write_trust(
    path: Path,
    keys: dict[str, Path],
    *,
    approvers: tuple[str, ...] = ("alice", "carol", "dave", "erin", "frank"),
    required_approvals: int = 1,
    max_days: int = 14,
    run_signers: tuple[str, ...] = ("ci",),
    extra_ci_keys: tuple[Path, ...] = (),
    waiver_people: tuple[str, ...] = ("bob",),
    waiver_checks: tuple[str, ...] = ("quality-slices",),
) -> Path:
    """trust.yaml: ci signs runs; approvers approve approximate changes; bob waives quality-slices.

    mallory holds no key in it."""
    people = [k[: -len(".pub")] for k in keys if k.endswith(".pub") and k != "mallory.pub"]
    lines = ["apiVersion: gate/trust/v1", "people:"]
    for name in people:
        refs = [str(keys[f"{name}.pub"])] + ([str(k) for k in extra_ci_keys] if name in run_signers else [])
        lines.append(f"  {name}:")
        lines.append(f"    keys: [{', '.join(refs)}]")
    lines += [
        f"run-signers: [{', '.join(run_signers)}]",
        "approvers:",
        f"  - people: [{', '.join(a for a in approvers if a in people)}]",
        "    interventions: [quantisation, eviction]",
        '    claims: ["*"]',
        "waivers:",
        f"  - people: [{', '.join(w for w in waiver_people if w in people) or next(iter(people))}]",
        f"    checks: [{', '.join(repr(c) for c in waiver_checks)}]",
        f"    max-days: {max_days}",
        f"revokers: [{', '.join(n for n in ('alice', 'bob') if n in people)}]",
        f"required-approvals: {required_approvals}",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def in_days(n: int) -> str:
    from gate.trust.waivers import today_utc

    return (today_utc() + timedelta(days=n)).isoformat()
