"""Which attention function a transformers model's layers call (the registered one for its configured
implementation, else its modeling module's eager one), and whether a built model's implementation can
be switched. Read by the probe path, the attention capture of tracing paths and the reuse faults."""

from __future__ import annotations

import sys
from typing import Any

from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS as _ATTENTION_FUNCTIONS

ATTENTION_FUNCTIONS: Any = _ATTENTION_FUNCTIONS


def attention_function(model: Any) -> Any:
    """The attention function the model's layers call: the registered one for the configured
    implementation, else the eager one of the model's modeling module."""
    eager = sys.modules[type(model).__module__].eager_attention_forward
    return ATTENTION_FUNCTIONS.get_interface(model.config._attn_implementation, eager)


def can_leave_paged(model: Any) -> bool:
    """The release lets a caller switch a built model's attention implementation (what the fault does)."""
    return callable(getattr(model, "set_attn_implementation", None))
