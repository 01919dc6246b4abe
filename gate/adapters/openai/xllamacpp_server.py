"""llama.cpp's own server, from a prebuilt xllamacpp wheel, started the way gate starts `llama-server`.

xllamacpp (PyPI, versions `YEAR.MONTH.BUILD`) embeds llama.cpp's server (tools/server: the same HTTP
routes, slots, host-memory prompt cache and context checkpoints) in a CPU wheel, with no command line of
its own: it is configured through `CommonParams`. This launcher maps the llama-server flags gate's
manifests and tests use onto `CommonParams`, starts `xllamacpp.Server` and serves until SIGTERM or
SIGINT, so a manifest's `launch.command: [llama-server, ...]` runs unchanged against any installed
build (benchmarks/engine_builds.py, docs/engines.md "Engine builds via xllamacpp"):

    python gate/adapters/openai/xllamacpp_server.py --xllamacpp DIR -m model.gguf --port 8080 ...
    python -m gate.adapters.openai.xllamacpp_server --xllamacpp DIR ...     (the same, slower to start)

DIR is a `pip install --no-deps --target DIR xllamacpp==VERSION`. `write_wrapper(DIR)` writes
DIR/bin/llama-server, a script that runs this launcher on that build, for PATH.

- A flag the table below does not map, or that this build's `CommonParams` lacks, is a one-line error
  and exit 2: never dropped. llama-server's own defaults are kept where they differ from
  `CommonParams`'s: port 8080, `-np` auto (4 slots over a unified KV cache), threads from the CPUs
  this process may use with `-tb` following `-t`.
- Identity: the wheels are built without llama.cpp's build number (`/props` says `b0-unknown`), so
  the launcher sets it from the package version before the server starts: `/props` `build_info`
  (where gate reads an engine's identity) says `b<BUILD>-xllamacpp`, and `--version` prints it.
"""

from __future__ import annotations

import bisect
import ctypes
import importlib
import os
import re
import signal
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_BAD_ARGS = 2
_VERSION = re.compile(r"^\d{4}\.\d+\.(\d+)(?:\.\d+)?$")


class UsageError(Exception):
    """A command line this launcher will not run (exit 2)."""


def build_number(version: str) -> int:
    """llama.cpp's build number in an xllamacpp version (`2026.4.8672.1` -> 8672)."""
    match = _VERSION.match(version)
    if match is None:
        raise UsageError(f"xllamacpp version {version!r} is not YEAR.MONTH.BUILD: no llama.cpp build number in it")
    return int(match.group(1))


def installed_version(build_dir: Path) -> str:
    """The xllamacpp version installed in `build_dir` (its dist-info), without importing it."""
    found = sorted(build_dir.glob("xllamacpp-*.dist-info"))
    if not found:
        raise UsageError(f"{build_dir}: no xllamacpp installed there (no xllamacpp-*.dist-info)")
    return found[-1].name[len("xllamacpp-") : -len(".dist-info")]


# -- the command line ----------------------------------------------------------------------------


def _int(value: str) -> int:
    return int(value)


