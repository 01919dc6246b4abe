"""Optional capabilities that buy gate's generic negative controls or shape them: weights reloaded
in place, a cache cropped, controls' resources released, servers planned and counted, faults known invisible.
This module imports no torch at run time.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class WeightReloading(Protocol):
    """A path whose model can load changed weights in place while sessions stay open: buys the generic
    `weights-changed` control (gate.engine.generic_faults)."""

    def reload_weights(self, version: int) -> None:
        """0: the weights as built. Any other version: deterministically changed weights (as a
        model update would bring), loaded into the same model object."""


@runtime_checkable
class CacheCropping(Protocol):
    """A session whose cache length is exposed and can be cut back (HF `DynamicCache.crop`): buys the
    generic `block-truncated` control (gate.engine.generic_faults)."""

    def cache_length(self) -> int:
        """Tokens held in the cache."""

    def crop(self, length: int) -> None:
        """Keep only the first `length` cached tokens (and continue from position `length`)."""


@runtime_checkable
class ReleasesControls(Protocol):
    """Optional: a path that holds resources for its negative controls (an engine's control servers)."""

    def release_controls(self, keep: set[str]) -> list[str]:
        """Free what the controls outside `keep` hold (no later check names them); what was freed."""


@runtime_checkable
class PlansServers(Protocol):
    """Optional, beside ReleasesControls: a path whose servers are capped (an engine's) and that keeps
    the ones the checks still to run need in preference to the ones they do not."""

    def plan_servers(self, ahead: list[list[str | None]]) -> None:
        """The checks still to run, the current one first, each as its phases in order: None (the check
        itself), then the names of its controls."""


@runtime_checkable
class CountsServers(Protocol):
    """Optional: a path that starts server processes says, once the run's checks and controls are done,
    what they cost (the dossier's record of the run, where a check's evidence sees only its own part)."""

    def servers_started(self) -> dict[str, Any] | None:
        """Starts for the checks and for the controls, why each happened, the most alive at once; None: none."""


@runtime_checkable
class FaultVisibility(Protocol):
    """Optional: faults a path offers that cannot change its outputs on this architecture."""

    def invisible_faults(self) -> dict[str, str]:
        """Fault name -> why it is mathematically invisible here (e.g. a uniform position shift under
        pure rotary embeddings). The control engine declares such a control unobservable up front and
        lets a generic fault that stands in for it show the check's power instead."""
