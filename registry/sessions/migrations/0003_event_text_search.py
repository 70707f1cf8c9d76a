"""A full text index of the events' content on PostgreSQL, for the admin's session search
(`registry.sessions.selectors.EVENT_TEXT_MATCH` queries the same expression). Other databases search without it."""

from collections.abc import Callable
from typing import Any

from django.db import migrations

INDEX = "session_event_text_idx"
CREATE = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON agent_sessions_sessionevent "
    "USING gin ((jsonb_to_tsvector('english', body -> 'content', '[\"string\"]')))"
)
DROP = f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}"


def run_on_postgresql(statement: str) -> Callable[[Any, Any], None]:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    atomic = False  # CONCURRENTLY: appends go on while a large log is indexed

    dependencies = [("agent_sessions", "0002_fencing_budget")]

    operations = [migrations.RunPython(run_on_postgresql(CREATE), run_on_postgresql(DROP))]
