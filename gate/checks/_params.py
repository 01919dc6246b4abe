"""The params of every built-in check, in one module that imports no torch.

`gate validate` and `gate plan` validate a manifest's `checks.<name>.params` (and the policy's) with
these models without importing the checks' bodies, so planning stays instant. Every built-in check
is a package (gate.checks._shape) that defines its model in its torch-free `__init__`; this module
serves them from there by name, and re-exports each model under its old import path. A plugin
check's params are validated by importing the plugin.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import gate.checks
from gate.checks.batch_invariance import BatchInvarianceParams as BatchInvarianceParams
from gate.checks.cache_identity import CacheIdentityParams as CacheIdentityParams
from gate.checks.greedy_parity import GreedyParityParams as GreedyParityParams
from gate.checks.hash_collision import HashCollisionParams as HashCollisionParams
from gate.checks.invalidation import InvalidationParams as InvalidationParams
from gate.checks.mask_oracle import MaskOracleParams as MaskOracleParams
from gate.checks.phase_performance import PhasePerformanceParams as PhasePerformanceParams
from gate.checks.prefix_reuse_parity import PrefixReuseParityParams as PrefixReuseParityParams
from gate.checks.prefix_sweep import PrefixSweepParams as PrefixSweepParams
from gate.checks.quality_slices import QualitySlicesParams as QualitySlicesParams
from gate.checks.reset_isolation import ResetIsolationParams as ResetIsolationParams
from gate.checks.schedule_fuzz import ScheduleFuzzParams as ScheduleFuzzParams
from gate.checks.spec_distribution import DISTRIBUTION_FAULTS as DISTRIBUTION_FAULTS
from gate.checks.spec_distribution import SpecDistributionParams as SpecDistributionParams
from gate.checks.spec_greedy import SpecGreedyParams as SpecGreedyParams
from gate.checks.tenant_isolation import TenantIsolationParams as TenantIsolationParams
from gate.core.check import Params

PACKAGES: tuple[ModuleType, ...] = tuple(
    importlib.import_module(f"gate.checks.{module.name}")
    for module in pkgutil.iter_modules(gate.checks.__path__)
    if module.ispkg and not module.name.startswith("_")
)
"""Every built-in check, one package each under gate/checks/ (gate.checks._shape), found by listing the
folder (a private package, such as _diagnosis, is a helper): each states its own params model in its
torch-free face, which this imports (never a body)."""

BUILTIN_PARAMS: dict[str, type[Params]] = {package.CARD: package.PARAMS for package in PACKAGES}
"""Check name -> its params model, for the built-in checks."""
