"""Preview frames for streams that asked with `event_deltas`: `event_start` and `event_delta`.

Each previewed block gets its final event's id up front, so the preview and the complete event that
concludes it carry the same id. Previews go over the channel layer only and are never stored.
"""

from __future__ import annotations

from collections.abc import Callable

from registry.core.ids import new_id
from registry.sessions import notify

PREVIEWED_BLOCKS = {"text": "agent.message", "thinking": "agent.thinking", "redacted_thinking": "agent.thinking"}


class PreviewPublisher:
    """A `StreamObserver` that publishes previews and remembers the event id reserved per block."""

    def __init__(self, session_id: str, checkpoint: Callable[[], None], thread_id: str | None = None) -> None:
        self.session_id = session_id
        self.thread_id = thread_id  # a child thread's previews go to its own streams
        self.event_ids: dict[int, str] = {}
        self._checkpoint = checkpoint

    def block_started(self, index: int, block_type: str) -> None:
        event_type = PREVIEWED_BLOCKS.get(block_type)
        if event_type is None:
            return
        self.event_ids[index] = new_id("sevt")
        frame = {"type": "event_start", "event": {"type": event_type, "id": self.event_ids[index]}}
        notify.publish_delta(self.session_id, event_type, frame, self.thread_id)

    def text_arrived(self, index: int, text: str) -> None:
        """agent.message previews stream text as `content_delta` fragments of its one content entry."""
        delta = {"type": "content_delta", "index": 0, "content": {"type": "text", "text": text}}
        frame = {"type": "event_delta", "event_id": self.event_ids[index], "delta": delta}
        notify.publish_delta(self.session_id, "agent.message", frame, self.thread_id)

    def checkpoint(self) -> None:
        self._checkpoint()
