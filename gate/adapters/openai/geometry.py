"""An engine's cache geometry: how it reuses cached state across requests (gate.protocols.CacheGeometry).

Read from the engine wherever it states it, else from its launch flags, else measured:

    vLLM        GET /metrics, the `vllm:cache_config_info` gauge's labels (block_size, cache_dtype,
                enable_prefix_caching); before a run: --block-size, --kv-cache-dtype,
                --[no-]enable-prefix-caching
    llama.cpp   any common prefix is reused (token granularity: block 1); GET /props answers for the
                server; before a run: --cache-type-k, --no-cache-prompt
    others      a short probe inside engine-prefix-parity (gate.checks._engine.probe_block): a
                prefix sent twice under other suffixes at a few lengths; the granularity is the
                greatest common divisor of the reported hits

A sweep planned on it (gate.checks._engine.geometry_lengths) visits each block edge, so a length
below the first reusable block is known to miss by design, never a failure.
"""

from __future__ import annotations

import re
import shutil
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate.adapters.openai import _flag
from gate.protocols import CacheGeometry

if TYPE_CHECKING:
    from gate.adapters.openai.client import EngineClient

_METRIC = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def guess_flavor(command: list[str], flavor: str) -> str:
    """The flavor a launch command names (before a run, for `gate plan`): the option's unless auto."""
    if flavor != "auto":
        return flavor
    words = " ".join(command)
    if "llama-server" in words:
        return "llama.cpp"
    if "vllm" in words:
        return "vllm"
    if "sglang" in words:
        return "sglang"
    return "generic"


def launch_geometry(command: list[str], flavor: str) -> CacheGeometry | None:
    """The geometry a launch command states (None where it names nothing gate knows of)."""
    flavor = guess_flavor(command, flavor)
    if flavor == "vllm":
        block = _flag(command, "--block-size")
        caching = False if "--no-enable-prefix-caching" in command else None
        if "--enable-prefix-caching" in command:
            caching = True
        stated = [f"--block-size {block}"] if block else []
        if caching is not None:
            stated.append("--enable-prefix-caching" if caching else "--no-enable-prefix-caching")
        return CacheGeometry(
            block_size=int(block) if block and block.isdigit() else None,
            cache_dtype=_flag(command, "--kv-cache-dtype"),
            prefix_caching=caching,
            source=("launch flags " + " ".join(stated) if stated else "vLLM states it when it runs")
            + ("" if block else "; block size from GET /metrics when it runs (vLLM: 16 on GPUs, 128 on CPU)"),
        )
    if flavor == "llama.cpp":
        return CacheGeometry(
            block_size=1,
            cache_dtype=_flag(command, "--cache-type-k") or _flag(command, "-ctk") or "f16",
            prefix_caching="--no-cache-prompt" not in command,
            source="llama.cpp reuses any common prefix; launch flags",
        )
    return None


def vllm_cache_config(metrics: str) -> dict[str, str] | None:
    """The labels of vLLM's `vllm:cache_config_info` gauge in a Prometheus text page, or None."""
    found = _METRIC.search(metrics)
    if found is None:
        return None
    return {key: value for key, value in _LABEL.findall(found.group("labels"))}


def _bool(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() in ("true", "1", "yes")


def served_geometry(client: EngineClient, command: list[str] | None) -> CacheGeometry:
    """The geometry of a running server: what it states, else what its launch flags state (a block
    size neither states is measured by engine-prefix-parity's probe, gate.checks._engine.probe_block,
    inside the check, so that an engine dying under it is a finding about the engine)."""
    stated = launch_geometry(command or [], client.flavor)
    if client.flavor == "vllm":
        try:
            text = client._request("GET", "/metrics", retry=False, read=lambda reply: reply.read().decode())
        except Exception:
            text = ""
        labels = vllm_cache_config(text) if isinstance(text, str) else None
        if labels is not None:
            block = labels.get("block_size")
            return CacheGeometry(
                block_size=int(block) if block and block.isdigit() else None,
                cache_dtype=labels.get("cache_dtype"),
                prefix_caching=_bool(labels.get("enable_prefix_caching")),
                source="GET /metrics vllm:cache_config_info",
            )
    if client.flavor == "llama.cpp" and stated is not None:
        return stated.model_copy(update={"source": "llama.cpp reuses any common prefix (GET /props); launch flags"})
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
    if not command:
        return command
    return [shutil.which(command[0]) or command[0], *command[1:]]


@cache
def model_digest(path: str) -> str | None:
    """sha256 of a model file, or of a model directory's files (gate.models.tiny_hf.directory_sha256);
    None where the path is not on this machine (a name the engine resolves itself, e.g. a hub id)."""
    from gate.models.tiny_hf import directory_sha256

    return directory_sha256(Path(path)) if Path(path).exists() else None
