"""A local page's title is read from its head alone, and is the title of the whole page."""

from __future__ import annotations

from pathlib import Path

import pytest

from window_retriever.ingestion._web import _head_title, _page_title, _soup

PAGES = sorted((Path(__file__).parents[2] / "window_retriever" / "_data" / "pages").glob("*.html"))
TRICKY = [
    "<html><head><title>Errors</title></head><body><svg><title>icon</title></svg></body></html>",
    "<html><head><!-- </head> --><title>T</title></head><body>x</body></html>",
    "<html><head><!-- </title> </head> --><title>Late</title></head><body>x</body></html>",
    "<html><head><title>a </head> b</title></head><body>x</body></html>",
    "<HTML><HEAD><TITLE>Up &amp; Down</TITLE></HEAD><BODY>text</BODY></HTML>",
    "<html><head><meta charset=utf-8><title>\n  Spread\n over  lines </title></head>",
    "<html><body><title>in the body</title></body></html>",
    "<title>no head</title>",
    "<head><title>never closed",
    "",
]


@pytest.mark.parametrize("html", [p.read_text(encoding="utf-8") for p in PAGES] + TRICKY)
def test_the_heads_title_is_the_whole_pages_title(html: str) -> None:
    assert _page_title(html) == _head_title(_soup(html, ()))
