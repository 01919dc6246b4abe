"""torch-side names shared by the model code, the prefix worker and the adapters.

Manifests name dtypes as strings (`float32`, `bfloat16`, `float16`, gate.core.manifest); this is
the one place they become torch dtypes.
"""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""Manifest dtype name -> torch dtype."""