def _float(value: str) -> float:
    return float(value)


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
    ("--port",): ("port", _int),
    ("-c", "--ctx-size"): ("n_ctx", _int),
    ("-np", "--parallel"): ("n_parallel", _int),
    ("-cram", "--cache-ram"): ("cache_ram_mib", _int),
    ("--cache-reuse",): ("n_cache_reuse", _int),
    ("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"): ("n_ctx_checkpoints", _int),
    ("--checkpoint-min-step",): ("checkpoint_min_step", _int),
    ("--slot-save-path",): ("slot_save_path", _directory),
    ("-fa", "--flash-attn"): ("flash_attn_type", _on_off),
    ("-t", "--threads"): ("cpuparams.n_threads", _int),
    ("-tb", "--threads-batch"): ("cpuparams_batch.n_threads", _int),
    ("-ctk", "--cache-type-k"): ("cache_type_k", str),
    ("-ctv", "--cache-type-v"): ("cache_type_v", str),
    ("-b", "--batch-size"): ("n_batch", _int),
    ("-ub", "--ubatch-size"): ("n_ubatch", _int),
    ("-n", "--n-predict", "--predict"): ("n_predict", _int),
    ("-s", "--seed"): ("sampling.seed", _int),
    ("-sps", "--slot-prompt-similarity"): ("slot_prompt_similarity", _float),
    ("-a", "--alias"): ("model_alias", str),
    ("-to", "--timeout"): ("timeout", _int),
    ("-lv", "--verbosity", "--log-verbosity"): ("verbosity", _int),
    ("--spec-type",): ("speculative.type", str),
    ("-md", "--model-draft"): ("speculative.model", str),
    ("--draft-max", "--draft", "--draft-n"): ("speculative.n_max", _int),
    ("--draft-min", "--draft-n-min"): ("speculative.n_min", _int),
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
                "gate/adapters/openai/xllamacpp_server.py (VALUES, SWITCHES), and never drops one"
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
    """Speculative decoding: `--spec-type NAME` (ngram-mod, ngram-simple, ...: drafts without a draft model)
    and `-md FILE` (a draft model; its type, draft or draft-simple by build, unless --spec-type names one),
    `--draft-max`/`--draft-min`. Older builds hold one `speculative.type` and the draft's fields on
    `speculative` itself (`mparams_dft`), newer ones a list `speculative.types` and a `speculative.draft`."""
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
        model = draft.mparams if hasattr(draft, "mparams") else draft.mparams_dft
        model.path = settings["speculative.model"]
        if hasattr(draft, "mparams"):
            draft.mparams = model
        else:
            draft.mparams_dft = model
    for field in ("n_max", "n_min"):
        if f"speculative.{field}" in settings:
            setattr(draft, field, settings[f"speculative.{field}"])
    params.speculative = spec


# -- identity ----------------------------------------------------------------------------------------


def _mappings() -> list[tuple[int, int, str, str]]:
    """This process's memory mappings: (start, end, permissions, path)."""
    found = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        start, end = (int(x, 16) for x in fields[0].split("-"))
        found.append((start, end, fields[1], fields[5] if len(fields) == 6 else ""))
    return found


def _library_data(library: Path, mappings: list[tuple[int, int, str, str]]) -> list[tuple[int, int]]:
    """The library's writable mappings, with the anonymous ones right after them (its .bss)."""
    real, regions = str(library.resolve()), list[tuple[int, int]]()
    for start, end, perms, path in mappings:
        if perms.startswith("rw") and (path == real or (not path and regions and regions[-1][1] == start)):
            regions.append((start, end))
    return regions


_OLD = b"b0-unknown"


def _rewrite_static_strings(library: Path, new: bytes) -> int:
    """Rewrite, in place, the std::string objects in the library's data that hold `b0-unknown`: either
    inline (the C++11 string: pointer to its own buffer, length, text) or, in wheels built with the old
    C++ ABI (manylinux2014), a pointer to a shared text preceded by its length, capacity and refcount.
    Only memory this process maps is read. Returns how many were rewritten."""
    mappings = _mappings()
    readable = sorted((start, end) for start, end, perms, _ in mappings if perms.startswith("r"))
    starts = [start for start, _ in readable]

    def mapped(address: int, size: int) -> bool:
        i = bisect.bisect_right(starts, address) - 1
        return i >= 0 and address + size <= readable[i][1]

    rewritten = 0
    for start, end in _library_data(library, mappings):
        words = memoryview(ctypes.string_at(start, end - start)).cast("Q")
        for i, word in enumerate(words):
            here = start + 8 * i
            if word == here + 16 and i + 3 < len(words) and words[i + 1] == len(_OLD):  # inline
                if ctypes.string_at(here + 16, len(_OLD) + 1) == _OLD + b"\x00" and len(new) < 16:
                    ctypes.memmove(here + 16, new + b"\x00", len(new) + 1)
                    ctypes.c_size_t.from_address(here + 8).value = len(new)
                    rewritten += 1
            elif word > 24 and mapped(word - 24, 24 + len(_OLD) + 1):  # a reference-counted text
                length, capacity = struct.unpack("QQ", ctypes.string_at(word - 24, 16))
                text = ctypes.string_at(word, len(_OLD) + 1)
                if length == len(_OLD) and text == _OLD + b"\x00" and len(new) <= capacity:
                    ctypes.memmove(word, new + b"\x00", len(new) + 1)
                    ctypes.c_size_t.from_address(word - 24).value = len(new)
                    rewritten += 1
    return rewritten


