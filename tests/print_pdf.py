"""Print the single-page book (``_build/singlehtml``) as two PDFs, in ``_build/pdf``.

``make pdf`` first builds the single page from the HTML build's environment (no chapter is
executed again), then runs this script: Debian's Chromium, driven by playwright, opens the page
from a local server (nothing leaves 127.0.0.1), waits for MathJax to typeset every formula, and
prints it twice (:func:`print_books`); ``tests/test_browser.py`` runs the same function and checks
the result.

- ``solvable-attention-leader.pdf``, the leader's edition: every solution of an exercise and
  every "What happens" answer moves to "Answers" at the end of its part, and a line where it
  was links to it;
- ``solvable-attention-participants.pdf``, the participants' edition: the same book without
  them, so that a group can predict before it runs.

Each is a book: a title page with the version, the build date and the commit; a part title
where each part of ``_toc.yml`` begins; a table of contents with every part, chapter, section
and subsection, linked and with its page number; one bookmark for each of them, math written as
text; and the print styles of ``_ext/static/attnlab.css`` (no code-cell toggles, tables that fit
the page). The pages are made in the browser by ``tests/print_book.js``, which works from the
rendered HTML (an answer is a ``div.solution`` of sphinx-exercise, static or gated, or an
admonition titled "What happens"). The contents' page numbers are known only once the book is
printed: the book is printed with an empty box of fixed width for each number, its headings'
pages are read from the PDF, and the numbers alone are printed over the contents' pages
(``tests/pdf_book.py``, which also writes the bookmarks).

Before printing, the page is laid out at the printed width (:data:`PRINT_WIDTH_PX`) and every
table is measured (:func:`clipped_tables`); :func:`near_empty_pages` finds pages left almost
blank.
"""

from __future__ import annotations

import functools
import html
import http.server
import shutil
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pdf_book

ROOT = Path(__file__).resolve().parent.parent
SINGLE = ROOT / "_build" / "singlehtml"
PDF_DIR = ROOT / "_build" / "pdf"
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


