"""The tiny seeded model a launch names (`tiny_model`), written once per process: a GGUF file for
llama.cpp or a Hugging Face directory for vLLM and the other engines that load that format."""

from __future__ import annotations

import functools
import hashlib
import tempfile
from pathlib import Path

from gate.adapters.openai.options import TinyModel


@functools.cache
def _model_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="gate-tiny-model-"))


def tiny_model_file(spec: TinyModel) -> tuple[Path, str]:
    """Write (once per process) the tiny model a spec names; its path (a .gguf file or a Hugging Face
    directory) and sha256 (of the file, or gate.models.tiny_hf.directory_sha256 of the directory)."""
    from gate.models.tiny_gguf import TinyLlamaSpec, write_tiny_gguf

    layers = None if spec.sliding_layers is None else tuple(spec.sliding_layers)
    full = TinyLlamaSpec(**spec.model_dump(exclude={"format", "sliding_layers"}), sliding_layers=layers)
    key = hashlib.sha256(repr((spec.format, full.describe())).encode()).hexdigest()[:16]
    path = _model_dir() / (f"tiny-llama-{key}" if spec.format == "hf" else f"tiny-llama-{key}.gguf")
    digest_file = path.with_name(path.name + ".sha256")
    if not path.exists() or not digest_file.exists():
        if spec.format == "hf":
            from gate.models.tiny_hf import write_tiny_hf

            digest_file.write_text(write_tiny_hf(path, full))
        else:
            digest_file.write_text(write_tiny_gguf(path, full))
    return path, digest_file.read_text()
