"""HTML pages turned into what the agents see: :func:`parse_page` (the stdlib :class:`html.parser.HTMLParser`).

A :class:`Page` keeps

- ``lines``: the page's visible text, one line per block element (``p``, ``div``, ``h1``, ``li``, ...),
  whitespace collapsed; every link shows as ``[label]`` (its text, lower-cased) and the search box as
  ``[search box]``; ``head``, ``script`` and ``style`` and button captions are left out;
- ``links``: every ``<a href>`` as a :class:`Link` (label, target, whether it is a result's item link), in
  page order: what ``click[label]`` follows;
- ``form``: the search form (its action, hidden fields and text field), which ``search[...]`` submits;
- ``meta``: the ``<meta name content>`` pairs (the page kind, the purchase).

:meth:`Page.observation` is the text observation: the lines, then ``Clickable:`` and the labels.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urlencode

__all__ = ["Link", "Page", "SearchForm", "normalise_label", "parse_page"]

_BLOCKS = frozenset("p div h1 h2 h3 h4 li ul ol form tr table section header footer nav body br hr".split())
_HIDDEN = frozenset(("head", "title", "script", "style", "button", "template"))


def normalise_label(text: str) -> str:
    """A link label or a click target as they are compared: lower-cased, whitespace collapsed."""
    return " ".join(text.lower().split())


@dataclass(frozen=True)
class Link:
    label: str
    href: str
    item: bool = False


@dataclass(frozen=True)
class SearchForm:
    action: str
    hidden: tuple[tuple[str, str], ...]
    field: str

    def submit_url(self, query: str) -> str:
        """The URL a GET submission of ``query`` requests (hidden fields first, as a browser sends them)."""
        return f"{self.action}?{urlencode([*self.hidden, (self.field, query)])}"


@dataclass(frozen=True)
class Page:
    """One fetched page (see the module docstring); ``url`` is the path and query it was fetched from."""

    url: str
    lines: tuple[str, ...]
    links: tuple[Link, ...]
    form: SearchForm | None
    meta: tuple[tuple[str, str], ...]

    @property
    def kind(self) -> str:
        """``search``, ``results``, ``item``, ``done`` or ``error`` (``unknown`` without the meta tag)."""
        return self.meta_value("webshop-page") or "unknown"

    def meta_value(self, name: str) -> str | None:
        for key, value in self.meta:
            if key == name:
                return value
        return None

    def link(self, label: str) -> Link | None:
        """The first link whose label is ``label`` (compared by :func:`normalise_label`), else None."""
        wanted = normalise_label(label)
        for link in self.links:
            if link.label == wanted:
                return link
        return None

    @property
    def clickables(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(link.label for link in self.links))

    @property
    def items(self) -> tuple[str, ...]:
        """The labels of the result links (product ids, lower-cased) on a results page."""
        return tuple(link.label for link in self.links if link.item)

    def observation(self) -> str:
        lines = list(self.lines)
        clickables = self.clickables
        lines.append("Clickable: " + (", ".join(f"[{c}]" for c in clickables) if clickables else "nothing"))
        return "\n".join(lines)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.links: list[Link] = []
        self.meta: list[tuple[str, str]] = []
        self.form: SearchForm | None = None
        self._line: list[str] = []
        self._hidden = 0
        self._link: tuple[str | None, bool, list[str]] | None = None
        self._form: dict | None = None

    def _flush(self) -> None:
        text = " ".join("".join(self._line).split())
        if text:
            self.lines.append(text)
        self._line = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: (v or "") for k, v in attrs}
        if tag == "meta":
            if "name" in values and "content" in values:
                self.meta.append((values["name"], values["content"]))
            return
        if tag in _HIDDEN:
            self._hidden += 1
            return
        if tag in _BLOCKS:
            self._flush()
        if tag == "form" and self.form is None:
            self._form = {"action": values.get("action") or "/", "hidden": [], "field": None}
        elif tag == "input" and self._form is not None:
            kind = values.get("type", "text").lower()
            if kind == "hidden" and values.get("name"):
                self._form["hidden"].append((values["name"], values.get("value", "")))
            elif kind in ("text", "search") and values.get("name") and self._form["field"] is None:
                self._form["field"] = values["name"]
                self._line.append(" [search box] ")
        elif tag == "a" and self._link is None:
            self._link = (values.get("href") or None, "item" in values.get("class", "").split(), [])

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag in _HIDDEN:
            self._hidden -= 1

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self._hidden = max(0, self._hidden - 1)
            return
        if tag == "a" and self._link is not None:
            href, item, parts = self._link
            self._link = None
            label = normalise_label("".join(parts))
            if label:
                self._line.append(f" [{label}] ")
                if href:
                    self.links.append(Link(label, href, item))
            return
        if tag == "form" and self._form is not None:
            if self._form["field"] is not None:
                self.form = SearchForm(self._form["action"], tuple(self._form["hidden"]), self._form["field"])
            self._form = None
        if tag in _BLOCKS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._hidden:
            return
        if self._link is not None:
            self._link[2].append(data)
        else:
            self._line.append(data)

    def close(self) -> None:
        super().close()
        if self._link is not None:  # an unclosed link ends with the document
            self.handle_endtag("a")
        self._flush()


@functools.lru_cache(maxsize=1024)
def parse_page(html: str, url: str) -> Page:
    """The :class:`Page` of ``html`` fetched from ``url`` (any text parses; a page that is not the shop's
    has kind ``unknown``). Pages are immutable, so the same HTML from the same URL parses once (tree
    sampling's copies fetch the same pages)."""
    parser = _Parser()
    parser.feed(html)
    parser.close()
    return Page(url=url, lines=tuple(parser.lines), links=tuple(parser.links), form=parser.form,
                meta=tuple(parser.meta))
