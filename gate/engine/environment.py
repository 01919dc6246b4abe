"""Versions and host facts recorded in every result."""

from __future__ import annotations

import platform
import sys
from typing import Any

import gate
from gate._util.versions import installed_versions

LIBRARIES = ("torch", "transformers", "datasets", "kvpress", "hqq", "optimum-quanto", "accelerate")
"""Distributions behind a subject's path, recorded in every result (None where not installed): a
cache or press bug lives in one of these, so two runs on releases with and without it differ here."""


def describe(device: str) -> dict[str, Any]:
    """Library versions, python, platform and the device the run used."""
    env: dict[str, Any] = {
        "gate": gate.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        **installed_versions(LIBRARIES),
        "device": device,
    }
    if device.startswith("cuda") and "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            env["device_name"] = torch.cuda.get_device_name(torch.device(device))
    return env
