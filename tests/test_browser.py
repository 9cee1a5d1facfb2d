"""Open every built page in headless Chromium and check what a reader sees.

For each page of ``_build/html``: the math is typeset by the local MathJax (no raw TeX left),
every image loaded, every figure has alt text, every internal link resolves, no request left
127.0.0.1, and the console shows no error. What a reader of the results sees: no table printed as
preformatted text in a chapter's output, no figure wider than the text column (shown scaled
down), no figure caption with a raw label or raw MyST, no header button (launch, repository)
that points to another host, the version, build date and commit in the footer, and no
sphinx-thebe asset. Clicking through the sidebar reaches every chapter of the table of contents,
a solution dropdown opens on click, hovering over a reference to an equation or a theorem of
another chapter shows it (sphinx-tippy), and each chapter's downloaded notebook has the outputs
its label promises. Screenshots of the intro and of the first chapter of each part are saved
into ``_build/screenshots``.

The two PDFs (``make pdf``: the single-page build, printed by the same Chromium, both editions)
have more than :data:`MIN_PDF_PAGES` pages, every formula typeset and no raw TeX; the
participants' edition holds no answer (each answer's first sentence, taken from the HTML, is
found in the leader's PDF and not in the participants'); the bookmarks are one clean title per
part and heading; the contents' page numbers are the bookmarks' pages. Their first pages are
saved as images into ``_build/screenshots`` (with poppler's ``pdftoppm``).

The browser is Debian's ``chromium`` driven by Python playwright (never ``playwright install``).
Without it the test skips with a message, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import threading
import unicodedata
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest
import yaml

import attnlab

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
SINGLE = ROOT / "_build" / "singlehtml"
MIN_PDF_PAGES = 100
#: Pixels per inch of every figure as shown (issue 35: figures at >= 150 dpi).
MIN_DPI = 150
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser check cannot run under CI=true: {reason}")
    pytest.skip(f"browser check skipped: {reason} (install Debian's chromium to run it)")


def _pages() -> list[Path]:
    skip = {"_static", "_sources", "_images", "_sphinx_design_static", "jupyter_execute"}
    pages = [p for p in HTML.rglob("*.html") if not skip.intersection(p.relative_to(HTML).parts)]
    # The root index.html is only a redirect to the intro; it is followed in its own test.
    return sorted(p for p in pages if p != HTML / "index.html")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        pytest.fail("_build/html/index.html is missing: build the book first (make book)")
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


class _Reader:
    """One browser tab that may load only from ``server`` (offline) and reports each page it shows.

    The console errors and the requests to other hosts are counted from one :meth:`inspect` to
    the next, so that each page is charged with its own.
    """

    def __init__(self, browser, server: str):
        import print_pdf

        self.page, self.foreign = print_pdf.offline_page(browser, server, {"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def goto(self, url: str) -> None:
        self.page.goto(url, wait_until="load")

    def inspect(self, screenshot: Path | None = None) -> dict:
        """What a reader sees on the page shown now (see :data:`_PAGE_PROBLEMS`)."""
        seen = _inspect(self.page, self.foreign[:], self.errors[:], screenshot)
        self.foreign.clear()
        self.errors.clear()
        return seen

    def close(self) -> None:
        self.page.close()


#: A visible reference to an equation or to a theorem of another chapter (hover previews).
_CROSS_REFERENCE = {
    "equation": 'article.bd-article a.reference.internal[href*=".html#equation-"]',
    "theorem": 'article.bd-article a.reference.internal[href*=".html#thm-"]',
}


def _inspect(page, foreign: list[str], errors: list[str], screenshot: Path | None) -> dict:
    host = urlparse(page.url).netloc
    has_math = page.evaluate("document.querySelectorAll('.math').length") > 0
    typeset = 0
    if has_math:
        page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=20000)
        page.evaluate("MathJax.startup.promise")
        page.wait_for_function("document.querySelectorAll('mjx-container').length > 0", timeout=20000)
        typeset = page.evaluate("document.querySelectorAll('mjx-container').length")
    text = page.evaluate("document.querySelector('main') ? document.querySelector('main').innerText : ''")
    raw_tex = [tok for tok in ("\\(", "\\[", "\\begin{", "$$") if tok in text]
    broken = page.evaluate(
        "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    links = page.evaluate("Array.from(document.querySelectorAll('a[href]')).map(a => a.href)")
    no_alt = page.evaluate(
        "Array.from(document.querySelectorAll('main figure img')).filter(i => !i.alt.trim()).map(i => i.src)"
    )
    outputs = page.evaluate(
        "Array.from(document.querySelectorAll('main .cell_output pre')).map(p => p.innerText)"
    )
    # A figure drawn wider than the column is shown scaled down, its fonts with it. A notebook's
    # PNG has twice the pixels of its size on the page (attnlab.plotting.sharp_inline_figures),
    # which its width attribute gives; an image without one is drawn at its natural width.
    wide = page.evaluate(
        """Array.from(document.querySelectorAll('main .cell_output img, main figure img'))
             .map(i => [i, parseFloat(i.style.width) || i.naturalWidth])
             .filter(([i, w]) => w > 1.05 * i.getBoundingClientRect().width + 2)
             .map(([i, w]) => `${i.src.split('/').pop()} (${w} px shown at ${
               Math.round(i.getBoundingClientRect().width)} px)`)"""
    )
    # ... and every figure's PNG has at least MIN_DPI pixels per inch of the page (96 CSS px).
    blurry = page.evaluate(
        f"""Array.from(document.querySelectorAll('main .cell_output img, main figure img'))
             .filter(i => i.src.endsWith('.png') && i.getBoundingClientRect().width > 0)
             .filter(i => i.naturalWidth < {MIN_DPI / 96} * i.getBoundingClientRect().width - 1)
             .map(i => `${{i.src.split('/').pop()}} (${{i.naturalWidth}} px shown at ${{
               Math.round(i.getBoundingClientRect().width)}} px)`)"""
    )
    captions = page.evaluate(
        "Array.from(document.querySelectorAll('main figcaption')).map(c => c.innerText.trim())"
    )
    buttons = page.evaluate(
        "Array.from(document.querySelectorAll('.article-header-buttons a[href], .header-article a[href]'))"
        ".map(a => a.href)"
    )
    # The download menu's "run it locally" link leads to that section of the execution page.
    run_locally = page.evaluate(
        "Array.from(document.querySelectorAll('a.btn-run-locally-button')).map(a => a.href)"
    )
    # Which book this is: the footer's version, build date and commit (_ext/build_info.py).
    build = page.evaluate(
        "(e => e ? {version: e.dataset.version, date: e.dataset.date, commit: e.dataset.commit} : null)"
        "(document.querySelector('footer .attnlab-build'))"
    )
    # Live code is off: no sphinx-thebe script, stylesheet or configuration on the page.
    thebe = page.evaluate(
        "Array.from(document.querySelectorAll('script, link[rel=stylesheet]'))"
        ".map(e => e.src || e.href || e.textContent).filter(t => /thebe/i.test(t)).map(t => t.slice(0, 80))"
    )
    # Where the tests of a solution dropdown and of hover previews find what they need.
    solutions = page.locator("div.solution.dropdown").count()
    references = {
        kind: page.locator(f"{css} >> visible=true").count() for kind, css in _CROSS_REFERENCE.items()
    }
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshot), full_page=False)
    internal = {urldefrag(link)[0] for link in links if urlparse(link).netloc == host}
    return {
        "url": page.url,
        "math": has_math,
        "typeset": typeset,
        "solutions": solutions,
        "references": references,
        "raw": raw_tex,
        "broken": broken,
        "foreign": foreign,
        "errors": errors,
        "links": internal,
        "no_alt": no_alt,
        "text_tables": [t for t in outputs if _looks_like_a_table(t)],
        "wide": wide,
        "blurry": blurry,
        "raw_captions": [c for c in captions if _raw_label(c)],
        "away": [b for b in buttons if urlparse(b).netloc not in (host, "")],
        "build": _build_problems(build),
        "thebe": thebe,
        "run_locally": [
            link
            for link in run_locally
            if (urlparse(link).path, urlparse(link).fragment) != ("/book/execution.html", "run-it-locally")
        ],
    }


#: A row of a table printed as text: three or more cells separated by runs of spaces, with numbers.
_GAP = re.compile(r"\S\s{2,}(?=\S)")
_NUMBER = re.compile(r"[-+]?\d*\.?\d+(?:e[-+]?\d+)?")
#: A label or MyST markup left in a caption: "(theorem thm-rs)", "{eq}`...`", "$...$", "\\alpha".
_RAW_CAPTION = re.compile(
    r"\b(?:thm|fig|eq|ex|sol|def|lem|sec|tab|prop|cor)-[a-z0-9][a-z0-9-]*|\{[a-z:-]+\}`|\$|\\[a-zA-Z]+|:label:"
)


#: What :func:`_inspect` reports that fails a page, and how the failure reads (first three shown).
_PAGE_PROBLEMS = (
    ("raw", "raw TeX left on the page"),
    ("broken", "images not loaded"),
    ("no_alt", "figures without alt text"),
    ("foreign", "requests to other hosts"),
    ("errors", "console errors"),
    ("wide", "figures wider than the text column"),
    ("blurry", f"figures of fewer than {MIN_DPI} dpi"),
    ("raw_captions", "captions with raw labels or markup"),
    ("away", "header buttons pointing to another host"),
    ("run_locally", 'a "run it locally" link that does not lead to the execution page\'s section'),
    ("build", "the footer's version, date and commit"),
    ("thebe", "sphinx-thebe assets (live code is off)"),
)


def _build_problems(build: dict | None) -> list[str]:
    """What is wrong with the footer's version, build date and commit (nothing: ``[]``)."""
    if not build:
        return ["no footer line with them"]
    problems = []
    if build["version"] != attnlab.__version__:
        problems.append(f"version {build['version']}, the library's is {attnlab.__version__}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", build["date"] or ""):
        problems.append(f"date {build['date']!r}")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode == 0 and (build["commit"] or "").split()[:1] != [head.stdout.strip()]:
        problems.append(f"commit {build['commit']!r}, HEAD is {head.stdout.strip()} (rebuild the book)")
    elif head.returncode != 0 and not build["commit"]:
        problems.append("no commit")
    return problems


