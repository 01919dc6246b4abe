"""The `gate` command line: one module per command, each exposing a click command named `command`."""
