"""One narration: the prompt, one request, the narration verified against the answer."""


from __future__ import annotations

from typing import TYPE_CHECKING

from trainaudit.llm.bundle import build_prompt
from trainaudit.llm.providers import LlmError, LlmSpec, complete
from trainaudit.llm.verify import NarrationError, apply_narration, finish, parse_narration
from trainaudit.answer.schema import Answer

if TYPE_CHECKING:
    import httpx


def narrate(answer: Answer, spec: LlmSpec, client: httpx.Client | None = None) -> Answer:
    system, user = build_prompt(answer)
    try:
        text = complete(spec, system, user, client)
        narration, raw = parse_narration(text)
    except (LlmError, NarrationError) as exc:
        return finish(answer, None, spec.label, str(exc))
    return finish(answer, apply_narration(answer, narration, raw), spec.label, None)

