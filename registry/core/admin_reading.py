"""What the admin's pages show of stored content, read-only and escaped: JSON pretty-printed and diffed, text in
monospace, agent messages as markdown (no raw HTML passes, links only http(s)), the head of stored bytes as text,
and stored bytes served to staff (raster images inline, SVG and everything else as an attachment)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from typing import IO, Any

from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

PREVIEW_BYTES = 64 * 1024
# Raster images a browser shows as pictures, never runs: SVG (which may carry scripts) is not one of them.
INLINE_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp"})
LINK_SCHEMES = ("http://", "https://")
LINK_REL = "noopener nofollow noreferrer"
# Served bytes are data, never a page: no sniffing them into HTML, and a sandbox if a browser renders them anyway.
SERVED_HEADERS = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "default-src 'none'; sandbox"}


class ReadingStyles:
    """Mixed into an admin page that shows what this module renders: its stylesheet."""

    class Media:
        css = {"all": ("registry/admin_reading.css",)}


def pretty(value: Any) -> str:
    """JSON as staff read it: indented, keys sorted, any script as itself."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def monospace(text: str, css_class: str = "reading-text") -> SafeString:
    """`text` escaped, in a monospace block that keeps its lines."""
    return format_html('<pre class="{}">{}</pre>', css_class, text)


def pretty_json(value: Any) -> SafeString:
    return monospace(pretty(value), "reading-json")


# -- differences --------------------------------------------------------------------------------------------
def _diff_line_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "diff-file"
    if line.startswith("@@"):
        return "diff-hunk"
    return {"+": "diff-added", "-": "diff-removed"}.get(line[:1], "diff-context")


def json_diff(before: Any, after: Any, *, before_label: str, after_label: str) -> SafeString:
    """A unified diff of the two values' pretty JSON, escaped, each added or removed line marked by its class."""
    lines = list(
        difflib.unified_diff(
            pretty(before).splitlines(), pretty(after).splitlines(), before_label, after_label, lineterm=""
        )
    )
    if not lines:
        return format_html('<p class="diff-none">No change from {}.</p>', before_label)
    marked = format_html_join("", '<span class="{}">{}</span>', ((_diff_line_class(line), line) for line in lines))
    return format_html('<pre class="reading-diff">{}</pre>', marked)


# -- markdown -------------------------------------------------------------------------------------------------
def _link_allowed(url: str) -> bool:
    return url.strip().lower().startswith(LINK_SCHEMES)


def _link_open(renderer: Any, tokens: Any, index: int, options: Any, env: Any) -> str:
    tokens[index].attrSet("rel", LINK_REL)
    return str(renderer.renderToken(tokens, index, options, env))


def _markdown_renderer() -> MarkdownIt:
    """CommonMark with raw HTML off (it is shown as text), no images (no request leaves the page for them), and
    links only to http(s) addresses, each opened without access to the admin's window."""
    renderer = MarkdownIt("commonmark", {"html": False, "linkify": False}).disable("image")
    renderer.validateLink = _link_allowed  # type: ignore[method-assign]
    renderer.add_render_rule("link_open", _link_open)
    return renderer


MARKDOWN = _markdown_renderer()


def markdown_html(text: str) -> SafeString:
    """`text` rendered as markdown: safe as HTML because the renderer escapes every character of the source it
    does not turn into markup, and makes no markup that runs or loads anything."""
    return mark_safe(MARKDOWN.render(text))  # escaped by the renderer, raw HTML disabled


# -- stored bytes -------------------------------------------------------------------------------------------
def text_of(head: bytes) -> str | None:
    """The bytes as UTF-8 text (a character cut at the end of a preview dropped), or None when they are not text."""
    if b"\x00" in head:
        return None
    for cut in range(4):  # a preview may end inside a character of up to four bytes
        try:
            return head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def read_head(open_stream: Callable[[], IO[bytes]], limit: int = PREVIEW_BYTES) -> bytes:
    with open_stream() as stream:
        return stream.read(limit)


def text_preview(open_stream: Callable[[], IO[bytes]], size: int) -> SafeString | None:
    """The first `PREVIEW_BYTES` of stored bytes as escaped monospace text, or None when they are not text."""
    try:
        text = text_of(read_head(open_stream))
    except OSError:  # bytes gone from the storage: nothing to show
        return None
    if text is None:
        return None
    cut = format_html('<p class="help">The first {} KB of {} bytes.</p>', PREVIEW_BYTES // 1024, size)
    return format_html("{}{}", monospace(text), cut if size > PREVIEW_BYTES else "")


def shown_inline(content_type: str) -> bool:
    """Whether bytes of this type are shown on the page (an <img>) rather than only downloaded."""
    return content_type.split(";")[0].strip().lower() in INLINE_IMAGE_TYPES


def served(stream: IO[bytes], *, filename: str, content_type: str, download: bool = False) -> FileResponse:
    """Stored bytes for staff: an image of `INLINE_IMAGE_TYPES` inline (unless a `download` is asked for),
    anything else (SVG, HTML, …) as an attachment of its type; never sniffed, never run as a page."""
    inline = shown_inline(content_type) and not download
    response = FileResponse(stream, as_attachment=not inline, filename=filename, content_type=content_type)
    for header, value in SERVED_HEADERS.items():
        response[header] = value
    return response


def viewable(model_admin: Any, request: HttpRequest, object_id: str) -> Any:
    """The object of an admin page's own view, found through the page's queryset (so only within the staff
    member's workspaces) and viewable by them; otherwise 404, or 403."""
    found = model_admin.get_object(request, object_id)
    if found is None:
        raise Http404
    if not model_admin.has_view_permission(request, found):
        raise PermissionDenied
    return found
