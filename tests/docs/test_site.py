"""The documentation site as a reader gets it: built with ``mkdocs build --strict``, no
Sphinx role left as literal text (``:class:`` ...; the hook docs/hooks/roles.py links them),
and nothing loaded from another site (no web fonts: the site works offline and leaks no
visit)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the site needs the 'docs' extra (make test installs it)")
pytest.importorskip("mkdocstrings", reason="the site needs the 'docs' extra")

ROOT = Path(__file__).resolve().parents[2]
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj):")
#: a resource the browser fetches (not a link the reader may follow) from another site
OUTSIDE = re.compile(r"<(?:link|script|img|iframe|source)\b[^>]*\b(?:src|href)="
                     r"""["'](?:https?:)?//[^"']+""")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d",
                          str(out)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def test_no_sphinx_role_is_left_as_text(site):
    left = {str(page.relative_to(site)): ROLE.findall(page.read_text())
            for page in site.rglob("*.html")}
    assert {page: found for page, found in left.items() if found} == {}


def test_roles_become_links_to_the_documented_objects(site):
    page = (site / "api" / "dp" / "index.html").read_text()
    assert re.search(r'<a class="autorefs[^"]*"[^>]*href="[^"]*#veil\.dp\.[^"]+"><code>', page)


def test_nothing_is_loaded_from_another_site(site):
    pages = {str(page.relative_to(site)): OUTSIDE.findall(page.read_text())
             for page in site.rglob("*.html")}
    assert {page: found for page, found in pages.items() if found} == {}
    assert not any("fonts.googleapis" in page.read_text() for page in site.rglob("*.html"))
