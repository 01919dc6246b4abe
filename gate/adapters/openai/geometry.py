"""An engine's cache geometry: how it reuses cached state across requests (gate.protocols.CacheGeometry).

Read from the engine wherever it states it (vLLM: the `vllm:cache_config_info` gauge of GET /metrics;
llama.cpp reuses any common prefix, block 1), else from its launch flags, else measured inside
engine-prefix-parity. Beside the block, it names the model's attention layout (sliding window and
its layers) and llama.cpp's reuse mechanisms (slots, unified KV, micro-batch, host-memory prompt
cache, context checkpoints): from the flags and llama.cpp's defaults, then `/props` and the start-up
log (at -lv 4 on the xllamacpp builds) when it runs.
"""

from __future__ import annotations

import re
import shutil
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate.adapters.openai.model_meta import ModelMeta
from gate.adapters.openai.options import flag, guess_flavor
from gate.protocols import CacheGeometry

if TYPE_CHECKING:
    from gate.adapters.openai.client import EngineClient

_METRIC = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


LLAMACPP_DEFAULTS = {"slots": 4, "ubatch": 512, "host_cache_mib": 8192, "checkpoints": 32, "checkpoint_spacing": 8192}
"""llama-server's defaults where its flags say nothing (tools/server, common/arg.cpp, b10068 to b11549:
`-np` auto is 4 slots over a unified KV; read from each build's start-up log at -lv 4)."""


def _int_flag(command: list[str], *names: str) -> int | None:
    value = flag(command, *names)
    return int(value) if value is not None and value.strip().lstrip("-").isdigit() else None


def llamacpp_mechanisms(command: list[str]) -> dict[str, Any]:
    """llama.cpp's reuse mechanisms as its launch flags state them, its defaults where they are silent."""
    slots = _int_flag(command, "-np", "--parallel")
    auto = slots is None or slots < 0
    if "--no-kv-unified" in command or "-no-kvu" in command:
        unified = False
    else:
        unified = auto or "--kv-unified" in command or "-kvu" in command
    cache_ram = _int_flag(command, "--cache-ram", "-cram")
    host = 0 if "--no-cache-prompt" in command else cache_ram
    checkpoints = _int_flag(command, "--ctx-checkpoints", "-ctxcp", "--swa-checkpoints")
    known = ("-np", "--parallel", "-ub", "--ubatch-size", "--cache-ram", "-cram", "--ctx-checkpoints")
    stated = [f for f in (*known, "--checkpoint-min-step", "--kv-unified", "--no-kv-unified") if f in command]
    return {
        "slots": LLAMACPP_DEFAULTS["slots"] if auto else slots,
        "kv_unified": unified,
        "ubatch": _int_flag(command, "-ub", "--ubatch-size") or LLAMACPP_DEFAULTS["ubatch"],
        "host_cache_mib": LLAMACPP_DEFAULTS["host_cache_mib"] if host is None or host < 0 else host,
        "checkpoints": LLAMACPP_DEFAULTS["checkpoints"] if checkpoints is None or checkpoints < 0 else checkpoints,
        "checkpoint_spacing": _int_flag(command, "--checkpoint-min-step") or LLAMACPP_DEFAULTS["checkpoint_spacing"],
        "mechanisms_from": "launch flags " + " ".join(stated) + ", llama.cpp's defaults otherwise"
        if stated
        else "llama.cpp's defaults (no flag states them)",
    }


def _layout(meta: ModelMeta | None) -> dict[str, Any]:
    if meta is None or not meta.sliding_window:
        return {}
    layers = None if meta.sliding_layers is None else list(meta.sliding_layers)
    return {"sliding_window": meta.sliding_window, "sliding_layers": layers}


def launch_geometry(command: list[str], flavor: str, meta: ModelMeta | None = None) -> CacheGeometry | None:
    """The geometry a launch command (and the model it serves) states; None where it names nothing known."""
    flavor = guess_flavor(command, flavor)
    if flavor == "vllm":
        block = flag(command, "--block-size")
        caching = False if "--no-enable-prefix-caching" in command else None
        if "--enable-prefix-caching" in command:
            caching = True
        stated = [f"--block-size {block}"] if block else []
        if caching is not None:
            stated.append("--enable-prefix-caching" if caching else "--no-enable-prefix-caching")
        return CacheGeometry(
            block_size=int(block) if block and block.isdigit() else None,
            cache_dtype=flag(command, "--kv-cache-dtype"),
            prefix_caching=caching,
            source=("launch flags " + " ".join(stated) if stated else "vLLM states it when it runs")
            + ("" if block else "; block size from GET /metrics when it runs (vLLM: 16 on GPUs, 128 on CPU)"),
        )
    if flavor == "llama.cpp":
        layout = _layout(meta)
        mechanisms = llamacpp_mechanisms(command)
        if layout:
            mechanisms["mechanisms_from"] += f"; sliding window from the model ({meta.source if meta else ''})"
        return CacheGeometry(
            block_size=1,
            cache_dtype=flag(command, "--cache-type-k") or flag(command, "-ctk") or "f16",
            prefix_caching="--no-cache-prompt" not in command,
            source="llama.cpp reuses any common prefix; launch flags",
            **layout,
            **mechanisms,
        )
    return None


