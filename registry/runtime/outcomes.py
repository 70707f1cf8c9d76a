"""The outcome grader: asks the model whether the transcript satisfies a defined outcome's rubric.

The grader answers a JSON verdict, `satisfied` or `needs_revision`; an unreadable answer counts as
`needs_revision`. Once the evaluation count reaches `max_iterations`, `needs_revision` is labelled
`max_iterations_reached` (evaluation still runs after every turn).
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.utils import timezone

from registry.core.serialization import timestamp
from registry.runtime.transcript import rubric_text
from registry.sessions.models import SessionEvent

VERDICTS = ("satisfied", "needs_revision")
# `result` values of an evaluation still under way; the others are terminal and set `completed_at`.
IN_PROGRESS = ("pending", "running", "evaluating")
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


def iterations_done(events: list[SessionEvent], outcome_id: str) -> int:
    """How many evaluations of the outcome have finished: the 0-indexed iteration of the next one."""
    return sum(1 for e in events if e.type == "span.outcome_evaluation_end" and e.body.get("outcome_id") == outcome_id)


def evaluation_resource(
    definition: dict[str, Any], *, iteration: int, result: str, explanation: str | None
) -> dict[str, Any]:
    """`BetaManagedAgentsOutcomeEvaluationResource`: one per outcome, its latest state."""
    return {
        "type": "outcome_evaluation",
        "outcome_id": definition["outcome_id"],
        "description": definition["description"],
        "result": result,
        "explanation": explanation,
        "iteration": iteration,
        "max_iterations": definition["max_iterations"],
        "completed_at": None if result in IN_PROGRESS else timestamp(timezone.now()),
    }
