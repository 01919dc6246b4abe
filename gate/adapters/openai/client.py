"""A small OpenAI-compatible completions client for token-id prompts, greedy decoding and top-k logprobs.

Prompts are token ids, so two servers read exactly the same tokens. Field names by engine (read from
their sources, see docs/engines.md):

    top-k with ids   llama.cpp: choices[0].logprobs.content[i].{id, logprob, top_logprobs[].{id, logprob}}
                     (requested with n_probs); vLLM: the legacy completions logprobs with
                     return_tokens_as_token_ids (tokens "token_id:N")
    cached tokens    usage.prompt_tokens_details.cached_tokens (OpenAI, vLLM with
                     --enable-prompt-tokens-details, SGLang with --enable-cache-report, llama.cpp);
                     llama.cpp also timings.cache_n; hosted APIs usage.cache_read_input_tokens
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from gate._util.text import one_line
from gate.adapters.openai import transport, validate
from gate.adapters.openai.options import ENV_REF, header_env_problem
from gate.errors import EngineBadReply, EngineCrashed, EngineTimeout, EngineWrongModel, InputError

Flavor = Literal["vllm", "sglang", "llama.cpp", "tgi", "generic"]


@dataclass
class Completion:
    """One greedy completion: what an HTTP engine lets gate observe."""

    tokens: list[int]
    logprobs: list[float]
    """Logprob of each generated token under the engine's own (pre-sampling) distribution."""
    top: list[dict[int, float]]
    """Per position: the top-k token ids and their logprobs."""
    cached_tokens: int | None
    """Prompt tokens the server reports it reused from its cache (None: it reports nothing)."""
    prompt_tokens: int | None
    seconds: float
    timings: dict[str, Any] = field(default_factory=dict)
    cached_field: str | None = None
    """The reply field `cached_tokens` was read from (e.g. usage.prompt_tokens_details.cached_tokens)."""
    finish_reason: str | None = None
    """Why generation ended, as the server says (choices[0].finish_reason): `stop` at an end-of-sequence
    token (gate sends no stop strings), `length` at max_tokens; None where the reply does not say."""

    def summary(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "cached_tokens": self.cached_tokens,
            "prompt_tokens": self.prompt_tokens,
            "seconds": round(self.seconds, 4),
        }


@dataclass
class Streamed:
    """A streamed completion, and when each of its tokens arrived (seconds after the request was sent)."""

    completion: Completion
    token_s: list[float]


