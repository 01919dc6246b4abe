"""Versions and host facts recorded in every result."""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import gate


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def describe(device: str) -> dict[str, Any]:
    """Library versions, python, platform and the device the run used."""
    env: dict[str, Any] = {
        "gate": gate.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "datasets": _version("datasets"),
        "device": device,
    }
    if device.startswith("cuda") and "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            env["device_name"] = torch.cuda.get_device_name(torch.device(device))
    return env
