"""MkDocs hook: Sphinx cross-reference roles in docstrings become code links.

veil's docstrings use Sphinx roles (``:class:`~veil.dp.Ledger```); mkdocstrings renders them
as the literal ``:class:<code>~veil.dp.Ledger</code>``. This hook turns each into an
mkdocs-autorefs reference to the documented object (``Ledger``, linked), or plain code when
the target is not on the site (``optional``: no warning under ``--strict``). A leading ``~``
shows the last name only, as in Sphinx.
"""

from __future__ import annotations

import html
import re

ROLES = ("class", "func", "meth", "mod", "attr", "data", "exc", "obj")
_ROLE = re.compile(r":(?:py:)?(?:{}):<code>(~?)([^<]+)</code>".format("|".join(ROLES)))


def render_roles(text: str) -> str:
    """``:role:<code>[~]target</code>`` -> an optional autoref showing ``target`` (or its last
    name after ``~``) as code."""
    def link(match: re.Match) -> str:
        short, target = match.group(1), html.unescape(match.group(2)).strip()
        target = target.rstrip("()")
        shown = target.rpartition(".")[2] if short else target
        return (f'<autoref identifier="{html.escape(target)}" optional>'
                f"<code>{html.escape(shown)}</code></autoref>")
    return _ROLE.sub(link, text)


def on_page_content(html_text: str, **_: object) -> str:
    return render_roles(html_text)
