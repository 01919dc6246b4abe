"""llama-server's command line mapped onto xllamacpp's `CommonParams` (xllamacpp_server.py launches with them).

`parse` reads the flags in VALUES and SWITCHES as llama-server reads them; `configure` sets them on a
build's `CommonParams`, keeping llama-server's own defaults where they differ. A flag the tables do not
map, or that the build lacks, is a UsageError (exit 2), never dropped. Standard library only: the
launcher imports this module as a sibling file when run as a script.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """A command line this launcher will not run (exit 2)."""


# -- the command line ----------------------------------------------------------------------------


def _directory(value: str) -> str:
    # llama-server: the directory must exist, and a path separator is appended (common/arg.cpp)
    if not Path(value).is_dir():
        raise ValueError(f"{value!r} is not a directory")
    return value if value.endswith(os.sep) else value + os.sep


def _on_off(value: str) -> str:
    if value not in ("on", "off", "auto"):
        raise ValueError(f"{value!r} is not on, off or auto")
    return value


VALUES: dict[tuple[str, ...], tuple[str, Callable[[str], Any]]] = {
    ("-m", "--model"): ("model.path", str),
    ("--host",): ("host", str),
    ("--port",): ("port", int),
    ("-c", "--ctx-size"): ("n_ctx", int),
    ("-np", "--parallel"): ("n_parallel", int),
    ("-cram", "--cache-ram"): ("cache_ram_mib", int),
    ("--cache-reuse",): ("n_cache_reuse", int),
    ("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"): ("n_ctx_checkpoints", int),
    ("--checkpoint-min-step",): ("checkpoint_min_step", int),
    ("--slot-save-path",): ("slot_save_path", _directory),
    ("-fa", "--flash-attn"): ("flash_attn_type", _on_off),
    ("-t", "--threads"): ("cpuparams.n_threads", int),
    ("-tb", "--threads-batch"): ("cpuparams_batch.n_threads", int),
    ("-ctk", "--cache-type-k"): ("cache_type_k", str),
    ("-ctv", "--cache-type-v"): ("cache_type_v", str),
    ("-b", "--batch-size"): ("n_batch", int),
    ("-ub", "--ubatch-size"): ("n_ubatch", int),
    ("-n", "--n-predict", "--predict"): ("n_predict", int),
    ("-s", "--seed"): ("sampling.seed", int),
    ("-sps", "--slot-prompt-similarity"): ("slot_prompt_similarity", float),
    ("-a", "--alias"): ("model_alias", str),
    ("-to", "--timeout"): ("timeout", int),
    ("-lv", "--verbosity", "--log-verbosity"): ("verbosity", int),
    ("--spec-type",): ("speculative.type", str),
    ("-md", "--model-draft"): ("speculative.model", str),
    ("--draft-max", "--draft", "--draft-n"): ("speculative.n_max", int),
    ("--draft-min", "--draft-n-min"): ("speculative.n_min", int),
}
"""llama-server flags that take a value: (the CommonParams field, the conversion)."""

SWITCHES: dict[str, tuple[str, bool]] = {
    "--cache-prompt": ("cache_prompt", True),
    "--no-cache-prompt": ("cache_prompt", False),
    "-kvu": ("kv_unified", True),
    "--kv-unified": ("kv_unified", True),
    "-no-kvu": ("kv_unified", False),
    "--no-kv-unified": ("kv_unified", False),
    "--swa-full": ("swa_full", True),
    "--cache-idle-slots": ("cache_idle_slots", True),
    "--no-cache-idle-slots": ("cache_idle_slots", False),
    "--clear-idle": ("clear_idle", True),
    "--no-clear-idle": ("clear_idle", False),
    "--webui": ("ui|webui", True),
    "--no-webui": ("ui|webui", False),
    "--ui": ("ui", True),
    "--no-ui": ("ui", False),
    "--slots": ("endpoint_slots", True),
    "--no-slots": ("endpoint_slots", False),
    "--metrics": ("endpoint_metrics", True),
    "--props": ("endpoint_props", True),
    "--warmup": ("warmup", True),
    "--no-warmup": ("warmup", False),
    "-cb": ("cont_batching", True),
    "--cont-batching": ("cont_batching", True),
    "-nocb": ("cont_batching", False),
    "--no-cont-batching": ("cont_batching", False),
    "--context-shift": ("ctx_shift", True),
    "--no-context-shift": ("ctx_shift", False),
    "--jinja": ("use_jinja", True),
    "--no-jinja": ("use_jinja", False),
}
"""llama-server flags without a value: (the CommonParams field, the value they set). `a|b`: the field
is `a` in the builds that have it, else `b` (an older build's name for it)."""

_BY_NAME = {name: spec for names, spec in VALUES.items() for name in names}


def parse(argv: list[str]) -> dict[str, Any]:
    """llama-server's command line as {field: value}, read as llama-server reads it (common/arg.cpp): the
    last of a repeated flag wins (so a control's extra args override the launch's), `_` in a `--` flag
    reads as `-`, and a value is always the next argument (`--port=8080` is no flag to llama-server)."""
    settings: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        part = argv[i]
        name = part.replace("_", "-") if part.startswith("--") else part
        if name in SWITCHES:
            field, value = SWITCHES[name]
            settings[field] = value
            i += 1
            continue
        if name not in _BY_NAME:
            kind = "argument" if not part.startswith("-") else "llama-server flag"
            raise UsageError(
                f"unsupported {kind} {part!r}: this launcher maps only the flags in "
                "gate/adapters/openai/xllamacpp_params.py (VALUES, SWITCHES), and never drops one"
            )
        if i + 1 >= len(argv):
            raise UsageError(f"llama-server flag {name} needs a value")
        field, convert = _BY_NAME[name]
        try:
            settings[field] = convert(argv[i + 1])
        except ValueError as err:
            raise UsageError(f"llama-server flag {name}: {err}") from None
        i += 2
    if "model.path" not in settings:
        raise UsageError("no model: give -m/--model PATH (this launcher serves one local GGUF file)")
    return settings


# -- CommonParams ----------------------------------------------------------------------------------


def _enum(enum_type: Any, prefix: str, value: str, flag: str) -> Any:
    name = prefix + value.upper()
    members = getattr(enum_type, "__members__", {})
    if name not in members:
        known = ", ".join(m[len(prefix) :].lower() for m in members if m.startswith(prefix))
        raise UsageError(f"llama-server flag {flag}: {value!r} is not one of {known}")
    return members[name]


def _assign(params: Any, field: str, value: Any, version: str) -> None:
    owner, _, leaves = field.rpartition(".")
    target = params
    for part in owner.split(".") if owner else []:
        target = getattr(target, part)
    leaf = next((name for name in leaves.split("|") if hasattr(target, name)), None)
    if leaf is None:
        raise UsageError(f"xllamacpp {version} has no CommonParams.{field}: its llama.cpp cannot take that flag")
    setattr(target, leaf, value)


def configure(xllamacpp: Any, settings: dict[str, Any], version: str) -> Any:
    """CommonParams for `settings`, starting from llama-server's defaults where they differ from
    CommonParams's (port 8080, `-np` auto, threads from the usable CPUs, `-tb` following `-t`)."""
    params = xllamacpp.CommonParams()
    settings = dict(settings)
    values: dict[str, Any] = {"port": 8080, "n_parallel": -1}
    host = settings.pop("host", "127.0.0.1")
    timeout = settings.pop("timeout", None)
    if timeout is not None:
        values["timeout_read"] = values["timeout_write"] = timeout
    threads = settings.pop("cpuparams.n_threads", len(os.sched_getaffinity(0)))
    values["cpuparams.n_threads"] = threads
    values["cpuparams_batch.n_threads"] = settings.pop("cpuparams_batch.n_threads", threads)
    if "flash_attn_type" in settings:
        names = {"on": "ENABLED", "off": "DISABLED", "auto": "AUTO"}
        value = names[settings.pop("flash_attn_type")]
        settings["flash_attn_type"] = xllamacpp.llama_flash_attn_type.__members__[f"LLAMA_FLASH_ATTN_TYPE_{value}"]
    speculative = {key: settings.pop(key) for key in list(settings) if key.startswith("speculative.")}
    for field, flag in (("cache_type_k", "--cache-type-k"), ("cache_type_v", "--cache-type-v")):
        if field in settings:
            settings[field] = _enum(xllamacpp.ggml_type, "GGML_TYPE_", settings[field], flag)
    if "model_alias" in settings:
        settings["model_alias"] = [a for a in settings["model_alias"].split(",") if a]
    values.update(settings)
    for field, value in values.items():
        _assign(params, field, value, version)
    _assign(params, "hostnames|hostname", [host] if hasattr(params, "hostnames") else host, version)
    if speculative:
        _speculative(xllamacpp, params, speculative)
    return params


def _speculative(xllamacpp: Any, params: Any, settings: dict[str, Any]) -> None:
    """`--spec-type NAME`, `-md FILE` (a draft model), `--draft-max`/`--draft-min`. Older builds hold one
    `speculative.type` and the draft's fields on `speculative`, newer ones `types` and a `draft`."""
    members = xllamacpp.common_speculative_type.__members__
    spec = params.speculative
    name = settings.get("speculative.type")
    if name is None:  # -md alone: llama-server drafts with the model it names
        name = "draft-simple" if "COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE" in members else "draft"
    key = "COMMON_SPECULATIVE_TYPE_" + name.upper().replace("-", "_")
    if key not in members or key.endswith("_COUNT"):
        known = ", ".join(m[24:].lower().replace("_", "-") for m in members if not m.endswith("_COUNT"))
        raise UsageError(f"llama-server flag --spec-type: {name!r} is not one of {known}")
    if hasattr(spec, "types"):
        spec.types = [members[key]]
    else:
        spec.type = members[key]
    draft = spec.draft if hasattr(spec, "draft") else spec  # newer builds: a view, changed in place
    if "speculative.model" in settings:
        attr = "mparams" if hasattr(draft, "mparams") else "mparams_dft"
        model = getattr(draft, attr)
        model.path = settings["speculative.model"]
        setattr(draft, attr, model)
    for field in ("n_max", "n_min"):
        if f"speculative.{field}" in settings:
            setattr(draft, field, settings[f"speculative.{field}"])
    params.speculative = spec
