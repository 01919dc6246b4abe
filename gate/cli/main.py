"""`gate`: entry point. One explicit table of commands, each in its own module, imported on use."""

from __future__ import annotations

import importlib
import platform
import signal
from typing import Any

import click

import gate
from gate.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated

COMMANDS: dict[str, str] = {
    "validate": "gate.cli.validate",
    "plan": "gate.cli.plan",
    "run": "gate.cli.run",
    "record": "gate.cli.record",
    "verify": "gate.cli.verify",
    "approve": "gate.cli.approve",
    "waive": "gate.cli.waive",
    "revoke": "gate.cli.revoke",
    "audit": "gate.cli.audit",
    "diff": "gate.cli.diff",
    "history": "gate.cli.history",
    "keygen": "gate.cli.keygen",
    "policies": "gate.cli.policies",
    "checks": "gate.cli.checks",
    "schema": "gate.cli.schema",
    "bisect": "gate.cli.bisect",
}
"""Command name -> the module whose `command` implements it (a click command or group)."""


class _Commands(click.Group):
    """Loads a command's module only when that command runs, so `gate --help` stays instant."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        command = importlib.import_module(COMMANDS[cmd_name]).command
        assert isinstance(command, click.Command), COMMANDS[cmd_name]
        return command

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; Ctrl-C exits 130 and SIGTERM 143 (never 1, the gate-failed code), after the
        `finally` blocks on the way out removed partial outputs and stopped servers gate started."""
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("gate: interrupted (SIGINT): stopped; nothing half-done was kept", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except RecursionError:  # a JSON or YAML input nested past what any gate record needs
            click.echo("gate: an input is nested too deeply to read (a hostile or corrupt file)", err=True)
            raise click.exceptions.Exit(EXIT_BAD_INPUT) from None
        except Terminated:
            click.echo("gate: terminated (SIGTERM): stopped; nothing half-done was kept", err=True)
            raise click.exceptions.Exit(EXIT_TERMINATED) from None
        finally:
            signal.signal(signal.SIGTERM, previous)


def _raise_terminated(_signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop at a time: cleanup is not interrupted again
    raise Terminated()


def versions() -> dict[str, str]:
    """gate's version and those of the libraries a run's results depend on, read from package
    metadata (nothing is imported, so `gate --version` stays instant)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"gate": gate.__version__, "python": platform.python_version()}
    for name in ("torch", "transformers"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    found = versions()
    click.echo(f"gate {found.pop('gate')} ({', '.join(f'{k} {v}' for k, v in found.items())})")
    ctx.exit()


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show gate's version with the Python, torch and transformers versions, and exit.",
)
def cli() -> None:
    """gate: release gate for LLM decoding changes.

    A manifest names the intervention and the equivalence it claims; policies decide the
    checks; checks run against real model code; the verdict is a signed dossier.

    Exit codes: 0 pass (or pass-with-waivers), 1 gate failed, 2 bad input or usage,
    3 a check errored or an adapter could not run, 4 passed but awaiting approval
    (bounded-degradation claims), 5 partial run (`gate run --check`: nothing failed, but not
    every planned check ran), 6 unproven (nothing failed, but gate could not prove a required
    check here), 7 authentic but not deployable (`gate verify`, `gate audit trace`), 8 authentic
    but another commit's, one the commit asked for does not land (`gate verify --commit`), an engine
    behind HTTP: 10 not ready, 11 port in use, 12 crashed, 13 timed out, 14 bad reply, 15
    vocabulary mismatch, 16 prefix cache never hit, 17 serves another model than the manifest
    names; 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).

    Shell completion (bash, zsh, fish): see docs/cli.md, e.g. for bash
    eval "$(_GATE_COMPLETE=bash_source gate)".
    """
