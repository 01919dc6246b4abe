"""What the dossier says in words: release-gate steps, verdict and status labels, interventions, claims."""

from __future__ import annotations

STEP_TITLES = {
    1: "Name the intervention",
    2: "Declare the equivalence claim",
    3: "Build cache identity",
    4: "Run the positive parity case",
    5: "Run negative cases",
    6: "Measure phase-specific performance",
    7: "Slice quality where approximation enters",
    8: "Test invalidation and recovery",
}
"""The eight-step release gate (docs/background.md)."""

VERDICTS = {
    "pass": ("PASS", "good"),
    "fail": ("FAIL", "bad"),
    "error": ("ERROR", "bad"),
    "awaiting-approval": ("AWAITING APPROVAL", "await"),
    "pass-with-waivers": ("PASS WITH WAIVERS", "waived"),
    "unproven": ("UNPROVEN", "unproven"),
    "partial": ("PARTIAL RUN", "muted"),
}


def verdict_label(verdict: str, unproven: int = 0) -> tuple[str, str]:
    """Banner label and tone of a verdict; a pass carrying unproven checks is amber, never green."""
    label, tone = VERDICTS.get(verdict, (verdict.upper(), "muted"))
    if unproven and verdict == "pass":
        return f"{label}, {unproven} UNPROVEN", "unproven"
    return label, tone


STATUSES = {
    "pass": ("PASS", "good"),
    "fail": ("FAIL", "bad"),
    "warn": ("WARN", "warn"),
    "error": ("ERROR", "bad"),
    "skip": ("SKIPPED", "muted"),
    "not-applicable": ("NOT APPLICABLE", "muted"),
    "waived": ("WAIVED", "waived"),
    "unproven": ("UNPROVEN", "unproven"),
}

CONTROL_TONES = {
    "detected": "good",
    "tolerated": "good",
    "missed": "bad",
    "over-rejected": "bad",
    "error": "bad",
    "unobservable": "warn",
    "unsupported": "muted",
}

INTERVENTION_WORDS = {
    "layout": "Exact tensors stored in a different layout (paged or blocked KV, another kernel).",
    "scheduling": "The same computations in another order or batching (chunked prefill, continuous batching).",
    "prefix-reuse": "KV state shared between requests whose token prefixes and configuration match.",
    "proposal-and-verify": "A cheap draft proposes tokens; the target model accepts or rejects them "
    "(speculative decoding).",
    "quantisation": "KV state kept at reduced precision: an approximation.",
    "eviction": "Old KV state dropped (sliding window, attention sinks): an approximation.",
}

CLAIM_WORDS = {
    "exact": "bit-identical logits: the candidate computes exactly the same numbers as the reference",
    "tolerance": "tolerance-bounded logits: the same argmax everywhere, logits within a stated tolerance",
    "greedy-tokens": "identical greedy continuations token for token over the stated lengths",
    "distribution": "the same output distribution under sampling, tested at a stated significance level",
    "bounded-degradation": "an approximation: task quality stays inside a stated envelope on each evaluated "
    "slice, and only there",
}

TRANSFER = {
    "exact": "An exact claim is an algorithmic identity: evidence that the mechanism is right transfers to new "
    "prompts within the mechanism's domain, so the gate tests the mechanism (bit identity against the reference "
    "running the same cached schedule, parity across lengths, planted bugs), not every prompt.",
    "tolerance": "A tolerance claim says the candidate computes the same function up to rounding: the argmax "
    "must agree everywhere and |Δlogit| against one full pass of the reference stays within the stated "
    "tolerance. Evidence of the mechanism transfers to new prompts; rounding differences are expected, not a bug.",
    "greedy-tokens": "A greedy-tokens claim covers greedy decoding only: the candidate's continuations equal "
    "the reference's token for token over the stated lengths. It says nothing about sampled output or about "
    "logits beyond their argmax.",
    "distribution": "A distribution claim is statistical: sampled outputs follow the reference's distribution, "
    "tested at the stated significance level with controls that show the test has power. A pass is evidence "
    "at that level, not proof; individual samples may differ.",
    "bounded-degradation": "An approximation earns only the envelope actually evaluated: the slices, metrics "
    "and sample sizes below. The evidence does not transfer to other tasks, prompts or models.",
}
"""What the evidence of each claim level does and does not transfer to (one sentence set per claim)."""

SWEEP_COMPARISON = "candidate against one full (uncached) pass of the reference"
"""What a prefix sweep's |Δlogit| is measured against."""
BITWISE_COMPARISON = "candidate against {path} running the same cached schedule (bit identity)"
