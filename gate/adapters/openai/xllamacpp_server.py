"""llama.cpp's own server, from a prebuilt xllamacpp wheel, started the way gate starts `llama-server`.

xllamacpp (PyPI, versions `YEAR.MONTH.BUILD`) embeds llama.cpp's server in a CPU wheel configured
through `CommonParams` (xllamacpp_params.py maps the llama-server flags onto them), so a manifest's
`launch.command: [llama-server, ...]` runs unchanged against any installed build:

    python gate/adapters/openai/xllamacpp_server.py --xllamacpp DIR -m model.gguf --port 8080 ...

DIR is a `pip install --no-deps --target DIR xllamacpp==VERSION`; `write_wrapper(DIR)` writes
DIR/bin/llama-server, which runs this launcher on that build. The wheels say `b0-unknown` as their
build, so the launcher sets `build_info` from the package version: `b<BUILD>-xllamacpp`.
"""

from __future__ import annotations

import bisect
import ctypes
import importlib
import re
import signal
import struct
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # UsageError re-exported under its old path
    from gate.adapters.openai.xllamacpp_params import UsageError as UsageError
    from gate.adapters.openai.xllamacpp_params import configure, parse
else:  # run as a script (the wrapper): the sibling file, without importing gate's adapters
    from xllamacpp_params import UsageError, configure, parse

EXIT_BAD_ARGS = 2
_VERSION = re.compile(r"^\d{4}\.\d+\.(\d+)(?:\.\d+)?$")


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
    """Make the loaded llama.cpp report its build number as build info (GET /props `build_info`), the
    string returned: newer builds compute it from LLAMA_BUILD_NUMBER and LLAMA_COMMIT, set here; older
    ones hold static `b0-unknown` strings, rewritten in place to `b<build>`."""
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
