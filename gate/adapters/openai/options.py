"""The `openai` adapter's options (the manifest's `options:` block) and what they state before a
server runs: the launched model's shape, the flavor and context a launch command names, which
environment variables a header may name. Torch-free."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    from gate.adapters.openai.model_meta import ModelMeta


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class TinyModel(_Options):
    """A tiny seeded Llama that gate writes for the engine: a GGUF file for llama.cpp
    (gate.models.tiny_gguf) or a Hugging Face model directory with a locally built tokenizer for
    vLLM, SGLang or TGI (gate.models.tiny_hf); the same seed gives the same weights in both."""

    format: Literal["gguf", "hf"] = "gguf"
    """gguf: one .gguf file; hf: a directory with config.json, model.safetensors and tokenizer.json."""
    seed: int = Field(default=0, ge=0)
    """Seed of the weights."""
    perturb_seed: int | None = Field(default=None, ge=0)
    """Seed of a small perturbation of every weight (other weights, same shapes)."""
    context_length: int = Field(default=8192, ge=64, le=131072)
    """Trained context length written into the file."""
    vocab_size: int = Field(default=512, ge=260, le=65536)
    """Vocabulary size (control and byte tokens included)."""
    n_head: int = Field(default=2, ge=1, le=64)
    """Query heads (of 64 / n_head dimensions each)."""
    n_head_kv: int = Field(default=1, ge=1, le=64)
    """Key/value heads: fewer than `n_head` is grouped-query attention (n_head must be a multiple)."""
    sliding_window: int | None = Field(default=None, ge=2)
    """Tokens a local layer attends to; None: every layer global. gguf: a gemma2 model (llama.cpp's llama
    architecture has no local layers); hf: a Llama with per-layer `layer_types`."""
    sliding_layers: list[int] | None = None
    """The local layers when `sliding_window` is set (None: all); some of them: a hybrid local/global model."""

    @model_validator(mode="after")
    def _shape(self) -> TinyModel:
        if 64 % self.n_head or self.n_head % self.n_head_kv:
            raise ValueError(
                f"n_head {self.n_head} must divide the width 64 and be a multiple of n_head_kv {self.n_head_kv}"
            )
        if self.sliding_layers is not None and self.sliding_window is None:
            raise ValueError("sliding_layers needs sliding_window")
        if any(not 0 <= i < 2 for i in self.sliding_layers or []):
            raise ValueError("sliding_layers name layers of the 2-layer tiny model: 0 and 1")
        return self


class Launch(_Options):
    """A server command gate starts and stops."""

    command: list[str] = Field(min_length=1)
    """Program and arguments; `{port}`, `{model}` and `{workdir}` (a scratch directory of the server's own)
    are substituted. The program is looked up on PATH."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """Port to listen on; leave it out and gate picks a free one on 127.0.0.1."""
    probe: Literal["/health", "/v1/models"] = "/health"
    """Readiness probe: the server is ready when this answers HTTP 200."""
    ready_timeout_s: float = Field(default=120.0, gt=0)
    """How long the server may take to become ready."""
    stop_timeout_s: float = Field(default=10.0, gt=0)
    """Grace period after SIGTERM before the process group is killed."""
    model_file: str | None = None
    """Model file substituted for `{model}`."""
    tiny_model: TinyModel | None = None
    """Or: a tiny seeded model gate writes (GGUF file or Hugging Face directory) and substitutes for `{model}`."""
    env: dict[str, str] = Field(default_factory=dict)
    """The server's environment beyond the safe variables gate passes on from its own (PATH, HOME, the locale,
    the devices: gate.adapters.openai.environment); never a secret, the manifest is recorded."""

    @model_validator(mode="after")
    def _one_model(self) -> Launch:
        if self.model_file is not None and self.tiny_model is not None:
            raise ValueError("give model_file or tiny_model, not both")
        if any("{model}" in part for part in self.command) and self.model_file is None and self.tiny_model is None:
            raise ValueError("the command uses {model}: give model_file or tiny_model")
        return self


class ControlLaunch(_Options):
    """A negative control: the candidate launched another way, planting a known real difference."""

    args: list[str] = Field(default_factory=list)
    """Arguments appended to the candidate's command (e.g. --cache-type-k q4_0)."""
    model_file: str | None = None
    """Another model file for the candidate server (e.g. stale weights)."""
    tiny_model: TinyModel | None = None
    """Or another tiny seeded model."""
    description: str = ""
    """What difference it plants, in words."""


