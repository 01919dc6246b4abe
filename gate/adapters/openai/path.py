"""EnginePath: one OpenAI-compatible server as a gate path (the `EngineServing` capability).

An HTTP engine exposes no logits and no session, only completions. The engine checks use `serve()`,
which yields a running server and stops its whole process group when the run ends, on an exception
and on Ctrl-C alike. A launched server is started once per run (each start costs model loading) and
handed to every later check that asks for the same launch, its prefix cache reset first (one that
refuses the reset is replaced); `fresh=True` asks for a new process, `Served.restart` replaces a held
one. At most `max_servers` run at once: an idle one stops to make room, the one the runner's plan
(`plan_servers`) needs last first. Every start is counted with why it happened (`start_reasons`).
"""

from __future__ import annotations

import contextlib
import functools
import shlex
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gate._util.digest import sha256_file
from gate._util.stopping import Stopper, on_stop
from gate.adapters.openai import process
from gate.adapters.openai.client import Completion, EngineClient, Streamed, resolve_headers
from gate.adapters.openai.geometry import (
    engine_identity,
    engine_version,
    launch_geometry,
    model_digest,
    resolved,
    served_dtype,
    served_geometry,
)
from gate.adapters.openai.options import (
    Launch,
    Options,
    TinyModel,
    flag,
    launched_model_meta,
    model_context_length,
    model_vocab_size,
)
from gate.adapters.openai.process import ServerProcess, died_serving, free_port, sigterm_stops_servers
from gate.adapters.openai.slots import LlamaSlotFiles, erase_slot, slot_files
from gate.adapters.openai.slots import absent as slot_absent
from gate.adapters.openai.tiny import tiny_model_file
from gate.adapters.openai.validate import CacheHistory, chunk_reuse
from gate.errors import EngineBadReply, UnknownFault
from gate.protocols import CacheGeometry

SALT_FIELDS = {"vllm": "cache_salt"}
"""Request field that salts the prefix cache, by flavor (SGLang, TGI and llama.cpp have none)."""


def executable_sha256(program: str) -> str | None:
    """sha256 of the program a launch command runs (on PATH or a path, links followed); None if no such file."""
    target = Path(shutil.which(program) or program).resolve()
    if not target.is_file():
        return None
    return _sha256(str(target), target.stat().st_size, target.stat().st_mtime_ns)


@functools.cache
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """Cached by the file's size and modification time: a rebuilt program is hashed again."""
    return sha256_file(Path(path))


def _substitute(part: str, subs: dict[str, str]) -> str:
    for key, value in subs.items():
        part = part.replace(key, value)
    return part


def unreset_tiers(flavor: str, command: list[str] | None) -> list[str]:
    """The cache tiers a server's reset (`EnginePath.reset_cache`) cannot reach, from its flavor and
    launch command (None: a server gate did not launch, whose flags it cannot see). llama.cpp's
    host-memory prompt cache (fed by slots handed to another request and, by default, every idle
    slot) has no endpoint that clears it; slot files are no tier a request reaches."""
    if flavor == "llama.cpp":
        if command is None:
            return [
                "llama.cpp's host-memory prompt cache, unless the server was started with --cache-ram 0 (gate did "
                "not launch it and cannot see its flags): no endpoint clears it"
            ]
        size = flag(command, "--cache-ram", "-cram")
        if "--no-cache-prompt" in command or (size is not None and size.strip() == "0"):
            return []
        return [
            f"llama.cpp's host-memory prompt cache (--cache-ram, {size or '8192'} MiB{'' if size else ' by default'}): "
            "POST /slots/N?action=erase clears a slot's KV only and no endpoint clears this tier; only a restart "
            "or --cache-ram 0 empties it"
        ]
    if flavor in ("vllm", "sglang"):
        return []
    return [f"the prefix cache, if any: gate knows no reset endpoint for a {flavor} server"]


@dataclass
class Pooled:
    """A server kept for the rest of the run (or until its last use, or until the cap makes room)."""

    server: ServerProcess
    client: EngineClient
    stopper: Stopper
    control: str | None = None
    """The negative control it runs, if any (stopped after the last check that names it)."""
    changed_model: bool = False
    """It loads another model than its path's launch (a restart on changed weights)."""
    in_use: int = 0
    """Blocks serving from it right now (never stopped to make room while above 0)."""
    last_used: int = 0
    """When it last served a block (a counter): the least recently used makes room first."""
    owner: int = 0
    """id() of the options of the path that started it (the candidate's, its controls' alike)."""
    used_in: tuple[int, int] = (-1, -1)
    """(plan, phase) of `_PLAN` in which it last served a block: a server idle after serving the phase
    now running is next needed in a later one."""


