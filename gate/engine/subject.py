"""The subject's two paths as a run builds them: each adapter's path, the reference answered from a
recording or the reference cache where asked, and that store's record for results.json.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gate.engine.options import RunOptions
from gate.engine.preflight import Log
from gate.errors import UnavailableError

if TYPE_CHECKING:
    from gate.core.manifest import Manifest


def _stored_reference(path: Any, spec: Any, manifest_name: str, options: RunOptions, log: Log) -> Any:
    """The reference path behind the reference cache or the recording store, when asked for."""
    from gate.adapters.recorded.store import BaselineStore, StoredPath, cached_reference, new_header

    if options.record is not None:
        store = BaselineStore(options.record, new_header(path, spec.adapter, spec.options, manifest_name), dirty=True)
        log(f"recording the reference's answers into {options.record}")
        return StoredPath(store, path, mode="recording")
    if options.reference_cache is not None and not isinstance(path, StoredPath):
        stored = cached_reference(options.reference_cache, path, spec.adapter, spec.options, manifest_name)
        log(f"reference cache: {stored.store.directory} ({len(stored.store.index)} stored answers)")
        return stored
    return path


def _threads_of_recording(path: Any, log: Log) -> None:
    """Replay stored answers with the torch thread count they were recorded with: a float32 matmul's
    bits depend on how many threads split it (docs/baselines.md)."""
    import torch

    from gate.adapters.recorded.store import StoredPath

    if not isinstance(path, StoredPath) or path.mode == "recording":
        return
    recorded = path.store.header.get("torch_threads")
    if isinstance(recorded, int) and recorded >= 1 and recorded != torch.get_num_threads():
        log(
            f"the stored answers were computed with {recorded} torch threads, this run had "
            f"{torch.get_num_threads()}: the run uses {recorded}, so float32 bits compare as recorded"
        )
        torch.set_num_threads(recorded)


def _baseline_record(path: Any, log: Log) -> dict[str, Any] | None:
    """Save a writing store; describe the store the reference answered from, for the record."""
    from gate.adapters.recorded.store import StoredPath

    if not isinstance(path, StoredPath):
        return None
    store = path.store
    store.save()
    log(f"{path.mode}: {store.hits} answers read, {store.misses} computed ({store.directory})")
    return {
        "kind": path.mode,
        "path": str(store.directory),
        "sha256": store.digest() if (store.directory / "baseline.json").is_file() else None,
        "key": store.key,
        "gate_commit": store.header.get("gate_commit"),
        "commit": store.header.get("commit"),
        "gate_version": store.header.get("gate_version"),
        "answers_read": store.hits,
        "answers_computed": store.misses,
        **({"live_reference": f"{path.live_built} (built for clocks and layer traces)"} if path.live_built else {}),
    }


def build_paths(manifest: Manifest, options: RunOptions, log: Log) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both paths of the subject as built for this run (the reference answered from stored answers
    where asked), and what each says of itself for results.json; UnavailableError where an adapter
    cannot run here."""
    from gate.core.registry import load_adapter
    from gate.errors import AdapterUnavailable

    subject = manifest.subject
    subjects: dict[str, Any] = {}
    paths = {}
    for role in ("reference", "candidate"):
        spec = getattr(subject, role)
        # only loading the adapter and building its path can say "cannot run here" (a missing extra,
        # no driver, a device the library refuses); an error anywhere else is not relabelled
        try:
            adapter = load_adapter(spec.adapter)()
            log(f"building {role} path ({spec.adapter})")
            paths[role] = adapter.build(
                adapter.Options.model_validate(spec.options),
                device=subject.device,
                dtype=subject.dtype,
                seed=subject.seed,
            )
        except (AdapterUnavailable, UnavailableError, ImportError, RuntimeError) as err:
            raise UnavailableError(f"adapter could not run: {err.__class__.__name__}: {err}") from err
        subjects[role] = {"adapter": spec.adapter, "path": paths[role].name, **paths[role].identity()}
    paths["reference"] = _stored_reference(paths["reference"], subject.reference, manifest.name, options, log)
    _threads_of_recording(paths["reference"], log)
    return paths, subjects
