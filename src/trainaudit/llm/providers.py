"""LLM providers: request shape and answer text for OpenAI-compatible chat completions, Anthropic
messages and Gemini generateContent. Plain httpx, one POST per narration, keys from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainaudit.errors import UsageError
from trainaudit.redact import json_body

if TYPE_CHECKING:  # httpx is imported when a request is sent: a run without --llm never needs it
    import httpx


@dataclass(frozen=True)
class ProviderInfo:
    name: str
    default_base_url: str
    key_env: tuple[str, ...]
    key_required: bool  # False for local OpenAI-compatible servers (Ollama, vLLM) that take no key


PROVIDERS: dict[str, ProviderInfo] = {
    "openai": ProviderInfo("openai", "https://api.openai.com/v1", ("OPENAI_API_KEY",), True),
    "ollama": ProviderInfo("openai", "http://127.0.0.1:11434/v1", ("OLLAMA_API_KEY",), False),
    "vllm": ProviderInfo("openai", "http://127.0.0.1:8000/v1", ("VLLM_API_KEY",), False),
    "anthropic": ProviderInfo("anthropic", "https://api.anthropic.com", ("ANTHROPIC_API_KEY",), True),
    "gemini": ProviderInfo("gemini", "https://generativelanguage.googleapis.com", ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
                           True),
}


@dataclass(frozen=True)
class LlmSpec:
    """``--llm PROVIDER:MODEL`` resolved: which wire protocol, where, with which key."""

    provider: str  # wire protocol: openai | anthropic | gemini
    model: str
    base_url: str
    api_key: str | None
    timeout: float = 60.0

    @property
    def label(self) -> str:
        return f"{self.provider}:{self.model}"


def parse_spec(value: str, base_url: str | None = None, timeout: float = 60.0,
               environ: dict[str, str] | None = None) -> LlmSpec:
    """Parse ``PROVIDER:MODEL``; a missing key is a usage error (exit 2) before any work is done."""
    env = os.environ if environ is None else environ
    name, sep, model = value.partition(":")
    info = PROVIDERS.get(name.strip().lower())
    if not sep or not model.strip() or info is None:
        raise UsageError(f"--llm {value}: expected PROVIDER:MODEL with PROVIDER one of {', '.join(PROVIDERS)}")
    key = next((env[k] for k in info.key_env if env.get(k)), None)
    if key is None and info.name == "openai" and base_url is None and info.key_required:
        raise UsageError(f"--llm {value}: set {info.key_env[0]} (or give --llm-base-url for a local server)")
    if key is None and info.name != "openai":
        raise UsageError(f"--llm {value}: set {' or '.join(info.key_env)}")
    return LlmSpec(info.name, model.strip(), (base_url or info.default_base_url).rstrip("/"), key, timeout)


def build_request(spec: LlmSpec, system: str, user: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """URL, headers and JSON body of one request (the key only ever goes into a header)."""
    headers = {"content-type": "application/json"}
    if spec.provider == "anthropic":
        headers |= {"x-api-key": spec.api_key or "", "anthropic-version": "2023-06-01"}
        body: dict[str, Any] = {"model": spec.model, "max_tokens": 2048, "temperature": 0, "system": system,
                                "messages": [{"role": "user", "content": user}]}
        return f"{spec.base_url}/v1/messages", headers, body
    if spec.provider == "gemini":
        if spec.api_key:
            headers["x-goog-api-key"] = spec.api_key
        body = {"systemInstruction": {"parts": [{"text": system}]},
                "contents": [{"role": "user", "parts": [{"text": user}]}],
                "generationConfig": {"temperature": 0, "responseMimeType": "application/json"}}
        return f"{spec.base_url}/v1beta/models/{spec.model}:generateContent", headers, body
    if spec.api_key:
        headers["authorization"] = f"Bearer {spec.api_key}"
    body = {"model": spec.model, "temperature": 0, "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    return f"{spec.base_url}/chat/completions", headers, body


class LlmError(Exception):
    """The provider could not be reached or answered with something that is not a completion."""


def answer_text(spec: LlmSpec, data: Any) -> str:
    """The completion text out of each provider's response envelope."""
    try:
        if spec.provider == "anthropic":
            parts = [c.get("text", "") for c in data["content"] if c.get("type") == "text"]
            return "".join(parts)
        if spec.provider == "gemini":
            return "".join(p.get("text", "") for p in data["candidates"][0]["content"]["parts"])
        return str(data["choices"][0]["message"]["content"])
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise LlmError(f"unexpected {spec.provider} response shape ({type(exc).__name__}: {exc})") from None


def complete(spec: LlmSpec, system: str, user: str, client: httpx.Client | None = None) -> str:
    import httpx

    url, headers, body = build_request(spec, system, user)
    own = client is None
    http = client or httpx.Client(timeout=spec.timeout, follow_redirects=False)
    try:
        resp = http.post(url, headers=headers, content=json_body(body))
    except httpx.TimeoutException:
        raise LlmError(f"no answer from {spec.label} within {spec.timeout:g}s") from None
    except httpx.HTTPError as exc:
        raise LlmError(f"{spec.label} unreachable ({type(exc).__name__})") from None
    finally:
        if own:
            http.close()
    if resp.status_code >= 400:
        raise LlmError(f"{spec.label} answered HTTP {resp.status_code}")
    try:
        data = resp.json()
    except ValueError:
        raise LlmError(f"{spec.label} answered with a body that is not JSON") from None
    return answer_text(spec, data)
