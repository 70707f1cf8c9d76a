"""The grader: once a turn with a defined outcome has nothing left to do, a model call judges the
transcript against the outcome's rubric; `needs_revision` sends the agent back to work with the
feedback, until the outcome's iterations run out. The outcome's evaluation resource follows each step; each
evaluation's end writes `session.outcome_evaluation_ended` (a webhook event) with its span."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from registry.core.serialization import timestamp
from registry.runtime import outcomes
from registry.runtime.attachments import rubric_for_grader
from registry.runtime.config import RuntimeSettings
from registry.runtime.model_step import ModelStep
from registry.runtime.running import RunningSession
from registry.runtime.writer import TurnLog, span_usage
from registry.sessions import selectors
from registry.sessions.models import SessionEvent
from registry.webhooks import outbox


@dataclass(kw_only=True)
class Grader:
    """The outcomes of one held session."""

    session: RunningSession
    config: RuntimeSettings
    turn: TurnLog
    model: ModelStep

    def grade(self, outcome: SessionEvent, messages: list[dict[str, Any]], events: list[SessionEvent]) -> str:
        """Grade the transcript against the outcome's rubric; returns the (labelled) verdict."""
        definition = outcome.body
        iteration = outcomes.iterations_done(events, definition["outcome_id"])
        self._record(definition, iteration, "evaluating", None)
        begun = {"outcome_id": definition["outcome_id"], "iteration": iteration}
        start = self.turn.emit("span.outcome_evaluation_start", begun)
        rubric = rubric_for_grader(self.session.workspace_id, definition["rubric"])
        request = outcomes.grading_request(
            model=self.session.model_id,
            outcome={**definition, "rubric": rubric},
            messages=messages,
            max_tokens=self.config.max_tokens,
        )
        response = self.model.create(request)
        verdict, explanation = outcomes.parse_verdict(response.text())
        result = outcomes.label(verdict, iteration=iteration + 1, max_iterations=definition["max_iterations"])
        end = {
            "outcome_evaluation_start_id": start.id,
            **begun,
            "result": result,
            "explanation": explanation,
            "usage": span_usage(response.usage),
        }
        with transaction.atomic():
            if result == "needs_revision":  # not a result: the outcome runs again, with the feedback
                self._record(definition, iteration + 1, "running", explanation)
            else:
                self._record(definition, iteration, result, explanation)
            self.turn.emit("span.outcome_evaluation_end", end)
            outbox.emit(
                "session.outcome_evaluation_ended",
                workspace_id=self.session.workspace_id,
                object_id=self.session.session_id,
            )
        return result

    def _record(self, definition: dict[str, Any], iteration: int, result: str, explanation: str | None) -> None:
        """The outcome's evaluation resource, in the reference client's shape."""
        evaluation = outcomes.evaluation_resource(
            definition, iteration=iteration, result=result, explanation=explanation
        )
        self.turn.record_evaluation(evaluation)

    def interrupted(self) -> None:
        """An interrupted turn ends an outcome still in progress as `interrupted`."""
        for evaluation in selectors.outcome_evaluations(self.session.session_id):
            if evaluation.get("result") in outcomes.IN_PROGRESS:
                finished = {**evaluation, "result": "interrupted", "completed_at": timestamp(timezone.now())}
                self.turn.record_evaluation(finished)
