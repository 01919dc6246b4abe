"""The command table lists every command module, and each module's command carries its table name."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

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


def test_python_dash_m_gate_is_the_gate_command() -> None:
    """`python -m gate` runs this interpreter's gate (a copied venv's `bin/gate` may name another)."""
    out = subprocess.run([sys.executable, "-m", "gate", "checks"], capture_output=True, text=True, check=True)
    assert "short-prompt" in out.stdout and "prefix-sweep" in out.stdout
