"""gate: a release-gate policy engine for LLM decoding changes.

A YAML manifest names an intervention and the equivalence it claims; versioned policies decide
which checks that claim requires; checks run against real model code through adapters and the
result becomes a signed pass/fail dossier. See docs/architecture.md.
"""

__version__ = "0.1.0"