@dataclass
class Start:
    """One server start of the run: its label, launch configuration and why it started."""

    label: str
    key: str
    why: str


FIRST = "first start of a launch configuration"
RESTART = "restart: a reset the engine cannot do"
FRESH = "a new process the check asks for"
REFUSED = "restart: the server refused the reset"
EVICTED = "started again after the cap (max_servers) stopped it"
DIED = "started again after it stopped (it died, or its last planned use was over)"


@dataclass
class Plan:
    """The checks still to run, from the current one on, as the runner states them (`plan_servers`):
    for each, its phases in order (None: the check itself, then each control's name)."""

    owner: int
    """id() of the candidate's options: servers it started serve the phases of their control."""
    phases: list[tuple[int, str | None]]
    """(check, control) in run order; check 0 is the one running now."""
    serial: int = 0
    """Which plan this is (one per check the runner starts)."""
    at: int = 0
    """The phase running now (advanced when a server of the candidate's side is asked for)."""

    def next_use(self, held: Pooled) -> float:
        """The phase in which `held` (idle) is next needed; inf when no phase still to run needs it."""
        ahead = list(enumerate(self.phases))[self.at + (held.used_in == (self.serial, self.at)) :]
        if held.changed_model:  # started within one check (a restart on changed weights): its phases only
            later = [i for i, (check, _) in ahead if check == 0 and held.used_in[0] == self.serial]
        else:  # the reference serves every phase
            later = [i for i, (_, control) in ahead if held.owner != self.owner or control == held.control]
        return later[0] if later else float("inf")


_POOL: dict[str, Pooled] = {}
"""Launch (as JSON) -> the server running it, until the run ends (gate._util.stopping)."""
_STARTS: list[Start] = []
"""The servers started in this run (cleared when the run ends, gate._util.stopping)."""
_STOPPED: set[str] = set()
"""Keys of the pooled servers the cap stopped in this run (a later start of one is an eviction's cost)."""
_PLAN: list[Plan] = []
"""The plan the runner stated last (`plan_servers`), if any."""
_USES = [0]
"""A counter of blocks served, for least-recently-used order."""
_PEAK = [0]
"""Most servers gate had alive at once in this run."""


def live_servers() -> int:
    """Servers gate launched that are running now (pooled, fresh and probing alike)."""
    return len(process._LIVE)


def peak_servers() -> int:
    """Most servers alive at once in this run."""
    return _PEAK[0]


def _make_room(cap: int) -> None:
    """Stop idle pooled servers until one more start keeps `cap` alive at once: the one the plan needs
    last first, then controls' before changed models' before the others, least recently used first."""
    plan = _PLAN[0] if _PLAN else None
    while live_servers() >= cap:
        idle = sorted(
            (
                -(plan.next_use(p) if plan is not None else 0),
                p.control is None,
                not p.changed_model,
                p.last_used,
                key,
            )
            for key, p in _POOL.items()
            if p.in_use == 0
        )
        if not idle:
            return  # every live server is serving a block: the new one goes over the cap
        _STOPPED.add(idle[0][4])
        _POOL[idle[0][4]].stopper.stop()


def plan_servers(owner: int, ahead: list[list[str | None]]) -> None:
    """State the checks still to run (`Plan`) for the candidate whose options have id `owner`."""
    if not _PLAN:
        on_stop("engine server plan", _PLAN.clear)
    serial = _PLAN[0].serial + 1 if _PLAN else 1
    phases = [(check, phase) for check, phases in enumerate(ahead) for phase in phases]
    _PLAN[:] = [Plan(owner, phases, serial)]


def _enter_phase(owner: int, control: str | None) -> None:
    """A server of the candidate's side is asked for: advance to its control's next phase of this check."""
    plan = _PLAN[0] if _PLAN else None
    if plan is None or plan.owner != owner:
        return
    for i in range(plan.at, len(plan.phases)):
        if plan.phases[i][0] != 0:
            return
        if plan.phases[i][1] == control:
            plan.at = i
            return


