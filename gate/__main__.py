"""`python -m gate`: the `gate` command, run by this interpreter (whatever its `bin/gate` says)."""

from gate.cli.main import cli

if __name__ == "__main__":
    cli(prog_name="gate")
