"""The environment a launched engine gets: what the manifest names and a short list of safe variables.

gate's own environment holds what an engine must never see (the signing key's path, the ledger's
password, CI tokens, cloud credentials), and a manifest's `launch.command` comes with the change
under review: it gets only the variables below, then the manifest's `launch.env`. A secret an engine
needs has no way in; serve it from a server gate reaches at `base_url` instead (docs/engines.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SAFE_VARIABLES = (
    # finding programs and files, and the locale
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TMP",
    "TEMP",
    "TERM",
    # where the accelerator's libraries are and which devices this job may use
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    # thread counts (gate sets them from GATE_THREADS)
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
)
"""Variables passed on from gate's environment, where set; every other one is left out."""
SAFE_PREFIXES = ("LC_",)
"""Families of variables passed on (the locale's LC_ALL, LC_CTYPE, ...)."""


def engine_environment(manifest_env: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The safe variables of `environ` (gate's own by default), then the manifest's `launch.env` over them."""
    source = os.environ if environ is None else environ
    kept = {name: value for name, value in source.items() if name in SAFE_VARIABLES or name.startswith(SAFE_PREFIXES)}
    return {**kept, **manifest_env}