def release_controls(keep: set[str]) -> list[str]:
    """Stop the pooled servers of every control not in `keep` (their last use is over); their labels."""
    done = [p for p in _POOL.values() if p.control is not None and p.control not in keep and p.in_use == 0]
    for held in done:
        held.stopper.stop()
    return [held.server.label for held in done]


def engine_starts() -> list[str]:
    """The servers gate started in this run, in order (a pooled server counts once)."""
    return [s.label for s in _STARTS]


def start_reasons() -> dict[str, Any]:
    """Why each start of this run happened, for the evidence: configurations, counts by reason, starts."""
    return {
        "configurations": len({s.key for s in _STARTS}),
        "why": dict(Counter(s.why for s in _STARTS)),
        "starts": [f"{s.label}: {s.why}" for s in _STARTS],
    }


def starts_in_run() -> dict[str, Any]:
    """The servers started so far in this run: for the checks and for their controls, and why each."""
    controls = sum("[control " in s.label for s in _STARTS)
    return {"checks": len(_STARTS) - controls, "controls": controls, **start_reasons()}


def _reset_counts() -> None:
    _STARTS.clear()
    _STOPPED.clear()
    _PEAK[0] = 0


def _why_start(key: str) -> str:
    """Why a server on `key` would start now (unless a check asks for a restart or a new process)."""
    if not any(s.key == key for s in _STARTS):
        return FIRST
    return EVICTED if key in _STOPPED else DIED


def _pooled(key: str) -> Pooled | None:
    held = _POOL.get(key)
    if held is not None and (held.server.proc is None or held.server.proc.poll() is not None):
        held.stopper.stop()  # it died (a crash a check reported): the next check gets a new one
        return None
    return held


@dataclass
class Served:
    """A running server as a check sees it (gate.protocols.EngineServer); `server`: None at base_url."""

    client: EngineClient
    server: ServerProcess | None
    path: EnginePath
    reused: bool = False
    """Handed over from an earlier check of this run (its cache reset), not started for this one."""
    restarter: Callable[[], tuple[ServerProcess, EngineClient]] | None = None
    """Stops this server and starts a new process on its launch in its place (None: gate did not launch it)."""
    restarts: int = 0
    """How often `restart` replaced the process while the check held it."""

    @property
    def flavor(self) -> str:
        return self.client.flavor

    @property
    def info(self) -> dict[str, Any]:
        return self.client.info

    def complete(
        self, prompt: list[int], max_tokens: int, top_k: int, extra: dict[str, Any] | None = None
    ) -> Completion:
        with died_serving(self.server, "POST /v1/completions", length=len(prompt), new_tokens=max_tokens):
            return self.client.complete(prompt, max_tokens, top_k, extra)

    def stream(self, prompt: list[int], max_tokens: int, top_k: int, extra: dict[str, Any] | None = None) -> Streamed:
        with died_serving(self.server, "POST /v1/completions (stream)", length=len(prompt), new_tokens=max_tokens):
            return self.client.stream(prompt, max_tokens, top_k, extra)

    def reset_cache(self) -> str | None:
        with died_serving(self.server, "reset the prefix cache"):
            return self.path.reset_cache(self.client)

    def unreset_tiers(self) -> list[str]:
        return unreset_tiers(self.client.flavor, None if self.server is None else self.server.command)

    def restart(self) -> bool:
        """Stop the server and start a new process on the same launch in its place, every cache tier
        empty; a pooled server's new process is handed over to later checks as the old one would have
        been (one more start, counted). False for a server gate did not launch (base_url)."""
        if self.restarter is None:
            return False
        self.server, self.client = self.restarter()
        self.reused, self.restarts = False, self.restarts + 1
        return True

    def slot_store(self) -> LlamaSlotFiles | str:
        """The server's slot files (gate.adapters.openai.slots), or why it offers none."""
        return slot_files(self.client, self.server)

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {"base_url": self.client.base_url, "flavor": self.client.flavor}
        if self.server is not None:
            out.update(self.server.describe())
            out["reused_from_earlier_check"] = self.reused
            if self.restarts:
                out["restarted_in_check"] = self.restarts
            if self.reused:
                out["cache_tiers_not_reset"] = self.unreset_tiers()
            out["engine_starts_in_run"] = starts_in_run()
            out["engine_servers_alive_peak"] = peak_servers()
        return out


