"""Print the single-page book (``_build/singlehtml``) to ``_build/pdf/solvable-attention.pdf``.

``make pdf`` first builds the single page from the HTML build's environment (no chapter is
executed again), then runs this script: Debian's Chromium, driven by playwright, opens the page
from a local server (nothing leaves 127.0.0.1), waits for MathJax to typeset every formula, and
prints it. ``tests/test_browser.py`` runs the same :func:`print_book` and checks the result.

The PDF is a book: a table of contents with a link to every chapter and section
(:func:`add_contents`), bookmarks (the PDF's outline, from the headings), and the print styles
of ``_ext/static/attnlab.css`` (no code-cell toggles, tables that fit the page). Before printing,
the page is laid out at the printed width (:data:`PRINT_WIDTH_PX`) and every table is measured
(:func:`clipped_tables`); :func:`near_empty_pages` finds pages left almost blank.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
SINGLE = ROOT / "_build" / "singlehtml"
PDF = ROOT / "_build" / "pdf" / "solvable-attention.pdf"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
#: The paper and its margins (A4).
PAPER = {"format": "A4", "margin": {"top": "18mm", "bottom": "18mm", "left": "16mm", "right": "16mm"}}
#: The printed text's width in CSS pixels (96 per inch): A4's 210 mm less both side margins.
PRINT_WIDTH_PX = int((210 - 16 - 16) / 25.4 * 96)
#: A page (not the last) whose printed area is inked over less than this fraction of its height.
NEAR_EMPTY = 0.2
#: Markers of TeX that MathJax did not typeset.
RAW_TEX = ("\\(", "\\[", "\\begin{", "$$", "\\frac", "\\mathbb")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextmanager
def serve(directory: Path):
    """Serve ``directory`` on 127.0.0.1; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def page_count(pdf: Path) -> int:
    """Pages of a PDF written by Chromium (its page objects are not compressed)."""
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf.read_bytes()))


def single_page(single: Path = SINGLE) -> Path:
    """The whole book as one page, ``book.html`` at the root of ``single``.

    Sphinx writes it as ``book/intro.html`` (the root document's name) but with links relative
    to the build's root, so it is copied there.
    """
    source = single / "book" / "intro.html"
    if not source.exists():
        raise FileNotFoundError(f"{source} is missing: build the single page first (make pdf)")
    target = single / "book.html"
    shutil.copyfile(source, target)
    return target


def offline_page(browser, url: str, viewport: dict):
    """A new page that may load only from ``url``'s host (and ``data:``); returns ``(page, foreign)``.

    Every request to another host is aborted and its URL appended to the list ``foreign``.
    """
    page = browser.new_page(viewport=viewport)
    host, foreign = urlparse(url).netloc, []

    def route(r):
        if urlparse(r.request.url).netloc == host or r.request.url.startswith("data:"):
            r.continue_()
        else:
            foreign.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return page, foreign


#: A table of contents, put before the book's first section: a link to every chapter (``h2`` on
#: the single page, whose ``h1`` is the book's title) and to each of its sections (``h3``).
#: Returns the number of entries.
_CONTENTS_JS = """() => {
  const main = document.querySelector('main');
  const heads = Array.from(main.querySelectorAll('section[id] > h2, section[id] > h3'));
  const nav = document.createElement('nav');
  nav.className = 'attnlab-print-contents';
  nav.innerHTML = '<p class="attnlab-print-contents-title">Contents</p>';
  const list = document.createElement('ul');
  let chapter = null;
  for (const h of heads) {
    const a = document.createElement('a');
    a.href = '#' + h.parentElement.id;
    a.textContent = h.textContent.replace(/#$/, '').trim();
    const li = document.createElement('li');
    li.appendChild(a);
    if (h.tagName === 'H2' || chapter === null) {
      chapter = document.createElement('ul');
      li.appendChild(chapter);
      list.appendChild(li);
    } else {
      chapter.appendChild(li);
    }
  }
  nav.appendChild(list);
  const first = main.querySelector('section[id]');
  first.parentElement.insertBefore(nav, first);
  return heads.length;
}"""

#: Every table of the page that is wider than its container or than the printed text, as
#: ``"id or caption: width px in container px"``, measured at :data:`PRINT_WIDTH_PX`.
_CLIPPED_JS = """(limit) => Array.from(document.querySelectorAll('main table')).flatMap(t => {
  const box = t.getBoundingClientRect();
  if (box.width === 0) return [];
  const holder = t.parentElement;
  const room = Math.min(holder.clientWidth, limit);
  const width = Math.max(t.scrollWidth, box.width);
  const section = t.closest('section[id]');
  const name = (t.querySelector('caption') || {}).innerText || (section ? section.id : '?');
  return width > room + 1 || box.right > limit + 1 || holder.scrollWidth > holder.clientWidth + 1
    ? [`${name.trim().slice(0, 60)}: ${Math.round(width)} px in ${Math.round(room)} px`] : [];
})"""


def clipped_tables(page) -> list[str]:
    """The tables of ``page`` (laid out for print at :data:`PRINT_WIDTH_PX`) wider than their room."""
    return page.evaluate(_CLIPPED_JS, PRINT_WIDTH_PX)