def resolve_headers(templates: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """Header values from their `${VAR}` templates; the values never enter a record."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, template in templates.items():
        if (problem := header_env_problem(name, template, env)) is not None:
            raise InputError("headers", problem)  # Options refuse it first; this holds for any caller
        missing = [v for v in ENV_REF.findall(template) if v not in env]
        if missing:
            raise EngineBadReply(f"header {name} needs environment variable {missing[0]}, which is not set")
        out[name] = ENV_REF.sub(lambda m: env[m.group(1)], template)
    return out


class EngineClient:
    """Requests to one server, with a request timeout, retries with exponential backoff and a
    liveness hook (a launched server's `check_alive`) consulted before a failure is blamed on it."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        flavor: Flavor | Literal["auto"] = "auto",
        timeout_s: float = 120.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        headers: dict[str, str] | None = None,
        alive: Callable[[], None] = lambda: None,
        label: str = "server",
        history: validate.CacheHistory | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.headers = headers or {}
        self.alive, self.label = alive, label
        self.flavor: Flavor = "generic" if flavor == "auto" else flavor
        self._auto = flavor == "auto"
        self.model = model
        self.info: dict[str, Any] = {}
        self.history = history
        """What this server can have cached, when gate launched it (gate.adapters.openai.validate)."""

    # -- transport ---------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        retry: bool = True,
        read: Callable[[Any], Any] | None = None,
    ) -> Any:
        """One request with retries; `read` consumes the open reply (default: the whole body as JSON)."""
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **self.headers}
        attempts = 1 + (self.retries if retry else 0)
        last: str = ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            self.alive()
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:  # one total deadline for connecting, the headers and the whole body or stream (transport)
                raw = transport.fetch(req, self.timeout_s, f"{self.label}: {method} {path}", read)
                if read is not None:
                    return raw
            except transport.HTTPStatus as err:
                text = one_line(err.body.decode(errors="replace"), 300)  # engine text never starts a log line
                if err.code >= 500 and attempt + 1 < attempts:
                    last = f"HTTP {err.code}: {text}"
                    continue
                raise EngineBadReply(f"{self.label}: {method} {path} answered HTTP {err.code}: {text}") from None
            except OSError as err:  # a timeout (the deadline, a socket wait), urllib's URLError, a refused connection
                reason = getattr(err, "reason", err)
                last = "timeout" if isinstance(reason, TimeoutError) else f"connection failed: {one_line(reason, 300)}"
                continue
            except http.client.IncompleteRead:  # the connection closed inside the body
                last = "connection failed: the reply ended before its body did"
                continue
            except http.client.HTTPException as err:  # a status line or header that is not HTTP
                raise EngineBadReply(
                    f"{self.label}: {method} {path} did not answer HTTP: {type(err).__name__}: {one_line(err, 120)}"
                ) from None
            try:
                return json.loads(raw)
            except (ValueError, RecursionError):
                snippet = raw[:120].decode(errors="replace")
                raise EngineBadReply(f"{self.label}: {method} {path} did not answer JSON: {snippet!r}") from None
        self.alive()  # a dead server is a crash, not a timeout
        if last == "timeout":
            raise EngineTimeout(
                f"{self.label}: {method} {path} got no reply within {self.timeout_s:g}s "
                f"({attempts} attempt(s)); raise `request_timeout_s` if the engine is just slow"
            )
        raise EngineCrashed(f"{self.label}: {method} {path} failed after {attempts} attempt(s): {last}")

    def get(self, path: str, *, retry: bool = True) -> Any:
        return self._request("GET", path, retry=retry)

    def post(self, path: str, body: dict[str, Any], *, retry: bool = True) -> Any:
        return self._request("POST", path, body, retry=retry)

    # -- discovery ---------------------------------------------------------------------------
    def _try_get(self, path: str) -> Any:
        try:
            return self._request("GET", path, retry=False)
        except (EngineBadReply, EngineCrashed, EngineTimeout):
            return None

    def discover(self) -> dict[str, Any]:
        """Model name, flavor (when `auto`), vocabulary size and context length as the server states them."""
        models = self.get("/v1/models")
        where = f"{self.label}: /v1/models"
        if not isinstance(models, dict) or not isinstance(models.get("data"), list) or not models["data"]:
            raise EngineBadReply(f"{where} did not list a model: {one_line(models, 200)}")
        entry = models["data"][0]
        if not isinstance(entry, dict):
            raise EngineBadReply(f"{where}: data[0] is {one_line(entry, 100)}, not an object")
        if self.model is not None:  # the manifest names it: the server must say it serves that model
            served = [str(e.get("id")) for e in models["data"] if isinstance(e, dict)]
            if self.model not in served:
                raise EngineWrongModel(
                    f"{where} lists {one_line(', '.join(served), 200)}, not the manifest's model "
                    f"{one_line(self.model, 100)}: this server serves another model"
                )
            entry = models["data"][served.index(self.model)]
        self.model = self.model or str(entry.get("id"))
        meta = entry.get("meta") or {}
        if not isinstance(meta, dict):
            raise EngineBadReply(f"{where}: data[0].meta is {one_line(meta, 100)}, not an object")
        if self._auto:
            self.flavor = self._detect(entry)
        info: dict[str, Any] = {"model": self.model, "flavor": self.flavor, "owned_by": entry.get("owned_by")}
        if "n_vocab" in meta:
            info["vocab_size"] = validate.whole(
                meta["n_vocab"], "data[0].meta.n_vocab", where, low=2, high=validate.MAX_VOCAB
            )
        for key in ("n_ctx", "max_model_len"):
            if value := meta.get(key, entry.get(key)):
                info["context_length"] = validate.whole(
                    value, f"data[0] {key}", where, low=1, high=validate.MAX_CONTEXT
                )
                break
        if self.flavor == "llama.cpp":
            props = self._try_get("/props")
            props = props if isinstance(props, dict) else {}
            at = f"{self.label}: /props"
            info["build_info"] = props.get("build_info")
            settings = props.get("default_generation_settings") or {}
            if isinstance(settings, dict) and "n_ctx" in settings:
                n_ctx, named = settings["n_ctx"], "default_generation_settings.n_ctx"
                info["context_length"] = validate.whole(n_ctx, named, at, low=1, high=validate.MAX_CONTEXT)
            slots = props.get("total_slots")
            if slots is not None:
                slots = validate.whole(slots, "total_slots", at, low=1, high=validate.MAX_SLOTS)
            info["total_slots"] = slots
        self.info = info
        return info

    def _detect(self, entry: dict[str, Any]) -> Flavor:
        owned: dict[Any, Flavor] = {"llamacpp": "llama.cpp", "vllm": "vllm", "sglang": "sglang"}
        if entry.get("owned_by") in owned:
            return owned[entry["owned_by"]]
        props = self._try_get("/props")
        if isinstance(props, dict) and "default_generation_settings" in props:
            return "llama.cpp"
        info = self._try_get("/info")
        if isinstance(info, dict) and "model_id" in info and "max_input_tokens" in info:
            return "tgi"
        if isinstance(self._try_get("/get_server_info"), dict):
            return "sglang"
        version = self._try_get("/version")
        if isinstance(version, dict) and "version" in version:
            return "vllm"
        return "generic"

    # -- completions -------------------------------------------------------------------------
    def _body(
        self, prompt: list[int], max_tokens: int, top_k: int, extra: dict[str, Any] | None, *, stream: bool
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}  # vLLM/OpenAI: usage (cached tokens) in the last chunk
        if self.flavor == "llama.cpp":
            body.update({"n_probs": top_k, "ignore_eos": True})
        elif self.flavor == "vllm":
            body.update({"logprobs": top_k, "return_tokens_as_token_ids": True, "ignore_eos": True})
        else:
            body["logprobs"] = top_k
        body.update(extra or {})
        return body

    def complete(
        self, prompt: list[int], max_tokens: int, top_k: int, extra: dict[str, Any] | None = None
    ) -> Completion:
        """Greedy continuation of a token-id prompt with top-k logprobs at each position."""
        body = self._body(prompt, max_tokens, top_k, extra, stream=False)
        sent = None if self.history is None else self.history.sent(prompt)
        started = time.perf_counter()
        reply = self.post("/v1/completions", body)
        seconds = time.perf_counter() - started
        with malformed(f"{self.label}: the completion reply"):
            completion = parse_completion(reply, self.label, seconds)
        self._same_model(reply.get("model") if isinstance(reply, dict) else None, f"{self.label}: the completion reply")
        where = f"{self.label}: choices[0].logprobs"
        return self._checked(completion, prompt, max_tokens, sent, where, exact=body.get("ignore_eos") is True)

    def _same_model(self, named: Any, where: str) -> None:
        """EngineWrongModel when a reply names another model than the one asked for (a reply without
        the field says nothing; a dated snapshot of the name asked, `NAME-2024-08-06`, is the same)."""
        asked = self.model
        if asked is None or not isinstance(named, str) or named == asked or named.startswith(asked + "-"):
            return
        raise EngineWrongModel(
            f"{where} says model {one_line(named, 100)}, not {one_line(asked, 100)} as asked: "
            "the server answered with another model"
        )

    def _checked(
        self, completion: Completion, prompt: list[int], max_tokens: int, sent: int | None, where: str, *, exact: bool
    ) -> Completion:
        """The completion, once every number in it is possible; `exact`: exactly max_tokens tokens (ignore_eos)."""
        validate.check_tokens(
            completion.tokens,
            completion.logprobs,
            completion.top,
            where=where,
            max_tokens=max_tokens,
            exact_length=exact,
            vocab=self.info.get("vocab_size"),
        )
        if completion.prompt_tokens is not None:
            validate.whole(completion.prompt_tokens, "usage.prompt_tokens", where, high=len(prompt) + 1)
        if completion.cached_tokens is not None:
            field = completion.cached_field or "cached tokens"
            validate.whole(completion.cached_tokens, field, where, high=len(prompt))
            if self.history is not None and sent is not None:
                self.history.check(completion.cached_tokens, field, sent, prompt, where)
        if self.history is not None and sent is not None:
            self.history.served(sent, prompt, completion.tokens)
        return completion

    def stream(self, prompt: list[int], max_tokens: int, top_k: int, extra: dict[str, Any] | None = None) -> Streamed:
        """The same greedy continuation, streamed: each token's arrival time is kept (time to first token)."""
        body = self._body(prompt, max_tokens, top_k, extra, stream=True)
        where = f"{self.label}: streamed choices[0].logprobs"
        sent = None if self.history is None else self.history.sent(prompt)
        started = time.perf_counter()

        def read(reply: Any) -> Streamed:
            tokens: list[int] = []
            lps: list[float] = []
            top: list[dict[int, float]] = []
            token_s: list[float] = []
            usage: dict[str, Any] = {}
            timings: dict[str, Any] = {}
            finish: Any = None
            for raw in transport.lines(reply, where):
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except (ValueError, RecursionError):
                    raise EngineBadReply(f"{where}: a streamed event is not JSON: {data[:120]!r}") from None
                now = time.perf_counter() - started
                with malformed(f"{where}: a streamed event"):
                    self._same_model(chunk.get("model"), f"{where}: a streamed event")
                    usage = chunk.get("usage") or usage
                    timings = chunk.get("timings") or timings
                    choices = chunk.get("choices") or []
                    finish = (choices[0].get("finish_reason") if choices else None) or finish
                    logprobs = choices[0].get("logprobs") if choices else None
                    if not logprobs:
                        continue
                    ids, values, alts = parse_logprobs(logprobs, where)
                tokens += ids
                lps += values
                top += alts
                token_s += [now] * len(ids)  # tokens that arrive in one event arrive together
            if not tokens:
                raise EngineBadReply(f"{where}: the stream carried no tokens with logprobs (does it support them?)")
            seconds = time.perf_counter() - started
            with malformed(f"{where}: the stream's usage"):
                done = _completion(tokens, lps, top, usage, timings, where, seconds, finish)
            return Streamed(done, token_s)

        result: Streamed = self._request("POST", "/v1/completions", body, read=read)
        self._checked(result.completion, prompt, max_tokens, sent, where, exact=body.get("ignore_eos") is True)
        return result


