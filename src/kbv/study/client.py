"""An OpenAI-compatible endpoint client (chat and plain completions) over the `openai` package's async client.

One retry layer only: the `openai` client's own (`max_retries`, honouring `Retry-After`); the attempts it made are
counted per call. The one resend kbv makes itself is not a retry of a failure that may pass: a chat server that
refuses ``max_tokens`` with a 400 naming ``max_completion_tokens`` (OpenAI's reasoning models) is asked again, once,
with the limit under that name (counted as a retry). The API key is read from the environment variable named by
`Endpoint.api_key_env` at call time and is never stored, logged or returned. Errors never raise: each returned
`Completion` carries `error`.
"""
from __future__ import annotations

import asyncio
import contextvars
import os
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: The placeholder key sent when no key variable is named (vLLM and SGLang accept any key).
NO_KEY = "EMPTY"

_attempts: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("kbv_attempts", default=None)


@dataclass
class Endpoint:
    """Where to send requests. Holds no secret: the key is read from `api_key_env` when a request is made."""
    base_url: str
    model: str
    api: str = "chat"  # chat | completions
    api_key_env: str | None = None
    timeout: float = 600.0
    max_retries: int = 2

    def describe(self) -> dict[str, Any]:
        """The endpoint as recorded: no key (only the name of its variable), the URL without credentials."""
        return {"base_url": public_url(self.base_url), "model": self.model, "api": self.api,
                "api_key_env": self.api_key_env, "timeout": self.timeout, "max_retries": self.max_retries}


