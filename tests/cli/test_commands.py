"""The command table lists every command module, and each module's command carries its table name."""

from __future__ import annotations

import importlib
import pkgutil

import click

import gate.cli
from gate.cli.main import COMMANDS


def test_every_command_module_is_in_the_table() -> None:
    modules = {
        f"gate.cli.{info.name}"
        for info in pkgutil.iter_modules(gate.cli.__path__)
        if isinstance(getattr(importlib.import_module(f"gate.cli.{info.name}"), "command", None), click.Command)
    }
    assert modules == set(COMMANDS.values())
    for name, module in COMMANDS.items():
        assert importlib.import_module(module).command.name == name