@contextlib.contextmanager
def malformed(where: str) -> Iterator[None]:
    """A reply whose shape the parser could not read (a string where an object belongs, a logprob that is
    not a number) is a bad reply naming where, never gate's own TypeError."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError) as err:
        raise EngineBadReply(f"{where} is malformed: {type(err).__name__}: {one_line(err, 200)}") from None


def _token_id(value: Any, where: str) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.startswith("token_id:"):
        return int(value.split(":", 1)[1])
    raise EngineBadReply(
        f"{where}: the server named a token by its text ({value!r}), not its id; ask it for ids "
        "(vLLM: return_tokens_as_token_ids) or use flavor llama.cpp"
    )


def parse_logprobs(logprobs: Any, where: str) -> tuple[list[int], list[float], list[dict[int, float]]]:
    """Token ids, their logprobs and the top-k at each position from a `choices[0].logprobs` object
    (llama.cpp's id-carrying shape or the legacy OpenAI / vLLM shape); a streamed chunk has the same."""
    tokens: list[int] = []
    lps: list[float] = []
    top: list[dict[int, float]] = []
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):  # llama.cpp
        for item in logprobs["content"]:
            tokens.append(_token_id(item.get("id"), where))
            lps.append(float(item["logprob"]))
            top.append({_token_id(t.get("id"), where): float(t["logprob"]) for t in item.get("top_logprobs", [])})
    elif isinstance(logprobs, dict) and isinstance(logprobs.get("tokens"), list):  # legacy OpenAI / vLLM
        alternatives = logprobs.get("top_logprobs") or []
        if not len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(alternatives):
            raise EngineBadReply(
                f"{where}: tokens, token_logprobs and top_logprobs differ in length: positions cannot be aligned"
            )
        for tok, lp, alts in zip(logprobs["tokens"], logprobs["token_logprobs"], alternatives, strict=True):
            tokens.append(_token_id(tok, where))
            lps.append(float(lp))
            top.append({_token_id(t, where): float(v) for t, v in (alts or {}).items()})
    else:
        raise EngineBadReply(f"{where} has an unknown shape: {one_line(logprobs, 200)}")
    return tokens, lps, top