@dataclass
class EnginePath:
    """One engine configuration. `control` names the negative control applied, if any."""

    options: Options
    dtype: str
    seed: int
    vocab_size: int = 0
    max_len: int = 0
    flavor: str = "generic"
    model_name: str | None = None
    control: str | None = None
    discovered: dict[str, Any] = field(default_factory=dict)
    cache_geometry: CacheGeometry = field(default_factory=CacheGeometry)
    uses_cache: bool = True
    name: str = "openai"

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def probe(cls, options: Options, *, dtype: str, seed: int) -> EnginePath:
        """Start (or reach) the server once to learn its model, flavor, vocabulary and context."""
        path = cls(options=options, dtype=dtype, seed=seed)
        with path.serve(label="probe") as served:
            launch = path._launch()
            log = served.server.log_text() if served.server is not None else ""
            command = None if launch is None else launch.command
            path.cache_geometry = served_geometry(served.client, command, launched_model_meta(options), log)
            info = {**served.client.info, **engine_version(served.client)}
            if computes := served_dtype(served.client.flavor, log):  # judged in the rounding it computes in
                info["compute_dtype"] = path.dtype = computes
            if served.server is not None:
                info["resolved_command"] = shlex.join(resolved(served.server.command))
        path.discovered = info
        path.flavor = str(info.get("flavor", "generic"))
        path.model_name = info.get("model")
        vocab = options.vocab_size or info.get("vocab_size") or model_vocab_size(options)
        if not vocab:
            raise EngineBadReply(
                f"{path.label}: the server does not state its vocabulary size, nor does the model's config.json; "
                "set `vocab_size` in the options"
            )
        path.vocab_size = int(vocab)
        stated = info.get("context_length") or model_context_length(options)  # the server's, else the model's
        context = [c for c in (options.context_length, stated) if c]
        if not context:
            raise EngineBadReply(
                f"{path.label}: the server does not state its context length, nor does the model; set `context_length`"
            )
        path.max_len = int(min(context))
        path.name = f"openai:{path.flavor}" + (f"+{path.control}" if path.control else "")
        return path

    @property
    def label(self) -> str:
        where = self.options.base_url or (self.options.launch.command[0] if self.options.launch else "?")
        return f"{where}" + (f" [control {self.control}]" if self.control else "")

    # -- DecodePath ----------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": self.flavor, "model": self.model_name, **self.discovered}
        launch = self._launch()
        if launch is not None:
            out["command"] = shlex.join(launch.command)
            out["executable_sha256"] = executable_sha256(launch.command[0])
            if launch.tiny_model is not None:
                out["model_sha256"] = tiny_model_file(launch.tiny_model)[1]
                out["tiny_model"] = launch.tiny_model.model_dump()
            elif launch.model_file:
                out["model_file"] = launch.model_file
                out["model_sha256"] = model_digest(launch.model_file)
        else:
            from gate.adapters.openai.transport import origin

            out["request_origin"] = origin(str(self.options.base_url))  # where requests (and headers) go
        if self.options.headers:
            out["header_names"] = sorted(self.options.headers)  # never their values
        out.update(engine_identity(self.cache_geometry))
        if self.control:
            out["control"] = self.control
        return out

    def full_logits(self, tokens: Any) -> Any:
        raise NotImplementedError("an HTTP engine exposes no logits; judge it with the engine-* checks")

    def new_session(self, batch_size: int) -> Any:
        raise NotImplementedError("an HTTP engine exposes no session; judge it with the engine-* checks")

    def faults(self) -> tuple[str, ...]:
        return tuple(self.options.controls)

    def release_controls(self, keep: set[str]) -> list[str]:
        """Stop the servers of the controls no later check names (gate.protocols.ReleasesControls)."""
        return release_controls(keep)

    def plan_servers(self, ahead: list[list[str | None]]) -> None:
        """The checks still to run (gate.protocols.PlansServers): the cap stops the server needed last."""
        plan_servers(id(self.options), ahead)

    def servers_started(self) -> dict[str, Any] | None:
        """Every start of the run and why, the most alive at once (CountsServers); None if gate started none."""
        return {**starts_in_run(), "alive_peak": peak_servers()} if _STARTS else None

    def with_fault(self, fault: str) -> EnginePath:
        if fault not in self.options.controls:
            raise UnknownFault(f"{self.name} declares no control {fault!r} (declared: {', '.join(self.faults())})")
        return replace(self, control=fault, name=f"{self.name}+{fault}")

    # -- engine capabilities (gate.protocols.EngineServing) -------------------------------------
    @property
    def salt_field(self) -> str | None:
        return self.options.cache_salt_field or SALT_FIELDS.get(self.flavor)

    @property
    def top_k(self) -> int:
        return self.options.top_k

    def changed_model(self, perturb_seed: int) -> TinyModel | None:
        """The tiny model this server loads with perturbed weights; None when it loads no tiny model
        (gate cannot make other weights for an arbitrary model file)."""
        launch = self._launch()
        if launch is None or launch.tiny_model is None:
            return None
        return launch.tiny_model.model_copy(update={"perturb_seed": perturb_seed})

    def slot_files_absent(self) -> str | None:
        """Why this path's servers offer no slot files (gate.protocols.SlotFilesPath), from its flavor and
        launch command, before any server starts; None when they may (the running server decides)."""
        launch = self._launch()
        return slot_absent(self.flavor, None if launch is None else launch.command)

    def _launch(self, model: TinyModel | str | None = None) -> Launch | None:
        """The launch this path runs: the control's arguments and model applied, or `model` given."""
        launch = self.options.launch
        if launch is None:
            return None
        spec = self.options.controls.get(self.control) if self.control else None
        update: dict[str, Any] = {}
        if spec is not None:
            update["command"] = [*launch.command, *spec.args]
            if model is None:  # `model` given replaces the control's
                model = spec.tiny_model if spec.tiny_model is not None else spec.model_file
        if isinstance(model, TinyModel):
            update.update(tiny_model=model, model_file=None)
        elif isinstance(model, str):
            update.update(model_file=model, tiny_model=None)
        return launch.model_copy(update=update)

    @contextlib.contextmanager
    def serve(
        self, *, label: str = "server", model: TinyModel | str | None = None, fresh: bool = False
    ) -> Iterator[Served]:
        """The server of this launch (or base_url): the run's running one, its cache reset, or a new
        one kept until the run ends; with `fresh`, a new process stopped when the block ends."""
        opts = self.options
        headers = resolve_headers(opts.headers)
        launch = self._launch(model)
        full_label = f"{label} ({self.label})"
        if launch is None:
            assert opts.base_url is not None
            client = self._client(opts.base_url, headers, full_label)
            client.discover()
            yield Served(client, None, self)
            return
        # per path (the reference and the candidate are separate processes even on one launch), per launch
        key = f"{id(opts)}:{launch.model_dump_json()}{sorted(headers.items())!r}"
        _enter_phase(id(opts), self.control)
        held = None if fresh else _pooled(key)
        reused, why = held is not None, _why_start(key)
        if held is not None and self._caches(launch):
            try:
                self.reset_cache(held.client)  # nothing an earlier check cached is left
            except EngineBadReply:  # no reset this server accepts (llama.cpp without --slot-save-path)
                held.stopper.stop()
                held, reused, why = None, False, REFUSED
        if held is None and not fresh:
            held = self._pool(key, launch, headers, full_label, model is not None, why)
        if held is not None:
            _USES[0] += 1
            held.in_use, held.last_used = held.in_use + 1, _USES[0]
            if _PLAN:
                held.used_in = (_PLAN[0].serial, _PLAN[0].at)
            pooled = held

            def restart_pooled() -> tuple[ServerProcess, EngineClient]:
                nonlocal pooled
                in_use, last_used, used_in = pooled.in_use, pooled.last_used, pooled.used_in
                pooled.stopper.stop()  # the old process, out of the pool
                pooled = self._pool(key, launch, headers, f"{full_label}, restarted", model is not None, RESTART)
                pooled.in_use, pooled.last_used, pooled.used_in = in_use, last_used, used_in
                return pooled.server, pooled.client

            try:
                yield Served(held.client, held.server, self, reused=reused, restarter=restart_pooled)
            except BaseException:  # an interrupted or failed check leaves no server in an unknown state
                pooled.stopper.stop()
                raise
            finally:
                pooled.in_use -= 1
            return
        with sigterm_stops_servers():
            started = [self._start(launch, headers, full_label, key, FIRST if why == FIRST else FRESH)]

            def restart_fresh() -> tuple[ServerProcess, EngineClient]:
                started[0][0].stop()
                started[0] = self._start(launch, headers, f"{full_label}, restarted", key, RESTART)
                return started[0]

            try:
                yield Served(started[0][1], started[0][0], self, restarter=restart_fresh)
            finally:
                started[0][0].stop()

    def _pool(
        self, key: str, launch: Launch, headers: dict[str, str], full_label: str, changed: bool, why: str
    ) -> Pooled:
        """Start a server on `launch` and keep it for the rest of the run under `key`."""
        server, client = self._start(launch, headers, full_label, key, why)

        def stop(key: str = key, server: ServerProcess = server) -> None:
            if _POOL.get(key) is not None and _POOL[key].server is server:
                _POOL.pop(key)
            server.stop()

        stopper = on_stop(f"engine server {full_label}", stop)
        _POOL[key] = Pooled(server, client, stopper, self.control, changed, owner=id(self.options))
        return _POOL[key]

    def _caches(self, launch: Launch) -> bool:
        """Whether a server of this launch may hold a prefix across requests (False: its flags or, for
        the launch probed, the engine state its prefix cache is off): one handed over needs a reset."""
        stated = launch_geometry(launch.command, self.flavor)
        if stated is not None and stated.prefix_caching is not None:
            return stated.prefix_caching
        return not (self.cache_geometry.prefix_caching is False and self.control is None)

    def _start(
        self, launch: Launch, headers: dict[str, str], full_label: str, key: str, why: str
    ) -> tuple[ServerProcess, EngineClient]:
        """Start a server on `launch` and wait until it answers; counted in `engine_starts` with `why`."""
        port = launch.port or free_port()
        model_path = launch.model_file if launch.tiny_model is None else str(tiny_model_file(launch.tiny_model)[0])
        timing = {"ready_timeout_s": launch.ready_timeout_s, "stop_timeout_s": launch.stop_timeout_s}
        server = ServerProcess([], port=port, probe=launch.probe, env=launch.env, label=full_label, **timing)
        subs = {"{port}": str(port), "{model}": model_path or "", "{workdir}": str(server.workdir)}
        server.command = [_substitute(part, subs) for part in launch.command]
        if not _STARTS:  # the first start of a run: the count ends with the run
            on_stop("engine start count", _reset_counts)
        _make_room(self.options.max_servers)
        _STARTS.append(Start(full_label, key, why))
        _STOPPED.discard(key)
        try:
            server.start()
            _PEAK[0] = max(_PEAK[0], live_servers())
            # a cache holds only what this new process was sent (gate.adapters.openai.validate)
            history = CacheHistory(prefix_only=not chunk_reuse(server.command))
            client = self._client(server.base_url, headers, full_label, alive=server.check_alive, history=history)
            client.discover()  # dying here, before any request of the check, is a failed start
        except BaseException:
            server.stop()
            raise
        return server, client

    def _client(
        self, base_url: str, headers: dict[str, str], label: str, alive: Any = None, history: CacheHistory | None = None
    ) -> EngineClient:
        opts = self.options
        return EngineClient(
            base_url,
            model=opts.model,
            flavor=opts.flavor,
            timeout_s=opts.request_timeout_s,
            retries=opts.retries,
            backoff_s=opts.backoff_s,
            headers=headers,
            alive=alive or (lambda: None),
            label=label,
            history=history,
        )

    def reset_cache(self, client: EngineClient) -> str | None:
        """Drop the engine's prefix cache through its own endpoint; the endpoint used, or None if it has none."""
        if client.flavor == "llama.cpp":
            slots = client.info.get("total_slots") or 1
            for slot in range(int(slots)):
                erase_slot(client, slot)
            return f"POST /slots/{{0..{int(slots) - 1}}}?action=erase"
        endpoint = {"vllm": "/reset_prefix_cache", "sglang": "/flush_cache"}.get(client.flavor)
        if endpoint is not None:
            client.post(endpoint, {})
        return None if endpoint is None else f"POST {endpoint}"
