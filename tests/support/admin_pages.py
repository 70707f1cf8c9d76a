"""Reading the admin console through Django's test client: an object's URL, a page's HTML, the sessions a
list page shows."""

from __future__ import annotations

import re

from django.contrib.admin.utils import quote
from django.test import Client

SESSIONS = "/admin/agent_sessions/session/"


def on(listing: str, pk: object, view: str = "change") -> str:
    """An object's admin URL, its key quoted as the admin quotes it (`_` is `_5F`)."""
    return f"{listing}{quote(str(pk))}/{view}/"


def page(console: Client, path: str) -> str:
    response = console.get(path)
    assert response.status_code == 200, path
    return response.content.decode()


def listed_in_order(console: Client, query: str) -> list[str]:
    """The session ids on the list page for this query string, as the page orders them."""
    return re.findall(r">(sesn_[A-Za-z0-9]+)</a>", page(console, f"{SESSIONS}?{query}"))


def listed(console: Client, query: str) -> set[str]:
    """The session ids on the list page for this query string."""
    return set(listed_in_order(console, query))
