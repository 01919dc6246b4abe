"""`gate`: entry point. Commands are discovered from the modules of this package."""

from __future__ import annotations

import importlib
import pkgutil

import click

import gate

_NOT_COMMANDS = {"main", "common"}


class _Commands(click.Group):
    """Registers every gate.cli module that exposes a click command named `command`."""

    def _discover(self) -> dict[str, click.Command]:
        found: dict[str, click.Command] = {}
        for info in pkgutil.iter_modules(importlib.import_module("gate.cli").__path__):
            if info.name in _NOT_COMMANDS:
                continue
            module = importlib.import_module(f"gate.cli.{info.name}")
            command = getattr(module, "command", None)
            if isinstance(command, click.Command) and command.name:
                found[command.name] = command
        return found

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self._discover())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._discover().get(cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(gate.__version__, prog_name="gate")
def cli() -> None:
    """gate: release gate for LLM decoding changes.

    A manifest names the intervention and the equivalence it claims; policies decide the
    checks; checks run against real model code; the verdict is a signed dossier.

    Exit codes: 0 pass, 1 gate failed, 2 bad input or usage, 3 a check errored or an adapter
    could not run, 4 passed but awaiting approval (bounded-degradation claims).
    """