def public_url(url: str) -> str:
    """The base URL without user information, query or fragment (where secrets could hide)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


@dataclass
class Completion:
    """One sample. `usage` is as the server reported it for the request (None where not reported);
    `usage["shared_by"]` is the number of samples the request returned (figures per sample need 1)."""
    text: str
    finish_reason: str | None
    usage: dict
    latency_s: float
    retries_taken: int
    error: str | None = None
    reasoning: str | None = None  # a separate reasoning field (`reasoning_content`), where the server sends one


def _empty_usage(n: int) -> dict:
    return {"prompt_tokens": None, "completion_tokens": None, "reasoning_tokens": None, "cached_tokens": None,
            "shared_by": n}


def _usage(u: Any, n: int) -> dict:
    out = _empty_usage(n)
    if u is None:
        return out
    out["prompt_tokens"] = getattr(u, "prompt_tokens", None)
    out["completion_tokens"] = getattr(u, "completion_tokens", None)
    details = getattr(u, "completion_tokens_details", None)
    if details is not None:
        out["reasoning_tokens"] = getattr(details, "reasoning_tokens", None)
    details = getattr(u, "prompt_tokens_details", None)
    if details is not None:
        out["cached_tokens"] = getattr(details, "cached_tokens", None)
    return out


def _messages(prompt: str | list[dict]) -> Any:  # the openai client's message type
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def _plain(prompt: str | list[dict]) -> str:
    return prompt if isinstance(prompt, str) else "\n\n".join(str(m.get("content", "")) for m in prompt)


def _describe_error(exc: BaseException) -> str:
    import openai
    if isinstance(exc, openai.APITimeoutError):
        return "timeout: no response within the request timeout"
    if isinstance(exc, openai.APIStatusError):
        body = exc.response.text[:300] if exc.response is not None else ""
        return f"http_{exc.status_code}: {body}".strip()
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return f"connection: {type(cause).__name__ if cause else 'failed'}"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


#: The chat API's newer name for the token limit: OpenAI's reasoning models refuse ``max_tokens`` (400) and name
#: this one, vLLM and SGLang accept both, older servers only ``max_tokens``. kbv sends ``max_tokens`` and resends
#: once under this name when a server's 400 asks for it.
MAX_COMPLETION_TOKENS = "max_completion_tokens"


def _wants_max_completion_tokens(exc: Any, api: str, kwargs: dict[str, Any]) -> bool:
    if api != "chat" or "max_tokens" not in kwargs:
        return False
    body = exc.response.text if getattr(exc, "response", None) is not None else ""
    return MAX_COMPLETION_TOKENS in f"{exc} {body}"


async def _count_attempt(request: Any) -> None:
    counter = _attempts.get()
    if counter is not None:
        counter[0] += 1


REDACTED = "[redacted]"


def _redact(out: list[Completion], key: str) -> list[Completion]:
    """A server may echo the key (an error page quoting the request's headers): it is never returned."""
    if not key or key == NO_KEY:
        return out
    for c in out:
        c.text = c.text.replace(key, REDACTED)
        if c.error:
            c.error = c.error.replace(key, REDACTED)
        if c.reasoning:
            c.reasoning = c.reasoning.replace(key, REDACTED)
    return out


async def complete(endpoint: Endpoint, prompt: str | list[dict], *, n: int = 1, temperature: float = 0.0,
                   max_tokens: int | None = None) -> list[Completion]:
    """Request `n` samples of `prompt` (a string, or chat messages) from `endpoint`; always returns `n` Completions,
    each with `error` set when the request failed after the client's retries. The key never appears in them."""
    key = NO_KEY
    if endpoint.api_key_env:
        key = os.environ.get(endpoint.api_key_env, "")
    return _redact(await _complete(endpoint, key, prompt, n, temperature, max_tokens), key)


async def _complete(endpoint: Endpoint, key: str, prompt: str | list[dict], n: int, temperature: float,
                    max_tokens: int | None) -> list[Completion]:
    import openai

    if endpoint.api_key_env and not key:
        return [Completion("", None, _empty_usage(n), 0.0, 0,
                           error=f"config: environment variable {endpoint.api_key_env} is not set")
                for _ in range(n)]
    counter = [0]
    token = _attempts.set(counter)
    start = time.perf_counter()
    try:
        http_client = openai.DefaultAsyncHttpxClient(event_hooks={"request": [_count_attempt]})
        async with openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=key, timeout=endpoint.timeout,
                                      max_retries=endpoint.max_retries, http_client=http_client) as client:
            kwargs: dict[str, Any] = {"model": endpoint.model, "n": n, "temperature": temperature}
            if max_tokens is not None:
                kwargs["max_tokens"] = max_tokens
            create: Any  # the API's raw-response create
            if endpoint.api == "completions":
                create, kwargs["prompt"] = client.completions.with_raw_response.create, _plain(prompt)
            else:
                create, kwargs["messages"] = client.chat.completions.with_raw_response.create, _messages(prompt)
            earlier = 0  # requests sent before a resend under max_completion_tokens
            try:
                raw = await create(**kwargs)
            except openai.BadRequestError as exc:
                if not _wants_max_completion_tokens(exc, endpoint.api, kwargs):
                    raise
                earlier = counter[0]
                kwargs[MAX_COMPLETION_TOKENS] = kwargs.pop("max_tokens")
                raw = await create(**kwargs)
            retries = earlier + int(raw.retries_taken)
            out = _parse(raw.parse(), endpoint.api, time.perf_counter() - start, retries)
    except Exception as exc:  # noqa: BLE001 - every failure (HTTP, timeout, a malformed answer) is recorded
        latency = time.perf_counter() - start
        return [Completion("", None, _empty_usage(n), latency, max(counter[0] - 1, 0), error=_describe_error(exc))
                for _ in range(n)]
    finally:
        _attempts.reset(token)
    if len(out) < n:  # a server that ignores `n` returns fewer choices: the rest are recorded as missing
        out += [Completion("", None, _empty_usage(n), out[0].latency_s if out else 0.0, retries,
                           error=f"missing: the server returned {len(out)} of {n} samples")
                for _ in range(n - len(out))]
    return out[:n]


def _parse(resp: Any, api: str, latency: float, retries: int) -> list[Completion]:
    choices = sorted(resp.choices or [], key=lambda c: getattr(c, "index", 0) or 0)
    usage = _usage(getattr(resp, "usage", None), max(len(choices), 1))
    out: list[Completion] = []
    for ch in choices:
        reasoning = None
        if api == "completions":
            text = ch.text
        else:
            msg = ch.message
            text = msg.content if msg is not None else None
            extra = (getattr(msg, "model_extra", None) or {}) if msg is not None else {}
            reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        out.append(Completion(text if isinstance(text, str) else "", ch.finish_reason, dict(usage), latency,
                              retries, reasoning=reasoning if isinstance(reasoning, str) else None))
    return out


def complete_sync(endpoint: Endpoint, prompt: str | list[dict], **kw: Any) -> list[Completion]:
    """`complete` for callers without an event loop."""
    return asyncio.run(complete(endpoint, prompt, **kw))
