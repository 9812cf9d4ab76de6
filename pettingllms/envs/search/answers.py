"""Parsers of the search workflow's responses, and the answer metrics (SQuAD normalisation, EM, token F1).

Formats (Search-R1's tags; the prompts document the same):

* **Query** (:func:`parse_query`): the body of the **last** closed ``<search> ... </search>`` of the response.
* **Answer** (:func:`parse_answer`): the body of the last closed ``<answer> ... </answer>``.
* **Reasoner** (:func:`parse_reasoner`): an answer or a request for another search (a ``<search>`` block);
  when the response holds both, the one that closes last is what the model decided.
* **Single agent** (:func:`parse_single`): a query and/or an answer, each as above.

Tags are matched in any case, with blanks allowed before the ``>`` (``<Answer >``). A block is the text between
the last closing tag and the last opening tag before it; a block still open at the end of the response was cut
off and does not count. Bodies are stripped, their runs of blanks (newlines included) made one space, and cut to
:data:`MAX_QUERY_CHARS` / :data:`MAX_ANSWER_CHARS`; an empty body does not parse. Parsers raise nothing but
:class:`~pettingllms.agents.failures.ParseError`, never evaluate model text, and run in time linear in the text.

Metrics (:func:`normalize_answer`, :func:`exact_match`, :func:`f1_score`): SQuAD's normalisation (lower case,
punctuation removed, the articles *a*, *an*, *the* removed, blanks collapsed), exact match against any of the
golden answers, and the best token F1 over them. As in FlashRAG's F1, a *yes* / *no* / *noanswer* on either
side scores 0 unless both sides are equal. :func:`answer_in_text` says whether a golden answer occurs, as whole
normalised tokens, in a text (a retrieved passage).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

from pettingllms.agents.failures import ParseError

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_QUERY_CHARS",
    "answer_in_text",
    "exact_match",
    "f1_score",
    "format_answer",
    "format_query",
    "last_block",
    "normalize_answer",
    "parse_answer",
    "parse_query",
    "parse_reasoner",
    "parse_single",
]

MAX_QUERY_CHARS = 300
MAX_ANSWER_CHARS = 200

_TAGS = {name: (re.compile(rf"<{name}\s*>", re.IGNORECASE), re.compile(rf"</{name}\s*>", re.IGNORECASE))
         for name in ("search", "answer")}
_BLANKS = re.compile(r"\s+")


def _last_match(pattern: re.Pattern, text: str, end: int) -> re.Match | None:
    """The last match of ``pattern`` in ``text[:end]`` (one linear scan)."""
    found = None
    for found in pattern.finditer(text, 0, end):  # noqa: B007 - the loop keeps the last one
        pass
    return found


def _last_block(text: str, name: str) -> tuple[int, str] | None:
    """``(end of its closing tag, body)`` of the last closed ``name`` block of ``text``, else None."""
    opening, closing = _TAGS[name]
    close = _last_match(closing, text, len(text))
    if close is None:
        return None
    start = _last_match(opening, text, close.start())
    if start is None:
        return None
    return close.end(), text[start.end():close.start()]


def _clean(body: str, limit: int) -> str:
    return _BLANKS.sub(" ", body).strip()[:limit].strip()


def last_block(text: str, name: str) -> str | None:
    """The cleaned body of the last closed ``<name>`` block (``search`` or ``answer``), None when there is
    none or it is empty."""
    if not isinstance(text, str):
        return None
    found = _last_block(text, name)
    if found is None:
        return None
    return _clean(found[1], MAX_QUERY_CHARS if name == "search" else MAX_ANSWER_CHARS) or None


def parse_query(text: str) -> str:
    """The search query of a response; ParseError when it has no non-empty ``<search>`` block."""
    query = last_block(text, "search")
    if query is None:
        raise ParseError("no <search>query</search> in the response")
    return query


def parse_answer(text: str) -> str:
    """The answer of a response; ParseError when it has no non-empty ``<answer>`` block."""
    answer = last_block(text, "answer")
    if answer is None:
        raise ParseError("no <answer>...</answer> in the response")
    return answer


def parse_reasoner(text: str) -> tuple[str, str]:
    """``("answer", answer)`` or ``("search", request)``: whichever block closes last; ParseError for neither."""
    best: tuple[int, str, str] | None = None
    for name, limit in (("search", MAX_QUERY_CHARS), ("answer", MAX_ANSWER_CHARS)):
        hit = _last_block(text, name) if isinstance(text, str) else None
        body = _clean(hit[1], limit) if hit is not None else ""
        if body and (best is None or hit[0] > best[0]):
            best = (hit[0], name, body)
    if best is None:
        raise ParseError("no <answer>...</answer> (or <search>request</search>) in the response")
    return best[1], best[2]


def parse_single(text: str) -> tuple[str | None, str | None]:
    """``(query, answer)`` of a single agent's response (either may be None); ParseError for neither."""
    query, answer = last_block(text, "search"), last_block(text, "answer")
    if query is None and answer is None:
        raise ParseError("no <search>query</search> or <answer>...</answer> in the response")
    return query, answer


def format_query(query: str) -> str:
    """A response :func:`parse_query` reads back as ``query`` (for scripted policies)."""
    return f"<search>{query}</search>"


def format_answer(answer: str) -> str:
    """A response :func:`parse_answer` reads back as ``answer``."""
    return f"<answer>{answer}</answer>"


# ---- metrics -------------------------------------------------------------------------------------------

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, punctuation removed, articles removed, blanks collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _golds(golden: str | Sequence[str]) -> list[str]:
    return [golden] if isinstance(golden, str) else list(golden)


def exact_match(prediction: str | None, golden: str | Sequence[str]) -> bool:
    """Whether the normalised prediction equals a normalised golden answer (None: no answer, False)."""
    if prediction is None:
        return False
    mine = normalize_answer(prediction)
    return bool(mine) and any(mine == normalize_answer(g) for g in _golds(golden))


def _f1(prediction: str, gold: str) -> float:
    mine, theirs = normalize_answer(prediction), normalize_answer(gold)
    if (mine in _SPECIAL or theirs in _SPECIAL) and mine != theirs:
        return 0.0
    common = Counter(mine.split()) & Counter(theirs.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(mine.split()), same / len(theirs.split())
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str | None, golden: str | Sequence[str]) -> float:
    """The best token F1 of the prediction against the golden answers, in [0, 1] (None: 0)."""
    if prediction is None:
        return 0.0
    return max((_f1(prediction, g) for g in _golds(golden)), default=0.0)


def answer_in_text(golden: str | Sequence[str], text: str) -> bool:
    """Whether a normalised golden answer occurs in the normalised ``text`` as whole tokens."""
    haystack = f" {normalize_answer(text)} "
    return any(needle and f" {needle} " in haystack for needle in map(normalize_answer, _golds(golden)))