class Options(_Options):
    """How to reach (or start) one OpenAI-compatible server."""

    base_url: str | None = None
    """A server that is already running, e.g. http://127.0.0.1:8000."""
    launch: Launch | None = None
    """Or a command gate starts and stops."""
    model: str | None = None
    """The `model` field sent with each request; default: the first model /v1/models lists."""
    flavor: Literal["auto", "vllm", "sglang", "llama.cpp", "tgi", "generic"] = "auto"
    """Engine family (request fields, cache-reset endpoint); auto: detected from the server."""
    request_timeout_s: float = Field(default=120.0, gt=0)
    """Per-request timeout."""
    retries: int = Field(default=2, ge=0, le=10)
    """Retries after a timeout, a refused connection or an HTTP 5xx, with exponential backoff."""
    backoff_s: float = Field(default=0.5, ge=0)
    """First backoff; doubles on each retry."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Request headers as templates over environment variables: "Bearer ${ENGINE_TOKEN}"."""
    top_k: int = Field(default=5, ge=1, le=20)
    """Top logprobs requested at each position."""
    vocab_size: int | None = Field(default=None, ge=2)
    """Vocabulary size, when the server does not state it."""
    context_length: int | None = Field(default=None, ge=16)
    """Context length, when the server does not state it (or to bound the checks lower)."""
    cache_salt_field: str | None = None
    """Request field that salts the prefix cache (vLLM: cache_salt); default by flavor."""
    controls: dict[str, ControlLaunch] = Field(default_factory=dict)
    """Negative controls by name: other launch configurations of the candidate."""
    max_servers: int = Field(default=3, ge=2, le=64)
    """Servers gate keeps alive at once in a run, controls included (the least recently used idle one
    stops to make room), so a run fits one GPU's memory or one CI machine's."""

    @field_validator("headers")
    @classmethod
    def _headers_from_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, template in value.items():
            if not ENV_REF.search(template):
                raise ValueError(
                    f"header {name!r} must take its value from an environment variable (e.g. 'Bearer ${{TOKEN}}'): "
                    "a manifest is recorded in the dossier and must hold no secret"
                )
            if (problem := header_env_problem(name, template)) is not None:
                raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _where(self) -> Options:
        if (self.base_url is None) == (self.launch is None):
            raise ValueError("give exactly one of base_url (a running server) or launch (a command gate starts)")
        if self.controls and self.launch is None:
            raise ValueError("controls are launch configurations: they need `launch`")
        vllm = guess_flavor(self.launch.command if self.launch else [], self.flavor) == "vllm"
        if self.vocab_size is None and model_vocab_size(self) is None and vllm:
            raise ValueError(
                "vocab_size: vLLM does not state its vocabulary size; set `vocab_size`, or launch a "
                "`tiny_model`, a `model_file` directory whose config.json gives it, or a GGUF `model_file`"
            )
        return self


HEADER_ENV = "GATE_HEADER_ENV"
"""The site's list (comma-separated) of environment variables a manifest's `headers` may name."""
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def header_env_problem(name: str, template: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Why header `name` may not take its value from the variables `template` names, or None: each must
    be on the site's $GATE_HEADER_ENV, which a manifest cannot set (unset: none is allowed)."""
    source = os.environ if environ is None else environ
    allowed = {v.strip() for v in source.get(HEADER_ENV, "").split(",") if v.strip()}
    for var in ENV_REF.findall(template):
        if var not in allowed:
            listed = ", ".join(sorted(allowed)) or "none"
            return (
                f"header {name!r} names environment variable {var}, which the site does not allow in headers "
                f"(${HEADER_ENV}, set outside the manifest, lists those a header may name; now: {listed})"
            )
    return None


def guess_flavor(command: list[str], flavor: str) -> str:
    """The flavor a launch command names (before a run, for `gate plan`): the option's unless auto."""
    if flavor != "auto":
        return flavor
    words = " ".join(command)
    named = {"llama-server": "llama.cpp", "vllm": "vllm", "sglang": "sglang"}
    return next((name for program, name in named.items() if program in words), "generic")


def model_vocab_size(options: Options) -> int | None:
    """The vocabulary size the launched model states (None: it states none)."""
    return launched_model_meta(options).vocab_size


def model_context_length(options: Options) -> int | None:
    """The trained context length the launched model states: the context where the server states none."""
    return launched_model_meta(options).context_length


def launched_model_meta(options: Options) -> ModelMeta:
    """What the launched model states about its shape; nothing for a `base_url` server."""
    from gate.adapters.openai.model_meta import ModelMeta, read_model_meta

    launch = options.launch
    if launch is not None and launch.tiny_model is not None:
        tiny = launch.tiny_model
        layers = None if tiny.sliding_layers is None else tuple(sorted(tiny.sliding_layers))
        return ModelMeta(
            vocab_size=tiny.vocab_size,
            context_length=tiny.context_length,
            sliding_window=tiny.sliding_window,
            sliding_layers=layers if tiny.sliding_window else None,
            source="tiny_model",
        )
    return ModelMeta() if launch is None or launch.model_file is None else read_model_meta(launch.model_file)


def flag(command: list[str], *names: str) -> str | None:
    """The value a command gives the first of `names` (`--name value` or `--name=value`), or None."""
    for i, part in enumerate(command):
        for name in names:
            if part == name and i + 1 < len(command):
                return command[i + 1]
            if part.startswith(name + "="):
                return part.split("=", 1)[1]
    return None


def launch_context(command: list[str]) -> tuple[int, str] | None:
    """(tokens per request, the flags that say so) from a launch command, where it names them."""
    ctx = flag(command, "-c", "--ctx-size")
    if ctx is not None and ctx.isdigit():
        slots = flag(command, "-np", "--parallel")
        if slots and slots.isdigit() and int(slots) > 1 and "--kv-unified" not in command:
            return int(ctx) // int(slots), f"launch flags -c {ctx} over -np {slots} slots"
        return int(ctx), f"launch flag -c {ctx}"
    model_len = flag(command, "--max-model-len")
    if model_len is not None and model_len.isdigit():
        return int(model_len), f"launch flag --max-model-len {model_len}"
    return None
