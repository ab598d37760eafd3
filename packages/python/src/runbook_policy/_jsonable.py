"""What the framework adapters feed as a tool's arguments or result: the value as JSON data."""

from __future__ import annotations

from typing import Any


def jsonable(value: Any) -> Any:
    """``value`` as JSON data, converted as pydantic serializes it (models, dataclasses, dates); the frameworks
    of the Pydantic AI, OpenAI Agents and Google ADK adapters all bring pydantic. What cannot be converted is
    passed on as it is: the run's own check records it as malformed and halts."""
    from pydantic_core import to_jsonable_python  # imported here: the core package does not need pydantic

    try:
        return to_jsonable_python(value)
    except Exception:  # noqa: BLE001 - the run's own check names the problem and halts
        return value
