"""Built-in checks. Each module registers one check through the `gate.checks` entry point group."""