#: Marks every table wider than its room (as :data:`_CLIPPED_JS` measures it) ``attnlab-print-narrow``
#: (smaller type, words broken anywhere: ``_ext/static/attnlab.css``); returns how many.
_NARROW_JS = """(limit) => Array.from(document.querySelectorAll('main table')).filter(t => {
  const box = t.getBoundingClientRect(), holder = t.parentElement;
  const room = Math.min(holder.clientWidth, limit);
  return box.width > 0 && (Math.max(t.scrollWidth, box.width) > room + 1 || box.right > limit + 1
    || holder.scrollWidth > holder.clientWidth + 1);
}).map(t => t.classList.add('attnlab-print-narrow')).length"""


def narrow_wide_tables(page) -> int:
    """Give every table too wide for the page the narrow print style; returns how many."""
    return page.evaluate(_NARROW_JS, PRINT_WIDTH_PX)


def add_contents(page) -> int:
    """Put a linked table of contents before the book's first chapter; returns its entries."""
    return page.evaluate(_CONTENTS_JS)


#: An outline item (bookmark) of a PDF written by Chromium: a title, then where it leads.
_BOOKMARK = re.compile(rb"/Title\s*(?:\((?:[^()\\]|\\.)*\)|<[0-9A-Fa-f\s]*>)\s*/Dest\s*\[")


def bookmarks(pdf: Path) -> int:
    """The bookmarks (outline items) of a PDF written by Chromium (its outline is not compressed)."""
    return len(_BOOKMARK.findall(pdf.read_bytes()))


def near_empty_pages(pdf: Path, dpi: int = 20) -> list[int]:
    """The pages (1-based; not the last) whose printed area is inked over < :data:`NEAR_EMPTY` of it.

    The pages are rendered in grey by poppler's ``pdftoppm`` at ``dpi``; the top and bottom
    margins (the page number) are left out. Returns ``[]`` without ``pdftoppm``.
    """
    import subprocess
    import tempfile

    import numpy as np

    if shutil.which("pdftoppm") is None:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["pdftoppm", "-gray", "-r", str(dpi), str(pdf), f"{tmp}/p"], check=True, timeout=600)
        files = sorted(Path(tmp).glob("p-*.pgm"), key=lambda f: int(f.stem.split("-")[-1]))
        empty = []
        for number, image in enumerate(files[:-1], start=1):
            raw = image.read_bytes()
            _, size, _, pixels = raw.split(b"\n", 3)
            width, height = map(int, size.split())
            grey = np.frombuffer(pixels[-width * height :], dtype=np.uint8).reshape(height, width)
            margin = int(round(18 / 297 * height))
            inked = np.flatnonzero((grey[margin : height - margin] < 200).any(axis=1))
            extent = (inked[-1] - inked[0] + 1) if inked.size else 0
            if extent < NEAR_EMPTY * (height - 2 * margin):
                empty.append(number)
    return empty


def print_book(browser, base: str, out: Path = PDF) -> dict:
    """Print ``{base}/book.html`` (the whole book on one page, :func:`single_page`) to ``out``.

    Returns the number of typeset formulas, the raw TeX markers left in the text, the requests
    that tried to leave ``base``'s host, the tables wider than the printed text, the entries of
    the table of contents, and the PDF's pages.
    """
    page, foreign = offline_page(browser, base, {"width": PRINT_WIDTH_PX, "height": 1400})
    page.goto(f"{base}/book.html", wait_until="load", timeout=120_000)
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=60_000)
    page.evaluate("MathJax.startup.promise")
    # Hidden code and collapsed dropdowns stay closed in print; every figure is shown.
    page.emulate_media(media="print")
    contents = add_contents(page)
    narrowed = narrow_wide_tables(page)
    clipped = clipped_tables(page)
    tables = page.evaluate("document.querySelectorAll('main table').length")
    typeset = page.evaluate("document.querySelectorAll('mjx-container').length")
    text = page.evaluate("document.querySelector('main') ? document.querySelector('main').innerText : ''")
    raw = sorted({tok for tok in RAW_TEX if tok in text})
    out.parent.mkdir(parents=True, exist_ok=True)
    page.pdf(
        path=str(out),
        **PAPER,
        print_background=True,
        display_header_footer=True,
        header_template="<span></span>",
        footer_template=(
            '<div style="font-size:9px;width:100%;text-align:center">'
            '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
        ),
        outline=True,
        tagged=True,
    )
    page.close()
    return {
        "typeset": typeset,
        "raw": raw,
        "foreign": foreign,
        "pages": page_count(out),
        "bookmarks": bookmarks(out),
        "tables": tables,
        "narrowed": narrowed,
        "clipped": clipped,
        "contents": contents,
    }


def main() -> int:
    from playwright.sync_api import sync_playwright

    single_page()
    with serve(SINGLE) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            seen = print_book(browser, base)
        finally:
            browser.close()
    empty = near_empty_pages(PDF)
    print(
        f"{PDF}: {seen['pages']} pages, {seen['bookmarks']} bookmarks, {seen['contents']} entries in the "
        f"contents, {seen['typeset']} formulas typeset, {len(seen['clipped'])} of {seen['tables']} tables "
        f"wider than the page ({seen['narrowed']} set in narrow type), near-empty pages: {empty or 'none'}"
    )
    for table in seen["clipped"]:
        print(f"  clipped: {table}")
    if seen["raw"] or seen["foreign"] or seen["clipped"] or empty:
        print(f"raw TeX left: {seen['raw']}; requests to other hosts: {seen['foreign'][:3]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
