"""Trained weights for the reference decoder: safetensors files with the config in their metadata.

model = load_trained("copy-model")            # gate/models/weights/copy-model.safetensors
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from gate.models.reference import ModelConfig, Transformer, build_model, placed

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


def weights_path(name_or_path: str) -> Path:
    """A shipped name (gate/models/weights/<name>.safetensors) or a path to a .safetensors file."""
    shipped = WEIGHTS_DIR / f"{name_or_path}.safetensors"
    if shipped.is_file():
        return shipped
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    known = ", ".join(sorted(p.stem for p in WEIGHTS_DIR.glob("*.safetensors"))) or "none"
    raise FileNotFoundError(f"no weights {name_or_path!r} (shipped: {known}; or give a .safetensors path)")


def read_metadata(name_or_path: str) -> dict[str, Any]:
    """The file's metadata: `config` (a dict) plus how the weights were made."""
    from safetensors import safe_open

    with safe_open(str(weights_path(name_or_path)), framework="pt") as fh:
        meta = fh.metadata() or {}
    if "gate" in meta:  # one JSON document, so the file's bytes do not depend on map ordering
        out: dict[str, Any] = json.loads(meta["gate"])
        return out
    out = dict(meta)
    if "config" in out:
        out["config"] = json.loads(out["config"])
    return out


def load_trained(
    name_or_path: str, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> Transformer:
    """The reference decoder with trained weights, in evaluation mode on `device` in `dtype`."""
    from safetensors.torch import load_file

    path = weights_path(name_or_path)
    meta = read_metadata(str(path))
    if "config" not in meta:
        raise ValueError(f"{path}: no `config` in the safetensors metadata")
    config = ModelConfig(**meta["config"])
    model = build_model(config, seed=0, device="cpu", dtype=torch.float32)
    state = load_file(str(path))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if not m.endswith("inv_freq")]:
        raise ValueError(f"{path}: weights do not fit the config (missing {missing}, unexpected {unexpected})")
    return placed(model, device, dtype)


def save_trained(model: Transformer, path: Path, metadata: dict[str, Any] | None = None) -> None:
    """Write the model's weights (float32) and config to a safetensors file, byte-reproducibly:
    the metadata is a single key holding sorted JSON."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
    meta = {"config": model.config.as_dict(), **(metadata or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata={"gate": json.dumps(meta, sort_keys=True)})
