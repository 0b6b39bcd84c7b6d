"""Optional LLM narrator: rewrites the wording of a report, never its decisions.

    spec = parse_spec("openai:gpt-4o-mini")            # keys from the environment
    answer = narrate(answer, spec)                      # one HTTP request; verified; llm_* checks added

Nothing here runs unless ``--llm`` is given: without it no request is made.
"""

from trainaudit.llm.narrate import narrate
from trainaudit.llm.providers import LlmSpec, parse_spec

__all__ = ["LlmSpec", "narrate", "parse_spec"]