def set_build_identity(library: Path, build: int) -> str:
    """Make the loaded llama.cpp report its build number as build info (GET /props `build_info`).

    Newer builds compute the string on first use (`llama_build_info()`) from the exported
    LLAMA_BUILD_NUMBER and LLAMA_COMMIT, which are set here: `b<build>-xllamacpp`. Older ones made
    static strings at load time (`b0-unknown`), which are rewritten in place to `b<build>` (the
    longest text their storage surely holds). Returns the string now reported."""
    global _COMMIT
    lib = ctypes.CDLL(str(library))
    _COMMIT = ctypes.create_string_buffer(b"xllamacpp")  # kept alive: LLAMA_COMMIT points at it
    ctypes.c_int.in_dll(lib, "LLAMA_BUILD_NUMBER").value = build
    ctypes.c_void_p.in_dll(lib, "LLAMA_COMMIT").value = ctypes.addressof(_COMMIT)
    short = f"b{build}".encode()
    return short.decode() if _rewrite_static_strings(library, short) else f"b{build}-xllamacpp"


_COMMIT: Any = None


# -- serving ------------------------------------------------------------------------------------------


def write_wrapper(build_dir: Path, bin_dir: Path | None = None, python: str | None = None) -> Path:
    """Write `llama-server` into `bin_dir` (default `build_dir/bin`): a script running this launcher on the
    build in `build_dir` with an absolute interpreter (a launched engine gets no PYTHONPATH,
    gate.adapters.openai.environment). Written whole or not at all."""
    version = installed_version(build_dir)
    wrapper = (bin_dir or build_dir / "bin") / "llama-server"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    text = (
        "#!/bin/sh\n"
        f"# llama-server from xllamacpp=={version} (llama.cpp b{build_number(version)}), "
        "written by gate/adapters/openai/xllamacpp_server.py\n"
        f'exec "{python or sys.executable}" "{Path(__file__).resolve()}" --xllamacpp "{build_dir.resolve()}" "$@"\n'
    )
    partial = wrapper.with_name(wrapper.name + ".partial")
    partial.write_text(text)
    partial.chmod(0o755)
    partial.replace(wrapper)
    return wrapper


def _name_process(name: str) -> None:
    """Call this process `name` (/proc/PID/comm, what `pgrep -x` and `ps -o comm` read), as the
    compiled server is called: a check for servers left behind finds this one too (Linux only)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME


def serve(build_dir: Path, argv: list[str]) -> int:
    version = installed_version(build_dir)
    build = build_number(version)
    if argv == ["--version"]:
        print(f"version: {build} (xllamacpp {version})")
        return 0
    settings = parse(argv)
    _name_process("llama-server")
    sys.path.insert(0, str(build_dir))
    xllamacpp = importlib.import_module("xllamacpp")

    identity = set_build_identity(Path(xllamacpp.xllamacpp.__file__), build)
    params = configure(xllamacpp, settings, version)
    stop = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    print(f"xllamacpp_server: llama.cpp {identity} from xllamacpp {version} ({build_dir})", flush=True)
    try:
        server = xllamacpp.Server(params)
    except RuntimeError as err:
        # llama.cpp writes its log (the cause: "failed to open GGUF file ...") from a worker thread that
        # exiting at once can cut short on a loaded machine (seen in .ci/engine.sh: the log held only
        # these lines); a moment lets it drain, so gate's "its log ends" quotes the cause
        time.sleep(0.5)
        print(f"xllamacpp_server: the server did not start: {err}", file=sys.stderr, flush=True)
        return 1
    # the server installs its own SIGTERM/SIGINT handlers while it starts; take them back, so a stop
    # ends this process (the server's destructor ends its loop) rather than only the server's loop
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    while not stop:
        signal.pause()
    del server
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(args) < 2 or args[0] != "--xllamacpp":
            raise UsageError("usage: xllamacpp_server.py --xllamacpp DIR [llama-server flags]")
        return serve(Path(args[1]), args[2:])
    except UsageError as err:
        print(f"xllamacpp_server: {err}", file=sys.stderr, flush=True)
        return EXIT_BAD_ARGS


if __name__ == "__main__":
    sys.exit(main())
