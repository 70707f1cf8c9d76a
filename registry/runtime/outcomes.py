"""The outcome grader: asks the model whether the transcript satisfies a defined outcome's rubric.

The grader answers a JSON verdict, `satisfied` or `needs_revision`; an unreadable answer counts as
`needs_revision`. Once the evaluation count reaches `max_iterations`, `needs_revision` is labelled
`max_iterations_reached` (evaluation still runs after every turn).
"""

from __future__ import annotations

import json
import re
from typing import Any

from registry.runtime.transcript import rubric_text

VERDICTS = ("satisfied", "needs_revision")
GRADER_SYSTEM = (
    "You grade an AI agent's work. Read the outcome, its rubric and the conversation transcript, then "
    'answer with only a JSON object: {"verdict": "satisfied" | "needs_revision", "explanation": "<why; '
    'for needs_revision, which criteria are unmet and what to change>"}.'
)
JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def grading_request(*, model: str, outcome: dict[str, Any], messages: list[dict[str, Any]], max_tokens: int) -> dict:
    transcript = json.dumps(messages, ensure_ascii=False, indent=1)
    prompt = (
        f"Outcome: {outcome['description']}\n\nRubric:\n{rubric_text(outcome['rubric'])}\n\n"
        f"Transcript (messages, oldest first):\n{transcript}"
    )
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": GRADER_SYSTEM,
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
    }


def parse_verdict(text: str) -> tuple[str, str]:
    """(verdict, explanation) from the grader's answer, tolerating prose or fences around the JSON."""
    found = JSON_OBJECT.search(text)
    try:
        answer = json.loads(found.group(0)) if found else None
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict) or str(answer.get("verdict", "")).strip().lower() not in VERDICTS:
        return "needs_revision", f"The grader's answer could not be read as a verdict: {text[:500]}"
    return str(answer["verdict"]).strip().lower(), str(answer.get("explanation") or "")


def label(verdict: str, *, iteration: int, max_iterations: int) -> str:
    """The verdict as reported: `needs_revision` at or past the last iteration is `max_iterations_reached`."""
    if verdict == "needs_revision" and iteration >= max_iterations:
        return "max_iterations_reached"
    return verdict