_LOG_SLOTS = re.compile(r"n_slots = (\d+),.*kv_unified = '(true|false)'")
_LOG_HOST = re.compile(r"prompt cache is enabled, size limit: (\d+) MiB")
_LOG_CHECKPOINTS = re.compile(r"context checkpoints enabled, max = (\d+), min spacing = (\d+)")
_LOG_NO_CHECKPOINTS = re.compile(r"context checkpoints disabled")


def logged_mechanisms(log: str) -> dict[str, Any]:
    """What llama.cpp's start-up log states about its reuse mechanisms (the fields of CacheGeometry it
    names; empty where the log names none, e.g. below -lv 4 on the xllamacpp builds)."""
    out: dict[str, Any] = {}
    if found := _LOG_SLOTS.search(log):
        out["slots"], out["kv_unified"] = int(found.group(1)), found.group(2) == "true"
    if found := _LOG_HOST.search(log):
        out["host_cache_mib"] = int(found.group(1))
    if found := _LOG_CHECKPOINTS.search(log):
        out["checkpoints"], out["checkpoint_spacing"] = int(found.group(1)), int(found.group(2))
    elif _LOG_NO_CHECKPOINTS.search(log):
        out["checkpoints"] = 0
    return out


_LOG_VLLM_DTYPE = re.compile(r"Initializing an? (?:V1 )?LLM engine .*?with config: .*?\bdtype=torch\.(\w+)")


def served_dtype(flavor: str, log: str) -> str | None:
    """The dtype the server computes in, where its start-up log states it: vLLM resolves `--dtype auto`
    itself (a float32 model runs in bfloat16 on a CPU), and the checks must judge that rounding."""
    if flavor == "vllm" and (found := _LOG_VLLM_DTYPE.search(log)):
        return found.group(1)
    return None


def vllm_cache_config(metrics: str) -> dict[str, str] | None:
    """The labels of vLLM's `vllm:cache_config_info` gauge in a Prometheus text page, or None."""
    found = _METRIC.search(metrics)
    return None if found is None else dict(_LABEL.findall(found.group("labels")))


def served_geometry(
    client: EngineClient, command: list[str] | None, meta: ModelMeta | None = None, log: str = ""
) -> CacheGeometry:
    """The geometry of a running server: what it states, else what its launch flags state (a block size
    neither states is measured inside engine-prefix-parity, so an engine dying under it is a finding).
    llama.cpp's slots come from `/props`, its other mechanisms from its start-up `log`."""
    stated = launch_geometry(command or [], client.flavor, meta)
    if client.flavor == "vllm":
        try:
            text = client._request("GET", "/metrics", retry=False, read=lambda reply: reply.read().decode())
        except Exception:
            text = ""
        labels = vllm_cache_config(text) if isinstance(text, str) else None
        if labels is not None:
            block, caching = labels.get("block_size"), labels.get("enable_prefix_caching")
            return CacheGeometry(
                block_size=int(block) if block and block.isdigit() else None,
                cache_dtype=labels.get("cache_dtype"),
                prefix_caching=None if caching is None else caching.strip().lower() in ("true", "1", "yes"),
                source="GET /metrics vllm:cache_config_info",
            )
    if client.flavor == "llama.cpp" and stated is not None:
        update: dict[str, Any] = {"source": "llama.cpp reuses any common prefix (GET /props); launch flags"}
        logged = logged_mechanisms(log)
        slots = client.info.get("total_slots")
        if isinstance(slots, int) and slots > 0:
            logged["slots"] = slots
        if logged:
            said = ", ".join(sorted(logged))
            from_server = f"{stated.mechanisms_from}; the server states {said} (/props, its log)"
            update |= logged | {"mechanisms_from": from_server}
        return stated.model_copy(update=update)
    if stated is not None:
        return stated
    return CacheGeometry(source="not stated by the engine or its launch flags (engine-prefix-parity probes it)")


def engine_version(client: EngineClient) -> dict[str, Any]:
    """The engine's own name for its build: vLLM's `GET /version`, llama.cpp's `/props` build info."""
    if client.flavor == "vllm":
        try:
            reply = client.get("/version", retry=False)
        except Exception:
            return {}
        if isinstance(reply, dict) and reply.get("version"):
            return {"engine_version": str(reply["version"])}
    if client.flavor == "llama.cpp" and client.info.get("build_info"):
        return {"engine_version": str(client.info["build_info"])}
    return {}


def engine_identity(geometry: CacheGeometry) -> dict[str, Any]:
    """The cache geometry's part of a subject's identity (results.json, the dossier, the statement)."""
    return {
        "kv_dtype": geometry.cache_dtype,
        "block_size": geometry.block_size,
        "prefix_caching": geometry.prefix_caching,
        "cache_geometry_from": geometry.source,
    }


def resolved(command: list[str]) -> list[str]:
    """A launch command with its program resolved on PATH, as it was started."""
    return [shutil.which(command[0]) or command[0], *command[1:]] if command else command


@cache
def model_digest(path: str) -> str | None:
    """sha256 of a model file or directory; None where the path is not on this machine (e.g. a hub id)."""
    from gate.models.tiny_hf import directory_sha256

    return directory_sha256(Path(path)) if Path(path).exists() else None
