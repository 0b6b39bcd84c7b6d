"""``--llm`` / ``--llm-base-url`` / ``--llm-timeout`` for diagnose, compare and audit.

    @click.command()
    ...
    @llm_options                       # adds the options; parses and checks them before the command runs
    def diagnose(...):
        answer = narrate_if_requested(answer)   # no-op (and no network) without --llm
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from trainaudit.errors import UsageError
from trainaudit.llm.narrate import narrate
from trainaudit.llm.providers import PROVIDERS, LlmSpec, parse_spec
from trainaudit.answer.schema import Answer

F = TypeVar("F", bound=Callable[..., Any])
_KEY = "trainaudit.llm"


def llm_options(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, llm: str | None, llm_base_url: str | None, llm_timeout: float, **kw: Any) -> Any:
        ctx = click.get_current_context()
        if llm:
            ctx.meta[_KEY] = parse_spec(llm, llm_base_url, llm_timeout)
        elif llm_base_url:
            raise UsageError("--llm-base-url needs --llm PROVIDER:MODEL")
        return fn(*args, **kw)

    opts = [
        click.option("--llm", "llm", metavar="PROVIDER:MODEL",
                     help="Let an LLM reword the summary and root causes (verified; never changes the verdict). "
                          f"PROVIDER: {', '.join(PROVIDERS)}. Keys from OPENAI_API_KEY, ANTHROPIC_API_KEY, "
                          "GEMINI_API_KEY."),
        click.option("--llm-base-url", "llm_base_url", metavar="URL",
                     help="OpenAI-compatible (or other provider) endpoint, e.g. http://127.0.0.1:11434/v1 for Ollama."),
        click.option("--llm-timeout", "llm_timeout", type=float, default=60.0, show_default=True,
                     help="Seconds to wait for the LLM; on timeout the engine's wording is kept."),
    ]
    for opt in reversed(opts):
        wrapper = opt(wrapper)
    return wrapper  # type: ignore[return-value]


def requested_spec() -> LlmSpec | None:
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.find_root().meta.get(_KEY) or ctx.meta.get(_KEY)


def narrate_if_requested(answer: Answer) -> Answer:
    """The answer narrated by the LLM named with ``--llm``; the same answer object without it."""
    spec = requested_spec()
    if spec is None:
        return answer
    out = narrate(answer, spec)
    for c in out.validation.checks:
        if c.name.startswith("llm_") and (c.detail.startswith("dropped") or "not applied" in c.detail
                                          or "reverted" in c.detail or "ignored" in c.detail):
            click.echo(f"trainaudit: note: {c.name}: {c.detail[:400]}", err=True)
    return out
