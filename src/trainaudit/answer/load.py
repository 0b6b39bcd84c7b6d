"""Read an answer.json back: the model, or one clear input error."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from trainaudit.answer.paths import display_path
from trainaudit.answer.schema import Answer
from trainaudit.errors import InputError
from trainaudit.safeio import load_json, read_text


def load_answer(path: Path) -> Answer:
    """answer.json as the model; anything else is one clear input error."""
    where = display_path(path)
    text = read_text(path, where)
    data = load_json(text, where, invalid="not JSON")
    if not isinstance(data, dict) or "final_answer" not in data:
        raise InputError(f"{where}: not a trainaudit answer.json (no final_answer)")
    try:
        return Answer.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise InputError(f"{where}: not a valid answer.json ({loc}: {first['msg']})") from None
