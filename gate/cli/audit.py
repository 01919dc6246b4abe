"""`gate audit list|show|trace|verify|checkpoint`: read and verify the audit ledger, offline."""

from __future__ import annotations

import json
import sys
from datetime import date, datetime
from pathlib import Path
from typing import Any

import click

from gate._util.text import one_line
from gate.cli.common import echo, user_errors
from gate.cli.ledger_options import ledger_option, open_read_only
from gate.cli.roles import Roles, any_verdict_option, trust_options
from gate.cli.verify import mains_policy_option, say


def _since(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        return (
            datetime.fromisoformat(text)
            if "T" in text
            else datetime.combine(date.fromisoformat(text), datetime.min.time())
        ).isoformat()
    except ValueError:
        from gate.errors import InputError

        raise InputError("--since", f"{text!r} is not a date (YYYY-MM-DD) or an ISO time") from None


def _summary(body: dict[str, Any]) -> str:
    """One ledger entry on one line (names and reasons someone typed, with control characters escaped)."""
    return one_line(_describe(body))


def _describe(body: dict[str, Any]) -> str:
    kind = body.get("kind")
    if kind == "run":
        change = body.get("change") or {}
        commit = str(change.get("commit") or "-")[:12]
        approx = " approximate" if body.get("approximate") else ""
        waived = body.get("waivers") or []
        approx += f" ({len(waived)} waived)" if waived else ""
        return (
            f"{str(body.get('verdict')).upper():<17} {(body.get('manifest') or {}).get('name')} "
            f"[{body.get('intervention')}/{body.get('claim')}{approx}] commit {commit}"
        )
    if kind == "approval":
        return (
            f"{'APPROVED':<17} {(body.get('manifest') or {}).get('name')} by {body.get('approver')} "
            f"(dossier {str(body.get('statement_sha256'))[:12]}, run #{body.get('run_entry')})"
        )
    if kind == "waiver":
        return (
            f"{'WAIVER':<17} {body.get('check')} of {body.get('manifest_name')} by {body.get('approver')} "
            f"until {body.get('expires')}"
        )
    if kind == "revocation":
        target = body.get("target") or {}
        what = f"waiver #{target['waiver']}" if "waiver" in target else f"key {str(target.get('key'))[:16]}"
        return f"{'REVOKED':<17} {what} by {body.get('by')}: {body.get('reason')}"
    return str(kind)


def _keyids(keys: tuple[Path, ...]) -> list[str] | None:
    from gate.trust.keys import keyid, load_public_key

    return [keyid(load_public_key(k)) for k in keys] or None


@click.group("audit")
def command() -> None:
    """Read and verify the audit ledger (runs, approvals, waivers), offline."""


@command.command("list")
@click.option("--approximate", is_flag=True, help="Only approximate changes (runs, their approvals and waivers).")
@click.option("--since", help="Only entries at or after DATE (YYYY-MM-DD or ISO time, UTC).")
@click.option(
    "--kind", type=click.Choice(["run", "approval", "waiver", "revocation"]), help="Only entries of this kind."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@ledger_option
def list_(approximate: bool, since: str | None, kind: str | None, as_json: bool, ledger_path: Path | None) -> None:
    """List ledger entries, oldest first."""
    with user_errors():  # a corrupt body is one line too
        after = _since(since)
        with open_read_only(ledger_path) as ledger:
            entries = list(ledger.entries())
            approx_names = {
                (e.body.get("manifest") or {}).get("name")
                for e in entries
                if e.kind == "run" and e.body.get("approximate")
            }
            for entry in entries:
                body = entry.body
                if (kind and entry.kind != kind) or (after and entry.time < after):
                    continue
                if approximate:
                    name = (body.get("manifest") or {}).get("name") or body.get("manifest_name")
                    if not (body.get("approximate") or entry.kind == "approval" or name in approx_names):
                        continue
                if as_json:
                    echo(json.dumps({"id": entry.seq, "hash": entry.hash, **body}, sort_keys=True))
                else:
                    echo(f"#{entry.seq:<5} {entry.time}  {entry.kind:<8} {_summary(body)}")


@command.command("show")
@click.argument("entry_id", metavar="ID", type=int)
@ledger_option
def show(entry_id: int, ledger_path: Path | None) -> None:
    """Show entry ID: its body, hash, link and the signed checkpoint that covers it."""
    with user_errors(), open_read_only(ledger_path) as ledger:
        entry = ledger.get(entry_id)
        checkpoint = ledger.checkpoint(entry_id)
    if entry is None:
        echo(f"gate: no entry #{entry_id}", err=True)
        sys.exit(2)
    echo(f"entry     #{entry.seq} ({entry.kind}, {entry.time})")
    echo(f"hash      {entry.hash}")
    echo(f"prev      {entry.prev}")
    if checkpoint is not None:
        echo(
            f"checkpoint size {checkpoint.size}, head {checkpoint.head[:16]}, key {checkpoint.keyid[:16]}, "
            f"signed {checkpoint.time}"
        )
    echo(json.dumps(entry.body, indent=2, sort_keys=True, ensure_ascii=False))


@command.command("trace")
@click.argument("ref", metavar="COMMIT|DIGEST")
@click.option(
    "--dossier",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Where the dossier is now, if not at the path the ledger recorded.",
)
@trust_options
@ledger_option
@mains_policy_option
@any_verdict_option
def trace_(
    ref: str,
    dossier: Path | None,
    roles: Roles,
    ledger_path: Path | None,
    policy_dirs: tuple[Path, ...],
    any_verdict: bool,
) -> None:
    """From a commit (or any digest the ledger recorded) to its dossier, approvals and waivers, verified.

    Keys count only for their role (--trust, or --run-key / --approver-key). Exit 0 when
    everything found verifies and the latest run in each dossier directory is deployable (PASS,
    APPROVED, PASS WITH WAIVERS whose waivers count under this trust policy), 7 when it verifies but
    such a run is not deployable
    (0 with --any-verdict), 1 when something does not verify, 2 when nothing matches.
    """
    from gate.cli.verify import deploy_exit
    from gate.trust.audit import MIN_REF, standing_runs, trace

    with user_errors(), open_read_only(ledger_path) as ledger:
        trust = roles.load()
        report, traces = trace(ledger, ref, trust=trust, dossier=dossier, policy_dirs=list(policy_dirs))
    if not traces:
        echo(f"gate: no run in the ledger matches {ref!r} (a commit or digest, {MIN_REF}+ characters)", err=True)
        sys.exit(2)
    ok = report.ok
    related: set[int] = set()
    for item in traces:
        body = item.run.body
        related |= item.related
        echo(f"run #{item.run.seq} ({item.run.time}): {_summary(body)}")
        echo(f"  dossier   {item.dossier}")
        echo(f"  digest    sha256:{(body.get('dossier') or {}).get('statement_sha256')}")
        for finding in [*item.findings, *(item.check.findings if item.check else [])]:
            say(finding.ok, finding.text)
        echo(f"  status    {item.status}")
        for waiver in item.waivers:
            applied = waiver.seq in (body.get("waivers") or [])
            why = report.untrusted.get(waiver.seq)
            trusted = f" (untrusted: {'; '.join(why)})" if why else ""
            trusted += f" ({'; '.join(report.history[waiver.seq])})" if waiver.seq in report.history else ""
            say(None, f"waiver #{waiver.seq}: {_summary(waiver.body)}{' (applied)' if applied else ''}{trusted}")
        if item.ok and item.check is not None:
            echo(f"  verified: {item.check.summary()}")
        ok = ok and item.ok
    for seq, why in sorted(report.untrusted.items()):
        if seq not in related:
            say(None, f"entry #{seq} ({report.kinds.get(seq)}) is untrusted and ignored: {'; '.join(why)}")
    bad = report.first_bad()
    if bad is None:
        say(True, f"ledger: {report.chain.size} entries, chain and {report.chain.checkpoints} checkpoints verify")
    else:
        say(False, f"ledger: {bad.message}")
    echo("VERIFIED" if ok else "NOT VERIFIED")
    standing = standing_runs(traces)
    not_mains = [line for item in standing if item.check is not None for line in item.check.not_mains]
    for line in not_mains[1:]:
        echo(f"  not main's: {line}")
    sys.exit(deploy_exit(all(item.deployable for item in standing), any_verdict, not_mains) if ok else 1)


@command.command("verify")
@click.option(
    "--checkpoint",
    "held",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="A checkpoint held elsewhere: a file from `gate audit checkpoint`, a dossier's ledger.json "
    "or approval.json, or a dossier directory. Repeat.",
)
@click.option(
    "--ledger-pub",
    "pinned",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The ledger's expected public key (ledger.pub); repeat to allow a rotation.",
)
@trust_options
@ledger_option
def verify_(
    held: tuple[Path, ...],
    pinned: tuple[Path, ...],
    roles: Roles,
    ledger_path: Path | None,
) -> None:
    """Verify the chain, every checkpoint, and every entry by role; name the first bad entry (exit 1).

    Untrusted entries (a key without the role, a name that is not the key's, a revoked key, an
    unsigned waiver) are listed and fail this whole-ledger audit; `gate audit trace` ignores those
    unrelated to the run it traces.
    """
    from gate.trust.audit import held_checkpoints, verify_ledger
    from gate.trust.policy import find_trust

    with user_errors(), open_read_only(ledger_path) as ledger:
        trust = roles.load() if roles.given else find_trust(None)
        trusted = [cp for path in held for cp in held_checkpoints(path)]
        report = verify_ledger(ledger, trusted=trusted, pinned_keyids=_keyids(pinned), trust=trust)
        keyid = ledger.keyid
    chain = report.chain
    bad = report.first_bad()
    for seq, why in sorted(report.untrusted.items()):
        echo(f"FAIL entry #{seq} ({report.kinds.get(seq)}) is untrusted: {'; '.join(why)}", err=True)
    for seq, what in sorted(report.history.items()):
        say(None, f"entry #{seq} ({report.kinds.get(seq)}): {'; '.join(what)}")
    if trust is None:
        say(None, "no trust policy or keys by role: entries checked for their own signatures only")
    if bad is None and not report.untrusted:
        echo(f"ok   {chain.size} entries; chain verifies to head {chain.head[:16]}")
        echo(
            f"ok   {chain.checkpoints} checkpoints verify ({len(trusted)} held outside the ledger); "
            f"ledger key {keyid[:16]}"
        )
        if not pinned and not (trust and trust.ledger_keyids()):
            say(None, "no --ledger-pub (or ledger-signers in the trust policy): the ledger's key is not pinned")
        echo("VERIFIED")
        sys.exit(0)
    if bad is not None:
        where = f"entry #{bad.seq}" if bad.seq is not None else "the ledger"
        echo(f"FAIL first bad: {where}: {bad.message}", err=True)
        for problem in report.problems:
            if problem is not bad:
                echo(f"FAIL {problem.message}", err=True)
    echo(
        f"NOT VERIFIED: {chain.verified} of {chain.size} entries verify in the chain, "
        f"{len(report.untrusted)} untrusted",
        err=True,
    )
    sys.exit(1)


@command.command("checkpoint")
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the checkpoint here (default: stdout).",
)
@ledger_option
def checkpoint_(out_path: Path | None, ledger_path: Path | None) -> None:
    """Export the latest signed checkpoint, to keep somewhere the ledger's writers cannot reach."""
    with user_errors(), open_read_only(ledger_path) as ledger:
        checkpoint = ledger.checkpoint()
    if checkpoint is None:
        echo("gate: the ledger is empty", err=True)
        sys.exit(2)
    text = checkpoint.model_dump_json(indent=2) + "\n"
    if out_path is None:
        echo(text, nl=False)
    else:
        from gate._util.atomic import write_bytes_atomic

        write_bytes_atomic(out_path, text.encode())
        echo(f"checkpoint size {checkpoint.size}, head {checkpoint.head[:16]} -> {out_path}")