def _completion(
    tokens: list[int],
    lps: list[float],
    top: list[dict[int, float]],
    usage: dict[str, Any],
    timings: dict[str, Any],
    where: str,
    seconds: float,
    finish: Any = None,
) -> Completion:
    validate.objects(usage, timings, where)
    if finish is not None and not isinstance(finish, str):
        raise EngineBadReply(f"{where}: finish_reason is not a string: {one_line(finish, 80)}")
    generated = usage.get("completion_tokens")
    if isinstance(generated, int) and generated != len(tokens):
        raise EngineBadReply(
            f"{where}: logprobs for {len(tokens)} tokens but {generated} were generated; positions cannot be aligned"
        )
    found = validate.reported_cached(usage, timings)  # whichever field reports cached prompt tokens
    cached = None if found is None else validate.whole(found[1], found[0], where)
    prompt_tokens = usage.get("prompt_tokens")
    return Completion(
        tokens,
        lps,
        top,
        cached,
        None if prompt_tokens is None else validate.whole(prompt_tokens, "usage.prompt_tokens", where),
        seconds,
        dict(timings),
        None if found is None else found[0],
        finish,
    )


def parse_completion(reply: Any, label: str, seconds: float) -> Completion:
    """Parse a /v1/completions reply (llama.cpp's id-carrying logprobs or the legacy OpenAI shape)."""
    try:
        choice = reply["choices"][0]
        logprobs = choice["logprobs"]
    except (KeyError, IndexError, TypeError):
        raise EngineBadReply(
            f"{label}: the completion reply has no choices[0].logprobs: {one_line(reply, 200)}"
        ) from None
    if not logprobs:
        raise EngineBadReply(f"{label}: the server returned no logprobs (does it support them?)")
    where = f"{label}: choices[0].logprobs"
    tokens, lps, top = parse_logprobs(logprobs, where)
    if not isinstance(reply, dict):
        raise EngineBadReply(f"{label}: the completion reply is not an object")
    usage, timings = reply.get("usage") or {}, reply.get("timings") or {}
    return _completion(tokens, lps, top, usage, timings, where, seconds, choice.get("finish_reason"))
