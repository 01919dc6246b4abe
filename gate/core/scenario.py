"""Serving scenarios: concurrent conversations as data (release-gate step 6; background: four clocks).

A scenario file (`scenarios/*.yaml`) describes a workload, not a model; `conversations()` turns it
into concrete token ids, seeded, so every path replays exactly the same requests. No torch.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from gate._util.resources import data_dir
from gate._util.yamlio import parse_model, read_yaml
from gate.core.manifest import Record
from gate.errors import InputError


class Lengths(Record):
    """A distribution of token counts (or, for think time, milliseconds), clipped to [min, max]."""

    dist: Literal["fixed", "uniform", "lognormal"] = "uniform"
    """fixed: always `min`; uniform: integers in [min, max]; lognormal: around `median` with `sigma`."""
    min: int = Field(ge=0)
    """Smallest value."""
    max: int = Field(ge=0)
    """Largest value."""
    median: float | None = Field(default=None, gt=0)
    """lognormal: the median (default: the geometric mean of min and max)."""
    sigma: float = Field(default=0.5, gt=0, le=3)
    """lognormal: spread of log(value)."""

    @model_validator(mode="after")
    def _ordered(self) -> Lengths:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self

    def draw(self, rng: random.Random) -> int:
        if self.dist == "fixed" or self.min == self.max:
            return self.min
        if self.dist == "uniform":
            return rng.randint(self.min, self.max)
        median = self.median or math.sqrt(max(self.min, 1) * max(self.max, 1))
        return int(min(max(round(rng.lognormvariate(math.log(median), self.sigma)), self.min), self.max))


class Arrivals(Record):
    """When conversations start."""

    process: Literal["poisson", "uniform", "burst"] = "poisson"
    """poisson: exponential gaps at `rate_per_s`; uniform: evenly spaced at `rate_per_s`; burst: all at 0."""
    rate_per_s: float = Field(default=10.0, gt=0)
    """Conversations started per second (poisson, uniform)."""


class Slo(Record):
    """Latency targets a request must meet to count towards goodput."""

    ttft_s: float = Field(gt=0)
    """Time to first token, from the turn's arrival (queueing included)."""
    tpot_s: float = Field(gt=0)
    """Mean time per output token after the first."""


class Scenario(Record):
    """A serving workload (`apiVersion: gate/scenario/v1`)."""

    api_version: Literal["gate/scenario/v1"] = Field(alias="apiVersion")
    """Scenario format version."""
    name: str = Field(min_length=1, max_length=200)
    """Scenario name (the file name without .yaml, for shipped scenarios)."""
    description: str = ""
    """What workload this stands for."""
    conversations: int = Field(ge=1, le=4096)
    """Conversations in the run."""
    system_prefix: int = Field(ge=0)
    """Tokens of the system prompt every conversation opens with (identical ids: eligible for prefix reuse)."""
    turns: Lengths
    """Turns per conversation; each turn is one request (a user prompt, then a reply)."""
    prompt_tokens: Lengths
    """Private user tokens per turn."""
    output_tokens: Lengths
    """Reply tokens per turn (decoded greedily; end-of-sequence is ignored, so lengths are fixed)."""
    arrival: Arrivals = Field(default_factory=Arrivals)
    """When conversations start."""
    think_ms: Lengths = Field(default_factory=lambda: Lengths(dist="fixed", min=0, max=0))
    """Milliseconds between a reply's last token and the conversation's next turn."""
    max_concurrent: int = Field(default=8, ge=1, le=4096)
    """Conversations the server holds at once (their KV stays live between turns); later ones queue."""
    slo: Slo
    """Targets for goodput."""


@dataclass(frozen=True)
class Turn:
    """One request of a conversation."""

    prompt: list[int]
    """Token ids the user sends (the system prefix is prepended to the first turn)."""
    output_tokens: int
    """Tokens the reply decodes."""
    think_s: float
    """Seconds after the previous turn's last token before this turn arrives (0 for the first)."""


@dataclass(frozen=True)
class Conversation:
    """A concrete conversation: when it starts and its turns, as token ids."""

    index: int
    start_s: float
    system: list[int]
    turns: list[Turn] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        """Every token the conversation puts in the cache."""
        return len(self.system) + sum(len(t.prompt) + t.output_tokens for t in self.turns)


def conversations(scenario: Scenario, *, seed: int, vocab: int, max_len: int) -> list[Conversation]:
    """The scenario's conversations as token ids, seeded by `seed`. Turns that would take a
    conversation past `max_len` tokens are dropped (the first turn is shortened to fit instead)."""
    rng = random.Random(f"gate-scenario:{scenario.name}:{seed}")
    if scenario.system_prefix + 2 > max_len:
        raise ValueError(f"system prefix of {scenario.system_prefix} tokens does not fit max_len {max_len}")
    system = [rng.randrange(vocab) for _ in range(scenario.system_prefix)]
    out: list[Conversation] = []
    start = 0.0
    for index in range(scenario.conversations):
        if index and scenario.arrival.process == "poisson":
            start += rng.expovariate(scenario.arrival.rate_per_s)
        elif index and scenario.arrival.process == "uniform":
            start += 1.0 / scenario.arrival.rate_per_s
        used = len(system)
        turns: list[Turn] = []
        for number in range(max(scenario.turns.draw(rng), 1)):
            prompt_len = max(scenario.prompt_tokens.draw(rng), 1)
            reply = max(scenario.output_tokens.draw(rng), 1)
            think = scenario.think_ms.draw(rng) / 1000.0 if number else 0.0
            if used + prompt_len + reply > max_len:
                if number:
                    break
                reply = max(min(reply, (max_len - used) // 2), 1)
                prompt_len = max(max_len - used - reply, 1)
            turns.append(Turn([rng.randrange(vocab) for _ in range(prompt_len)], reply, think))
            used += prompt_len + reply
        out.append(Conversation(index, round(start, 6), system, turns))
    return out


def shipped_scenarios() -> list[str]:
    """Names of the scenarios shipped with gate."""
    folder = data_dir("scenarios")
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_scenario(name_or_path: str) -> Scenario:
    """Read and validate a shipped scenario by name (`chat-shared-prefix`) or a scenario file by path;
    a bad file raises an InputError naming file, line and field."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml") and not path.exists():
        path = data_dir("scenarios") / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(shipped_scenarios()) or "none"
        raise InputError(str(path), f"no scenario {name_or_path!r} (shipped: {known})")
    scenario: Scenario = parse_model(read_yaml(path), Scenario)
    return scenario
