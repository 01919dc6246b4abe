"""Baselines: the reference side's answers, stored so another build can be gated against them.

A baseline directory (docs/baselines.md) holds every observation the plan's checks asked of the
reference path. A question is the call a check made, `full_logits(tokens)` or a session's call with
everything that session was fed before, keyed by the sha256 of the reference key and that chain.
`StoredPath` answers from the store and, with a live path behind it, computes and stores what is
missing (the reference cache); without one, a missing answer is `MissingRecording`.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gate
from gate._util.atomic import write_bytes_atomic
from gate._util.limited import read_regular
from gate.core.baseline_format import FORMAT, HEADER, OBJECT_BYTES, git_commit, read_json, reference_key
from gate.errors import AdapterUnavailable, InputError

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from gate.protocols import DecodePath


class MissingRecording(LookupError):
    """A check asked the recorded reference a question the baseline does not hold."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tokens_digest(tokens: torch.Tensor) -> str:
    return _sha(tokens.detach().to("cpu").long().contiguous().numpy().tobytes() + str(list(tokens.shape)).encode())


@dataclass
class BaselineStore:
    """One reference's stored answers in one directory."""

    directory: Path
    header: dict[str, Any] = field(default_factory=dict)
    index: dict[str, dict[str, Any]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    dirty: bool = False

    @classmethod
    def open(cls, directory: Path) -> BaselineStore:
        """An existing baseline (or an empty store when the directory holds none)."""
        header_file = directory / HEADER
        if not header_file.is_file():
            return cls(directory)
        header = read_json(header_file)
        if header.get("format") != FORMAT:
            raise MissingRecording(f"{header_file}: not a gate baseline ({header.get('format')!r}, want {FORMAT})")
        index = header.pop("entries", {})
        if not isinstance(index, dict):
            raise InputError(str(header_file), "`entries` is not an object", field="entries")
        return cls(directory, header, index)

    @property
    def key(self) -> str:
        return str(self.header.get("key", ""))

    def digest(self) -> str:
        """sha256 of baseline.json as written (it lists every object's sha256)."""
        return _sha((self.directory / HEADER).read_bytes())

    def get(self, question: str) -> torch.Tensor | None:
        import numpy as np
        import torch

        entry = self.index.get(question)
        if entry is None:
            self.misses += 1
            return None
        blob = read_regular(self.directory / "objects" / f"{entry['sha256']}.npy", OBJECT_BYTES, "stored answer")
        if _sha(blob) != entry["sha256"]:
            raise MissingRecording(f"{self.directory}: object {entry['sha256']} does not match its digest")
        self.hits += 1
        return torch.from_numpy(np.load(io.BytesIO(blob), allow_pickle=False))

    def put(self, question: str, description: str, value: torch.Tensor) -> None:
        import numpy as np

        buffer = io.BytesIO()
        np.save(buffer, value.detach().float().cpu().contiguous().numpy(), allow_pickle=False)
        blob = buffer.getvalue()
        digest = _sha(blob)
        target = self.directory / "objects" / f"{digest}.npy"
        if not target.exists():
            write_bytes_atomic(target, blob)
        self.index[question] = {"sha256": digest, "shape": list(value.shape), "question": description}
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        body = {**self.header, "entries": dict(sorted(self.index.items()))}
        write_bytes_atomic(self.directory / HEADER, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())
        self.dirty = False


class StoredPath:
    """A reference DecodePath answered from a BaselineStore; `live` computes what is missing."""

    uses_cache: bool

    def __init__(
        self,
        store: BaselineStore,
        live: DecodePath | None,
        *,
        name: str | None = None,
        mode: str | None = None,
        counterpart: Callable[[], DecodePath] | None = None,
    ) -> None:
        self.store, self.live = store, live
        self.counterpart = counterpart
        """Builds the live reference the baseline names (the `recorded` adapter's live_reference)."""
        self._counterpart: DecodePath | AdapterUnavailable | None = None
        self.mode = mode or ("recorded baseline" if live is None else "reference cache")
        """recorded baseline (replay only), reference cache (read, compute what is missing) or recording."""
        shape = store.header.get("shape", {})
        self.name = name or (live.name if live is not None else str(shape.get("name", "recorded")))
        self.vocab_size = int(live.vocab_size if live else shape["vocab_size"])
        self.max_len = int(live.max_len if live else shape["max_len"])
        self.uses_cache = bool(live.uses_cache if live else shape["uses_cache"])
        self.dtype = str(live.dtype if live else shape["dtype"])

    def question(self, description: str) -> str:
        return _sha(f"{self.store.key}\n{description}".encode())

    def answer(self, description: str, compute: Any) -> torch.Tensor:
        key = self.question(description)
        stored = self.store.get(key)
        if stored is not None:
            return stored
        if self.live is None:
            raise MissingRecording(
                f"baseline {self.store.directory} has no recording for {description}: record it with "
                "`gate record` from a manifest whose checks ask this question"
            )
        value: torch.Tensor = compute().float().cpu()
        self.store.put(key, description, value)
        return value

    def live_reference(self) -> DecodePath:
        """The live path behind these answers, for clocks and layer traces only (LiveCounterpart): the
        one that computes what is missing, or the one the baseline names, checked against its identity."""
        if self.live is not None:
            return self.live
        if self._counterpart is None:
            if self.counterpart is None:
                self._counterpart = AdapterUnavailable(
                    f"baseline {self.store.directory} is replayed with live_reference: false, so nothing here "
                    "can time or trace the reference"
                )
            else:
                try:
                    built = self.counterpart()
                    _same_model(self.store.header.get("identity", {}), built.identity(), self.store.directory)
                    self._counterpart = built
                except AdapterUnavailable as err:
                    self._counterpart = err
        if isinstance(self._counterpart, AdapterUnavailable):
            raise self._counterpart
        return self._counterpart

    @property
    def live_built(self) -> str | None:
        """The name of the live reference a replay built for clocks and layer traces, if it did."""
        built = self._counterpart
        return None if built is None or isinstance(built, AdapterUnavailable) else str(built.name)

    def identity(self) -> dict[str, Any]:
        if self.live is not None:
            return self.live.identity()
        header = self.store.header
        baseline = {
            "path": str(self.store.directory),
            "sha256": self.store.digest(),
            "gate_commit": header.get("gate_commit"),
            "gate_version": header.get("gate_version"),
            "recorded_adapter": header.get("adapter"),
            "signed_for_manifest": header.get("manifest"),
            "signed_for_commit": header.get("commit"),
            "signed_by": signature.get("keyid") if isinstance(signature := header.get("signature"), dict) else None,
        }
        return {**header.get("identity", {}), "baseline": baseline}

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        live = self.live
        return self.answer(
            f"full_logits tokens {list(tokens.shape)} sha256 {tokens_digest(tokens)}",
            lambda: live.full_logits(tokens) if live is not None else None,
        )

    def new_session(self, batch_size: int) -> StoredSession:
        return StoredSession(self, batch_size)

    def faults(self) -> tuple[str, ...]:
        return ()

    def with_fault(self, fault: str) -> DecodePath:
        from gate.errors import UnknownFault

        raise UnknownFault(f"the stored reference {self.name} plants no faults ({fault!r})")


def _same_model(recorded: dict[str, Any], live: dict[str, Any], directory: Path) -> None:
    """The live reference must be the recorded model: every digest the recording names (the keys
    ending in sha256: config, weights, model file) equal, or, naming none, the whole identity."""
    digests = [key for key in recorded if key.endswith("sha256")]
    keys = digests or sorted(set(recorded) | set(live))
    for key in keys:
        if recorded.get(key) != live.get(key):
            raise AdapterUnavailable(
                f"the reference built here is not the model {directory} recorded: identity {key} "
                f"{live.get(key)!r}, recorded {recorded.get(key)!r}"
            )


class StoredSession:
    """A session whose every answer is keyed by the chain of calls made on it so far. With a live
    path, missed answers are computed on a live session that is first fed the calls it skipped."""

    def __init__(self, path: StoredPath, batch: int) -> None:
        self.path, self.batch = path, batch
        self.chain = _sha(f"session batch {batch}".encode())
        self.calls: list[tuple[str, torch.Tensor | None]] = []
        self.live: Any = None
        self.fed = 0
        self.tokens = 0

    def _step(self, op: str, tokens: torch.Tensor) -> torch.Tensor:
        self.chain = _sha(f"{self.chain}\n{op} {list(tokens.shape)} {tokens_digest(tokens)}".encode())
        self.calls.append((op, tokens))
        self.tokens += int(tokens.shape[1])
        return self.path.answer(f"session {op} chain {self.chain} (tokens {list(tokens.shape)})", self._compute)

    def _compute(self) -> torch.Tensor:
        assert self.path.live is not None
        if self.live is None:
            self.live = self.path.live.new_session(self.batch)
        out: torch.Tensor | None = None
        for op, tokens in self.calls[self.fed :]:
            if op == "reset":
                self.live.reset()
            else:
                assert tokens is not None
                out = getattr(self.live, op)(tokens)
        self.fed = len(self.calls)
        assert out is not None
        return out

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._step("prefill", tokens)

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._step("append", tokens)

    def reset(self) -> None:
        self.chain = _sha(f"{self.chain}\nreset".encode())
        self.calls.append(("reset", None))
        self.tokens = 0

    def exercise(self) -> dict[str, Any]:
        return {"cache_len": self.tokens, "cached_steps": 0, "cache_bytes": 0, "stored_answers": True}


def new_header(live: DecodePath, adapter: str, options: dict[str, Any], manifest: str) -> dict[str, Any]:
    import torch

    identity = live.identity()
    return {
        "format": FORMAT,
        "key": reference_key(identity, adapter, options),
        "identity": identity,
        "adapter": adapter,
        "options": options,
        "gate_version": gate.__version__,
        "gate_commit": git_commit(Path(gate.__file__).parent),
        "manifest": manifest,
        "torch_threads": torch.get_num_threads(),  # float32 bits depend on it: a replay uses the same
        "shape": {key: getattr(live, key) for key in ("name", "vocab_size", "max_len", "uses_cache", "dtype")},
    }


def cached_reference(
    cache_root: Path, live: DecodePath, adapter: str, options: dict[str, Any], manifest: str
) -> StoredPath:
    """The live reference behind the reference cache under `cache_root` (one directory per key)."""
    header = new_header(live, adapter, options, manifest)
    store = BaselineStore.open(cache_root / header["key"][:32])
    if not store.header:
        store.header = header
        store.dirty = True
    return StoredPath(store, live)