def _looks_like_a_table(text: str) -> bool:
    """Three or more lines of aligned columns with numbers: a DataFrame or a table printed as text."""
    rows = [
        line for line in text.splitlines() if len(_GAP.findall(line)) >= 2 and len(_NUMBER.findall(line)) >= 2
    ]
    return len(rows) >= 3


def _raw_label(caption: str) -> bool:
    return bool(_RAW_CAPTION.search(caption))


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def _toc_chapters() -> list[str]:
    """The chapters of ``_toc.yml`` as page paths (``book/intro.html``, ...), in reading order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [entry["file"] for entry in part.get("chapters", [])]
    return [f"{f}.html" for f in files]


@pytest.fixture(scope="module")
def walk(server, browser):
    """Every page read once, as a reader would: the intro, then each chapter of the table of
    contents reached by clicking its sidebar entry on the page before, then the pages outside the
    table of contents (opened by their address). Returns ``{"reached": [chapter, ...], "pages":
    {path: what _inspect saw}}``; screenshots of the intro and of each part's first chapter are
    saved on the way."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    shots = {"book/intro.html": SHOTS / "intro.png"}
    shots |= {
        f"{part['chapters'][0]['file']}.html": SHOTS / f"part-{n}.png"
        for n, part in enumerate(toc["parts"], 1)
    }
    chapters = _toc_chapters()
    reader = _Reader(browser, server)
    reader.goto(f"{server}/{chapters[0]}")
    pages, reached = {chapters[0]: reader.inspect(shots.get(chapters[0]))}, []
    for target in chapters[1:]:
        anchors = reader.page.locator("nav.bd-docs-nav a.reference.internal")
        hrefs = anchors.evaluate_all("els => els.map(a => a.href.split('#')[0])")
        wanted = f"{server}/{target}"
        if wanted not in hrefs:
            break  # test_sidebar_reaches_every_chapter says which
        anchors.nth(hrefs.index(wanted)).click()
        reader.page.wait_for_load_state("load")
        if not reader.page.url.endswith(target) or reader.page.locator("main h1").count() < 1:
            break
        reached.append(target)
        pages[target] = reader.inspect(shots.get(target))
    for path in _pages():
        rel = path.relative_to(HTML).as_posix()
        if rel not in pages:
            reader.goto(f"{server}/{rel}")
            pages[rel] = reader.inspect(shots.get(rel))
    reader.close()
    return {"reached": reached, "pages": pages}


