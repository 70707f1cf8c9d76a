"""Title templates of started sessions: `{trigger_name}` and `{fired_at}` (the fire's tick, or the moment
of `start`, as an API timestamp), rendered by `str.format_map`; any other `{name}` stays as written.
Format specs, conversions, positional fields and attribute or index access are refused on save."""

from __future__ import annotations

import string
from datetime import datetime

from registry.core.serialization import timestamp

PLACEHOLDERS = ("trigger_name", "fired_at")
TITLE_MAX = 512  # the longest session title; a longer rendering is cut


class KeepUnknown(dict[str, str]):
    """A mapping for `format_map` under which an unknown placeholder renders as itself."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def check_title_template(template: str) -> None:
    """Raise ValueError naming what is wrong with `template`."""
    for _, field, spec, conversion in string.Formatter().parse(template):
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            written = field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            examples = " or ".join(f"{{{name}}}" for name in PLACEHOLDERS)
            raise ValueError(f"placeholders are plain names such as {examples}, not {{{written}}}.")


def render_title(template: str | None, *, trigger_name: str, fired_at: datetime) -> str | None:
    """The title of a session started for the fire at `fired_at`, or None without a template."""
    if template is None:
        return None
    rendered = template.format_map(KeepUnknown(trigger_name=trigger_name, fired_at=str(timestamp(fired_at))))
    return rendered[:TITLE_MAX]
