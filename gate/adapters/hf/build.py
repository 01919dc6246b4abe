"""Build the path an Options names: load the model once, pick the path class for its kind."""

from __future__ import annotations

import torch

from gate.adapters.hf import compat, presets
from gate.adapters.hf.options import Options
from gate.adapters.hf.paths import HFPath
from gate.adapters.hf.probe import PROBE_KINDS, ProbingHFPath
from gate.adapters.hf.tracing import TracingHFPath
from gate.errors import AdapterUnavailable


def build_path(options: Options, *, device: str, dtype: str, seed: int) -> HFPath:
    """A ready path; AdapterUnavailable when this machine cannot run it (and says why)."""
    compat.check_version()
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise AdapterUnavailable(f"device {device!r} requested but torch sees no CUDA device here")
    loaded = presets.load(
        options.model, options.attn_implementation, device=device, dtype=dtype, seed=seed, init_std=options.init_std
    )
    path: HFPath
    if options.path in ("generate-static", "generate-paged", "generate-cache"):
        from gate.adapters.hf.generation import GeneratePath

        path = GeneratePath(loaded, options, device=device, dtype=dtype, seed=seed)
    elif options.path in ("assisted", "prompt-lookup"):
        from gate.adapters.hf.speculative import HFSpeculativePath

        path = HFSpeculativePath(loaded, options, device=device, dtype=dtype, seed=seed)
    elif options.path == "kvpress":
        from gate.adapters.hf.kvpress_path import PressPath

        path = PressPath(loaded, options, device=device, dtype=dtype, seed=seed)
    elif options.path == "prefix-reuse":
        from gate.adapters.hf.prefix_worker import PrefixReuseProbingPath, PrefixReuseTracingPath

        kind = PrefixReuseProbingPath if compat.probe_supported() else PrefixReuseTracingPath
        path = kind(loaded, options, device=device, dtype=dtype, seed=seed)
    elif options.path == "full":
        path = HFPath(loaded, options, device=device, dtype=dtype, seed=seed)
    elif options.path == "quantized" and options.backend in ("quanto", "hqq") and not options.beams:
        from gate.adapters.hf.quant_state import QuantizedHFPath

        path = QuantizedHFPath(loaded, options, device=device, dtype=dtype, seed=seed)
    elif options.path in PROBE_KINDS and compat.probe_supported():
        path = ProbingHFPath(loaded, options, device=device, dtype=dtype, seed=seed)
    else:
        path = TracingHFPath(loaded, options, device=device, dtype=dtype, seed=seed)
    return path.with_fault(options.fault) if options.fault else path