def test_every_page_renders_offline(walk):
    pages = _pages()
    assert len(pages) >= 5, f"expected the book's pages under {HTML}, found {len(pages)}"
    problems, links = [], set()
    for path in pages:
        rel = path.relative_to(HTML).as_posix()
        seen = walk["pages"][rel]
        links |= seen["links"]
        if seen["math"] and seen["typeset"] == 0:
            problems.append(f"{rel}: math present but not typeset by MathJax")
        problems += [f"{rel}: {what}: {seen[key][:3]}" for key, what in _PAGE_PROBLEMS if seen[key]]
        for text in seen["text_tables"]:
            problems.append(
                f"{rel}: a table printed as text (show a DataFrame, attnlab.tables):\n{text[:300]}"
            )
    for link in sorted(links):
        if _status(link) != 200:
            problems.append(f"internal link does not resolve: {link}")
    assert not problems, "\n".join(problems)


def test_sidebar_reaches_every_chapter(walk):
    """From the intro, each chapter is reached by clicking its sidebar entry, as a reader would."""
    chapters = _toc_chapters()
    assert walk["reached"] == chapters[1:], (
        f"the sidebar walk stopped after {walk['reached'][-1:] or chapters[:1]}: the next chapter, "
        f"{chapters[len(walk['reached']) + 1]}, has no sidebar entry, or clicking it led elsewhere "
        "or to a page without a title"
    )