def near_empty_pages(pdf: Path, dpi: int = 20, front: int = 0) -> list[int]:
    """The pages (1-based; not the last) whose printed area is inked over < :data:`NEAR_EMPTY` of it.

    The pages are rendered in grey by poppler's ``pdftoppm`` at ``dpi``; the top and bottom
    margins (the page number) are left out. The first ``front`` pages (the title page and the
    contents, which end with a page break of their own) are not checked. Returns ``[]`` without
    ``pdftoppm``.
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
            if number <= front:
                continue
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


#: The two printed books: their file, and the title page's edition line and note.
EDITIONS = {
    "leader": {
        "pdf": PDF_DIR / "solvable-attention-leader.pdf",
        "title": "Leader's edition",
        "note": (
            "With the solutions of the exercises and the answers to \u201cWhat happens\u201d, gathered at "
            "the end of each part. The participants' edition leaves them out."
        ),
    },
    "participants": {
        "pdf": PDF_DIR / "solvable-attention-participants.pdf",
        "title": "Participants' edition",
        "note": (
            "Without the solutions of the exercises and the answers to \u201cWhat happens\u201d: predict, "
            "then run. The leader's edition has them."
        ),
    },
}


def parts(toc: Path = ROOT / "_toc.yml") -> list[dict]:
    """The parts of ``_toc.yml``: ``[{"caption", "docs": [docname, ...]}, ...]``."""
    import yaml

    data = yaml.safe_load(toc.read_text(encoding="utf8"))
    return [
        {"caption": part.get("caption", ""), "docs": [entry["file"] for entry in part.get("chapters", [])]}
        for part in data.get("parts", [])
    ]


def _footer(info: dict, edition: str) -> str:
    return (
        '<div style="font-size:8px;width:100%;text-align:center;color:#555">'
        f"Solvable Attention {html.escape(info['version'])} · {html.escape(edition)} · "
        '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
    )


def _print_edition(page, edition: dict, out: Path, work: Path) -> dict:
    """Print the page as it stands to ``out``, with a title page, paged contents and bookmarks."""
    info = page.evaluate("([t, n]) => attnlabPrint.titlePage(t, n)", [edition["title"], edition["note"]])
    entries = page.evaluate("attnlabPrint.contents()")
    footer = _footer(info, edition["title"])
    first = work / f"{out.stem}-pages.pdf"
    page.pdf(
        path=str(first),
        **PAPER,
        print_background=True,
        display_header_footer=True,
        header_template="<span></span>",
        footer_template=footer,
    )
    found = pdf_book.destinations(first)
    numbers = {entry["id"]: found.get(entry["id"]) for entry in entries}
    missing = [name for name, number in numbers.items() if number is None]
    if missing:
        raise ValueError(f"Chromium wrote no destination for the headings {missing[:5]} (of {len(missing)})")
    # The title page and the contents end on the page before the first heading (the intro's title).
    front_pages = numbers[entries[0]["id"]] - 1
    page.evaluate("numbers => attnlabPrint.pageNumbers(numbers)", numbers)
    page.evaluate("document.documentElement.classList.add('attnlab-print-numbers-only')")
    stamp = work / f"{out.stem}-numbers.pdf"
    page.pdf(path=str(stamp), **PAPER, print_background=False, page_ranges=f"1-{front_pages}")
    page.evaluate("document.documentElement.classList.remove('attnlab-print-numbers-only')")
    metadata = {
        "dc:title": f"Solvable Attention — {edition['title']}",
        "dc:description": f"Version {info['version']}, built {info['date']} from commit {info['commit']}",
    }
    pdf_book.finish(first, stamp, front_pages, entries, out, metadata)
    return {
        "info": info,
        "entries": [dict(entry, page=numbers[entry["id"]]) for entry in entries],
        "front_pages": front_pages,
        "pages": pdf_book.page_count(out),
        "bookmarks": len(pdf_book.outline(out)),
    }


def print_books(browser, base: str, out_dir: Path = PDF_DIR) -> dict:
    """Print ``{base}/book.html`` (the whole book on one page, :func:`single_page`) as both editions.

    The page is loaded and typeset once; the leader's edition is printed first (its answers
    gathered at the end of each part), then the answers are removed and the participants' edition
    is printed. Returns, for each edition, what :func:`_print_edition` returns and the number of
    answers it holds; and, for the page, the number of typeset formulas, the raw TeX markers left
    in the text, the requests that tried to leave ``base``'s host and the tables wider than the
    printed text.
    """
    page, foreign = offline_page(browser, base, {"width": PRINT_WIDTH_PX, "height": 1400})
    page.goto(f"{base}/book.html", wait_until="load", timeout=120_000)
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=60_000)
    page.evaluate("MathJax.startup.promise")
    page.add_script_tag(content=(Path(__file__).parent / "print_book.js").read_text(encoding="utf8"))
    # Hidden code and collapsed dropdowns stay closed in print; every figure is shown.
    page.emulate_media(media="print")
    page.evaluate("document.documentElement.classList.add('attnlab-book-print')")
    narrowed = narrow_wide_tables(page)
    clipped = clipped_tables(page)
    seen = {
        "tables": page.evaluate("document.querySelectorAll('main table').length"),
        "typeset": page.evaluate("document.querySelectorAll('mjx-container').length"),
        "narrowed": narrowed,
        "clipped": clipped,
        "parts": page.evaluate("parts => attnlabPrint.markParts(parts)", parts()),
        "answers": page.evaluate("attnlabPrint.answers()"),
    }
    text = page.evaluate("document.querySelector('main') ? document.querySelector('main').innerText : ''")
    seen["raw"] = sorted({tok for tok in RAW_TEX if tok in text})
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        moved = page.evaluate("attnlabPrint.gatherAnswers()")
        seen["leader"] = _print_edition(
            page, EDITIONS["leader"], out_dir / EDITIONS["leader"]["pdf"].name, Path(tmp)
        )
        seen["leader"]["answers_moved"] = moved
        seen["leader"]["answers"] = page.evaluate("attnlabPrint.answers()")
        removed = page.evaluate("attnlabPrint.dropAnswers()")
        seen["participants"] = _print_edition(
            page, EDITIONS["participants"], out_dir / EDITIONS["participants"]["pdf"].name, Path(tmp)
        )
        seen["participants"]["answers_removed"] = removed
        seen["participants"]["answers"] = page.evaluate("attnlabPrint.answers()")
    page.close()
    seen["foreign"] = foreign
    return seen


def main() -> int:
    from playwright.sync_api import sync_playwright

    single_page()
    with serve(SINGLE) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            seen = print_books(browser, base)
        finally:
            browser.close()
    failed = bool(seen["raw"] or seen["foreign"] or seen["clipped"])
    print(
        f"{seen['typeset']} formulas typeset, {len(seen['clipped'])} of {seen['tables']} tables wider than "
        f"the page ({seen['narrowed']} set in narrow type), {seen['answers']} answers"
    )
    for name, edition in EDITIONS.items():
        done, out = seen[name], edition["pdf"]
        empty = near_empty_pages(out, front=done["front_pages"])
        failed = failed or bool(empty)
        print(
            f"{out}: {done['pages']} pages, {done['bookmarks']} bookmarks, {len(done['entries'])} entries in "
            f"{done['front_pages'] - 1} pages of contents, {done['answers']} answers, near-empty pages: "
            f"{empty or 'none'}"
        )
    for table in seen["clipped"]:
        print(f"  clipped: {table}")
    if seen["raw"] or seen["foreign"]:
        print(f"raw TeX left: {seen['raw']}; requests to other hosts: {seen['foreign'][:3]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
