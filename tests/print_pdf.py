"""Print the single-page book (``_build/singlehtml``) to ``_build/pdf/solvable-attention.pdf``.

``make pdf`` first builds the single page from the HTML build's environment (no chapter is
executed again), then runs this script: Debian's Chromium, driven by playwright, opens the page
from a local server (nothing leaves 127.0.0.1), waits for MathJax to typeset every formula, and
prints it. ``tests/test_browser.py`` runs the same :func:`print_book` and checks the result.
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


def print_book(browser, base: str, out: Path = PDF) -> dict:
    """Print ``{base}/book.html`` (the whole book on one page, :func:`single_page`) to ``out``.

    Returns the number of typeset formulas, the raw TeX markers left in the text, and the
    requests that tried to leave ``base``'s host.
    """
    page, foreign = offline_page(browser, base, {"width": 1000, "height": 1400})
    page.goto(f"{base}/book.html", wait_until="load", timeout=120_000)
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=60_000)
    page.evaluate("MathJax.startup.promise")
    # Hidden code and collapsed dropdowns stay closed in print; every figure is shown.
    page.emulate_media(media="print")
    typeset = page.evaluate("document.querySelectorAll('mjx-container').length")
    text = page.evaluate("document.querySelector('main') ? document.querySelector('main').innerText : ''")
    raw = sorted({tok for tok in RAW_TEX if tok in text})
    out.parent.mkdir(parents=True, exist_ok=True)
    page.pdf(
        path=str(out),
        format="A4",
        print_background=True,
        margin={"top": "18mm", "bottom": "18mm", "left": "16mm", "right": "16mm"},
        display_header_footer=True,
        header_template="<span></span>",
        footer_template=(
            '<div style="font-size:9px;width:100%;text-align:center">'
            '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
        ),
    )
    page.close()
    return {"typeset": typeset, "raw": raw, "foreign": foreign, "pages": page_count(out)}


def main() -> int:
    from playwright.sync_api import sync_playwright

    single_page()
    with serve(SINGLE) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            seen = print_book(browser, base)
        finally:
            browser.close()
    print(f"{PDF}: {seen['pages']} pages, {seen['typeset']} formulas typeset")
    if seen["raw"] or seen["foreign"]:
        print(f"raw TeX left: {seen['raw']}; requests to other hosts: {seen['foreign'][:3]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