def _first_page_with(walk, test) -> str:
    """The first chapter, in reading order, whose page passes ``test`` (None if none does)."""
    return next((target for target in _toc_chapters() if test(walk["pages"][target])), None)


def test_solution_dropdown_opens_on_click(server, browser, walk):
    target = _first_page_with(walk, lambda seen: seen["solutions"] > 0)
    assert target is not None, "no chapter has a solution dropdown"
    page = browser.new_page()
    page.goto(f"{server}/{target}")
    solution = page.locator("div.solution.dropdown").first
    body = solution.locator("> :not(.admonition-title)").first
    assert "toggle-hidden" in (solution.get_attribute("class") or ""), "solutions must start hidden"
    assert not body.is_visible()
    solution.locator(".admonition-title").click()
    page.wait_for_timeout(300)
    assert "toggle-hidden" not in (solution.get_attribute("class") or "")
    assert body.is_visible(), f"the solution on {target} did not open on click"
    page.close()


@pytest.mark.parametrize("kind", ["equation", "theorem"])
def test_hover_shows_the_target_of_a_cross_chapter_reference(server, browser, walk, kind):
    """Hovering over a reference to an equation ({eq}) or a theorem ({prf:ref}) of another chapter
    shows the target in a preview (sphinx-tippy), its math typeset, offline."""
    import print_pdf

    # not one inside a closed dropdown: a reader cannot hover it
    selector = f"{_CROSS_REFERENCE[kind]} >> visible=true"
    target = _first_page_with(walk, lambda seen: seen["references"][kind] > 0)
    assert target is not None, f"no chapter refers to the {kind} of another chapter"
    page, foreign = print_pdf.offline_page(browser, server, {"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/{target}", wait_until="load")
    link = page.locator(selector).first
    label = link.get_attribute("href").split("#", 1)[1]
    page.wait_for_function("el => el._tippy !== undefined", arg=link.element_handle(), timeout=20000)
    link.scroll_into_view_if_needed()
    link.hover()
    preview = page.locator(".tippy-box").first
    preview.wait_for(state="visible", timeout=10000)
    page.wait_for_selector(".tippy-box mjx-container", timeout=20000)
    shown = preview.locator(f'[id="{label}"]').count()
    page.close()
    assert shown == 1, f"hovering {label} on {target} shows no preview of it"
    assert not foreign and not errors, (foreign[:3], errors[:3])


def test_downloaded_notebook_has_the_outputs_its_label_says(server):
    """Each chapter's download menu says what its ``.ipynb`` holds, and it holds it: a notebook
    labelled "executed, with outputs" has at least the outputs the page shows; a page that shows
    outputs offers such a notebook."""
    import json

    from bs4 import BeautifulSoup

    checked = 0
    for target in _toc_chapters():
        soup = BeautifulSoup((HTML / target).read_text(encoding="utf8"), "html.parser")
        shown = len(soup.select("main .cell_output"))
        link = soup.select_one("a.btn-download-notebook-button")
        source = soup.select_one("a.btn-download-source-button")
        assert source is not None and "source, no outputs" in source.get_text(), f"{target}: the .md's label"
        if link is None:
            assert shown == 0, f"{target} shows {shown} outputs but offers no notebook"
            continue
        label = link.get_text(" ", strip=True)
        with urllib.request.urlopen(urljoin(f"{server}/{target}", link["href"]), timeout=30) as response:
            notebook = json.load(response)
        code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
        with_outputs = sum(1 for cell in code if cell.get("outputs"))
        if "executed, with outputs" in label:
            assert with_outputs >= max(shown, 1), (
                f"{target}: the notebook labelled {label!r} has outputs in {with_outputs} of "
                f"{len(code)} code cells; the page shows {shown}"
            )
        else:
            assert label == ".ipynb (no outputs)" and with_outputs == 0 and shown == 0, (target, label)
        checked += with_outputs > 0
    assert checked >= 20, f"only {checked} chapters offer a notebook with outputs"


def test_no_thebe_assets_are_shipped():
    assert not [p for p in (HTML / "_static").rglob("*") if "thebe" in p.name.lower()]


def test_screenshot_of_each_part(walk):
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    for number, part in enumerate(toc["parts"], start=1):
        first = f"{part['chapters'][0]['file']}.html"
        shot = SHOTS / f"part-{number}.png"
        assert not walk["pages"][first]["errors"], walk["pages"][first]["errors"]
        assert shot.exists() and shot.stat().st_size > 10_000


def test_one_search_box_and_a_favicon(server, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{server}/book/intro.html")
    boxes = page.evaluate(
        "Array.from(document.querySelectorAll('.search-button-field, input[type=search]'))"
        ".filter(e => e.offsetParent !== null).length"
    )
    icon = page.evaluate("(document.querySelector('link[rel~=icon]') || {}).href || ''")
    page.close()
    assert boxes == 1, f"{boxes} search boxes are visible on the intro"
    assert icon and _status(icon) == 200, f"the favicon {icon!r} does not load"


def test_root_redirects_to_the_intro(server, browser):
    page = browser.new_page()
    page.goto(f"{server}/index.html")
    page.wait_for_url("**/book/intro.html", timeout=10000)
    page.close()


def test_intro_shows_rendered_math_and_is_captured(walk):
    shot = SHOTS / "intro.png"
    seen = walk["pages"]["book/intro.html"]
    assert seen["typeset"] > 0, "the intro page must show typeset math"
    assert not seen["foreign"] and not seen["errors"] and not seen["broken"]
    assert shot.exists() and shot.stat().st_size > 10_000


def test_looks_like_a_table():
    frame = "   alpha   ours  paper\n0    0.1  0.0086  0.009\n1    0.2  0.012  0.011\n2    0.3  0.02  0.02"
    assert _looks_like_a_table(frame)
    assert not _looks_like_a_table("step 10: loss 0.12\nstep 20: loss 0.05\ndone")
    pairs = (
        "  noise  ConstRR  AdaRR\n  U1  0.0086/ 0.009  0.0028/ 0.003\n"
        "  U2  0.0634/ 0.066  0.0160/ 0.016\n  U3  0.15/ 0.16  0.03/ 0.04"
    )
    assert _looks_like_a_table(pairs)
    assert not _looks_like_a_table(
        "max |f - y| = 1.2e-15\nlargest relative deviation: 11.4% (tuned at uniform:2)"
    )
    assert _raw_label("Fig. 2 The loss (theorem thm-rs) at alpha") and _raw_label("with $\\alpha$")
    assert not _raw_label("Fig. 1.2 The test error of GD++ against α for three seeds.")


@pytest.fixture(scope="module")
def printed(browser):
    """Both printed editions (``make pdf``), printed once for the tests below."""
    import print_pdf

    if not (SINGLE / "book" / "intro.html").exists():
        pytest.fail(f"{SINGLE}/book/intro.html is missing: build the single page first (make pdf)")
    print_pdf.single_page(SINGLE)
    with print_pdf.serve(SINGLE) as base:
        seen = print_pdf.print_books(browser, base)
    if shutil.which("pdftoppm") is None:
        _unavailable("no pdftoppm (Debian's poppler-utils) to save the PDF's first pages as images")
    return seen


def _pdf_text(pdf: Path, *args: str) -> str:
    if shutil.which("pdftotext") is None:
        _unavailable("no pdftotext (Debian's poppler-utils) to read the PDF's text")
    done = subprocess.run(
        ["pdftotext", *args, str(pdf), "-"], capture_output=True, text=True, check=True, timeout=300
    )
    return done.stdout


def _flat(text: str) -> str:
    """Text as compared across HTML and PDF: compatibility forms, single spaces."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).replace("\u00ad", "")).strip()


def _searchable(text: str) -> str:
    """Text as searched for in a PDF's text: :func:`_flat`, and no space before punctuation or
    after a hyphen (pdftotext puts one where the line broke, or before a full stop after code)."""
    return re.sub(r"-\s+", "-", re.sub(r"\s+([.,;:!?)])", r"\1", _flat(text)))


def test_pdf_of_the_whole_book(printed):
    """Both editions: > 100 pages, typeset math, no raw TeX, tables within the page, no blank page."""
    import print_pdf

    for name, edition in print_pdf.EDITIONS.items():
        pdf = edition["pdf"]
        SHOTS.mkdir(parents=True, exist_ok=True)
        for old in SHOTS.glob(f"pdf-{name}-*.png"):
            old.unlink()
        subprocess.run(
            ["pdftoppm", "-png", "-r", "60", "-f", "1", "-l", "4", str(pdf), str(SHOTS / f"pdf-{name}")],
            check=True,
            timeout=120,
        )
        assert len(list(SHOTS.glob(f"pdf-{name}-*.png"))) == 4
        assert printed[name]["pages"] > MIN_PDF_PAGES, f"the {name} PDF has {printed[name]['pages']} pages"
        empty = print_pdf.near_empty_pages(pdf, front=printed[name]["front_pages"])
        assert empty == [], f"pages left almost blank in the {name} PDF: {empty}"
        assert "Show code cell" not in _pdf_text(pdf), f"a code cell's toggle is printed in the {name} PDF"
    clipped = printed["clipped"]
    assert printed["tables"] > 0 and not clipped, (
        f"{len(clipped)} of {printed['tables']} tables are wider than the page: {clipped[:5]}"
    )
    assert printed["typeset"] > 100 and not printed["raw"], f"raw TeX in the PDF's text: {printed['raw']}"
    assert not printed["foreign"], printed["foreign"][:3]


def _answers(soup) -> list:
    """The answers of the single page: sphinx-exercise's solutions and "What happens" admonitions."""

    def title(el):
        head = el.find("p", class_="admonition-title", recursive=False)
        return head.get_text(" ", strip=True) if head else ""

    found = [
        el
        for el in soup.select("main div.solution, main div.admonition")
        if "solution" in el.get("class", []) or re.match(r"what happens\b", title(el), flags=re.IGNORECASE)
    ]
    return [el for el in found if not any(parent in found for parent in el.parents)]


def _probe(answer, elsewhere: str) -> tuple[str, int]:
    """A piece of the answer's first sentence that the rest of the book does not contain.

    The sentences are the answer's paragraphs' (then the lines of its code), with every formula
    cut out (MathJax prints it as glyphs); a probe is the longest piece between formulas of at
    least three words and 16 characters. Where no piece of the first sentence will do (all
    formula, or also found outside the answers), the next sentence is tried. Returns the probe
    and the index of its sentence (0: the first).
    """
    import copy

    body = copy.copy(answer)
    for el in body.select("p.admonition-title, .cell_output"):
        el.decompose()
    for el in body.select(".math, mjx-container"):
        el.replace_with("|")
    sentences = [s for p in body.find_all("p") for s in re.split(r"(?<=[.!?])\s+", _flat(p.get_text()))]
    sentences += [line for pre in body.find_all("pre") for line in pre.get_text().splitlines()]
    for index, sentence in enumerate(sentences):
        pieces = sorted((_flat(p) for p in sentence.split("|")), key=len, reverse=True)
        for piece in pieces:
            piece = _searchable(piece)
            if len(piece) >= 16 and len(piece.split()) >= 3 and piece not in elsewhere:
                return piece, index
    return "", -1


def test_participants_pdf_leaves_out_every_answer(printed):
    """The participants' edition holds no solution and no "What happens" answer; the leader's, all.

    Each answer's first sentence is taken from the single page's HTML at test time (the next one
    where the first is all formulas, :func:`_probe`); it must be found in the leader's PDF (so
    that the search can fail) and not in the participants'.
    """
    import print_pdf
    from bs4 import BeautifulSoup

    html = (SINGLE / "book" / "intro.html").read_text(encoding="utf8")
    soup = BeautifulSoup(html, "html.parser")
    answers = _answers(soup)
    assert len(answers) >= 40, f"only {len(answers)} solutions and 'What happens' answers on the single page"
    assert printed["answers"] == len(answers), "print_book.js and this test find different answers"
    assert printed["participants"]["answers"] == 0 and printed["leader"]["answers"] == len(answers)
    rest = _text_without_answers(html)
    # In content order (-raw): the layout order interleaves the lines of subscripts with the text.
    leader = _searchable(_pdf_text(print_pdf.EDITIONS["leader"]["pdf"], "-raw"))
    participants = _searchable(_pdf_text(print_pdf.EDITIONS["participants"]["pdf"], "-raw"))
    missing, leaked, later = [], [], 0
    for answer in answers:
        probe, sentence = _probe(answer, rest)
        name = answer.get("id") or answer.get_text(" ", strip=True)[:40]
        assert probe, f"no piece of the answer {name} is absent from the rest of the book"
        later += sentence > 0
        if probe not in leader:
            missing.append(f"{name}: {probe!r}")
        if probe in participants:
            leaked.append(f"{name}: {probe!r}")
    assert not missing, f"answers not found in the leader's edition: {missing[:5]}"
    assert not leaked, f"answers printed in the participants' edition: {leaked[:5]}"
    # A first sentence that is all formulas is probed by the next one.
    assert later <= len(answers) // 4, f"{later} answers were probed by a later sentence than the first"


def _text_without_answers(html: str) -> str:
    """The single page's text without its answers, every formula cut out (as :func:`_probe` does)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    for answer in _answers(soup):
        answer.decompose()
    for el in soup.select("main .math"):
        el.replace_with("|")
    return _searchable(soup.select_one("main").get_text())


#: A bookmark title that is not clean text: TeX or markup left in it, a doubled section number or
#: title ("5. 5. Gradient flow…", "…a conservationGradient flow…"), or spaces where math was lost.
_UNCLEAN = re.compile(r"[\\$`{}]|^(\d+(?:\.\d+)*\.) \1|\s{2}|^\s|\s$|\s[,.:;)]|\(\s")


def _doubled(title: str) -> bool:
    """The title's text twice over (Chromium's outline: "Exercises" → "ExercisesExercises")."""
    words = re.sub(r"^\d+(?:\.\d+)*\.\s*", "", title)
    half = len(words) // 2
    return len(words) > 3 and words[:half].replace(" ", "") == words[half:].replace(" ", "")


def _headings(html: str) -> list[tuple[str, list[str]]]:
    """The single page's section headings outside the answers: their text with every formula cut
    out, as the pieces between formulas (an empty list of formulas: no math in the heading)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    for answer in _answers(soup):
        answer.decompose()
    found = []
    for heading in soup.select("main section > h1, main section > h2, main section > h3, main section > h4"):
        for link in heading.select("a.headerlink"):
            link.decompose()
        maths = heading.select(".math")
        for el in maths:
            el.replace_with("|")
        pieces = [_flat(piece) for piece in heading.get_text().split("|")]
        found.append((_flat(heading.get_text().replace("|", "")), [p for p in pieces if p] if maths else []))
    return found


def test_pdf_bookmarks_are_one_clean_title_each(printed):
    """A test reads both PDFs' outlines: a bookmark for every part of ``_toc.yml`` and every heading,
    each title clean and once, formulas written as text, and each leading to a page of the book."""
    import pdf_book
    import print_pdf

    captions = [part["caption"] for part in print_pdf.parts()]
    headings = _headings((SINGLE / "book" / "intro.html").read_text(encoding="utf8"))
    for name, edition in print_pdf.EDITIONS.items():
        marks = pdf_book.outline(edition["pdf"])
        titles = [title for _, title, _ in marks]
        unclean = [t for t in titles if _UNCLEAN.search(t) or _doubled(t)]
        assert not unclean, f"{name}: bookmarks that are not clean text: {unclean[:5]}"
        numbered = [t for t in titles if re.match(r"\d+(\.\d+)*\. ", t)]
        assert len(numbered) == len(set(numbered)), f"{name}: a numbered bookmark twice"
        assert all(page is not None and 1 <= page <= printed[name]["pages"] for _, _, page in marks)
        pages = [page for _, _, page in marks]
        assert pages == sorted(pages), f"{name}: bookmarks out of the book's order"
        top = [title for depth, title, _ in marks if depth == 0]
        assert [t for t in top if t in captions] == captions, f"{name}: the parts' bookmarks are {top}"
        answers = [t for depth, t, _ in marks if depth == 1 and t.startswith("Answers · ")]
        assert (len(answers) > 0) == (name == "leader"), f"{name}: answers sections {answers}"
        # One bookmark per heading (and per part, and per answers section), in the same order, and
        # no formula of a heading lost: every piece of text between its formulas is in the title,
        # and the title is longer than those pieces.
        assert len(marks) == len(headings) + len(captions) + len(answers), (
            f"{name}: {len(marks)} bookmarks for {len(headings)} headings and {len(captions)} parts"
        )
        own = [
            title
            for depth, title, _ in marks
            if not (depth == 0 and title in captions) and not (depth == 1 and title in answers)
        ]
        for (text, pieces), title in zip(headings, own, strict=True):
            if not pieces:
                assert title == text, f"{name}: bookmark {title!r} for the heading {text!r}"
                continue
            assert all(p in title for p in pieces) and len(title) > len("".join(pieces)) + len(pieces) - 1, (
                f"{name}: the formulas of {text!r} are missing from its bookmark {title!r}"
            )


#: A line of the contents (``pdftotext -layout``): text, then at least two spaces and a page number.
_CONTENTS_LINE = re.compile(r"[A-Za-z].*\S\s{2,}(\d+)\s*$")
#: The running footer: "Solvable Attention 0.2.0 · Participants' edition · 2 / 366".
_FOOTER_LINE = re.compile(r"·\s*\d+\s*/\s*\d+\s*$")


def test_pdf_contents_show_page_numbers(printed):
    """The printed contents give every entry's page: the numbers at the ends of the contents'
    lines are, in order, the pages of the bookmarks read back from the PDF."""
    import pdf_book
    import print_pdf

    for name, edition in print_pdf.EDITIONS.items():
        front = printed[name]["front_pages"]
        assert front >= 2, f"{name}: no contents pages"
        text = _pdf_text(edition["pdf"], "-layout", "-f", "2", "-l", str(front))
        assert text.lstrip().startswith("Contents"), f"{name}: page 2 is not the contents"
        numbers = [
            int(match.group(1))
            for line in text.splitlines()
            if not _FOOTER_LINE.search(line)
            for match in [_CONTENTS_LINE.search(line)]
            if match
        ]
        expected = [page for _, _, page in pdf_book.outline(edition["pdf"])]
        first = next(
            (i for i, pair in enumerate(zip(numbers, expected, strict=False)) if pair[0] != pair[1]), None
        )
        assert numbers == expected, (
            f"{name}: {len(numbers)} page numbers in the contents for {len(expected)} bookmarks; "
            f"first difference at entry {first}"
        )
