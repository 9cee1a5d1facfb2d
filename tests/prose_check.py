"""The prose check: how a page's running prose reads, measured from its MyST source.

Usage: ``.venv/bin/python tests/prose_check.py [-v] [--kind chapter] [FILE.md ...]``: a row per
page (default: every page); ``-v`` lists the sentences with three or more numbers and the names.

**Running prose** is what a reader reads straight through: the paragraphs and list items of the
page, also inside open admonitions ("In this chapter") and ``{prf:...}`` statements and proofs.
It leaves out code cells and inline code (which is still searched for names); math (``$...$``,
``$$...$$``, ``{math}``, ``\\begin...\\end``); directive options; the record set aside
(``{margin}``, ``{sidebar}``, footnotes, and every collapsed box: ``:class: dropdown``,
``{dropdown}``, ``{toggle}``); exercises and solutions (``{exercise}``, ``{solution}``, the gated
``-start``/``-end`` pairs), a separate kind of text, a question and its answer, not measured;
captions and tables; headings, admonition titles and bold run-in titles ("**Check.**"), which
are searched for names but are not sentences. Role targets (``{eq}``, ``{numref}``, ``{doc}``,
``{ref}``, ``{cite}``, ``{prf:ref}``, ``{term}``) and link URLs count as one word and no number;
``{func}``, ``{class}``, ``{meth}``, ``{mod}`` as one word that names a function.

**Numbers.** A glued value (``{glue}``, ``{glue:}``, ``{glue:text}``, also ``{exec-time}``)
counts as one number; ``{glue:md}`` is glued *text* and does not. Outside math, a number is a
run of digits that does not continue a word (``float64``, ``x_2`` are not numbers), with its
thousands separators, decimals, exponent and suffix: ``1``, ``0.15``, ``30,000``, ``1e-4``,
``10^4``, ``10⁴``, ``2.5×10⁴``, ``6k``, ``2.5×`` count once each; ``U(0, 5)``, ``2–5``, ``1/31``
twice. Numbers in words (``four seeds``) do not count; references typed by hand (``Table 1``,
``chapter 03``) do, references made through roles do not.

**Sentences** end at ``.``, ``!`` or ``?`` (and closing quotes or brackets) followed by a space
and a character that is not a lowercase letter, except after an abbreviation
(:data:`ABBREVIATIONS`: ``e.g.``, ``i.e.``, ``Fig.``, ``et al.``, ...); decimals never end one.
Every paragraph and list item starts a new sentence, except that a paragraph that stops without
punctuation before a display equation goes on in the next one ("Take $$...$$ with ...").

**Names.** Experiment names are the registered ones (``attnlab.experiments.names()``, e.g.
``pt_metastable``), as whole words, in text or inline code. File names end in an extension
(:data:`FILE_EXTENSIONS`) or are a path into the repository (``lib/attnlab/results/``). Function
names (reported, no target) are identifiers followed by ``(`` in inline code, dotted
``attnlab.`` paths and ``{func}``-like roles.

**Figures and worked examples.** A figure is a code cell with ``mystnb: figure:`` metadata or
one that makes a figure (``plt.subplots``/``plt.figure``/``plt.show``, an ``attnlab.plotting``
plot, a call of a function named ``*figure*``, ``glue`` of a ``fig``), or a ``{figure}``,
``{glue:figure}`` or ``{image}`` directive; a cell whose output is removed or hidden is not.
A **worked example** is a ``{prf:example}``, an
admonition whose title starts with "Worked example" or "Example", or a paragraph that starts
with the bold run-in title "**Worked example.**"; a collapsed one does not count. "First figure
at" is the share of the page's running-prose words that come before the first of them.

**Equations.** A page's own numbered display equations are its labelled math blocks in running
text (``{math}`` with ``:label:``, ``$$...$$ (label)``, amsmath with ``\\label``), statements and
proofs included. A page **derives something** if its running text holds a ``{prf:theorem}``,
``{prf:proposition}``, ``{prf:lemma}``, ``{prf:corollary}``, ``{prf:definition}`` or
``{prf:proof}`` (a definition states its object in mathematics: what a numbered equation is for).

**Targets** (:func:`failures`), for every page under :data:`CHAPTER_FOLDERS`: at most
:data:`MAX_NUMERIC_SHARE` of the sentences with three or more numbers, no experiment names and
no file names, a numbered display equation if the page derives something, and a figure or worked
example before :data:`FIGURE_BEFORE` of the page. A part's ``index.md`` is an overview, a map of
the part read in a few minutes whose pictures are its chapters': it is held to every target but
the figure. Lab notes and back matter are reported, not held.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from convert_chapters import BOOK, ROOT, chapter_paths
from markdown_it import MarkdownIt
from mdit_py_plugins.amsmath import amsmath_plugin
from mdit_py_plugins.colon_fence import colon_fence_plugin
from mdit_py_plugins.deflist import deflist_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin
from mdit_py_plugins.footnote import footnote_plugin
from mdit_py_plugins.front_matter import front_matter_plugin
from mdit_py_plugins.myst_blocks import myst_block_plugin
from mdit_py_plugins.myst_role import myst_role_plugin

#: Targets: the largest share of sentences with three or more numbers ...
MAX_NUMERIC_SHARE = 0.08
#: ... a sentence with this many numbers or more is "numeric" ...
MANY_NUMBERS = 3
#: ... and the share of the page's running prose before which a figure or worked example comes.
FIGURE_BEFORE = 0.20
#: The folders (under ``book/``) whose pages are chapters, held to the targets.
CHAPTER_FOLDERS = ("attention", "linear-nn", "phase-transition", "in-context", "connections")

#: Words after which a full stop does not end the sentence (compared in lowercase).
ABBREVIATIONS = frozenset(
    "e.g i.e i.i.d cf vs al fig figs eq eqs eqn sec secs ch chap ref refs approx resp pp vol".split()
)
FILE_EXTENSIONS = tuple("csv json py md ipynb c h yml yaml toml bib npz npy pt".split())

_NUMBER_ROLES = frozenset({"glue", "glue:", "glue:text", "exec-time"})
_FUNCTION_ROLES = frozenset("func class meth mod obj py:func py:class py:meth py:mod".split())
_ASIDE = frozenset({"margin", "sidebar", "dropdown", "toggle"})
_EXERCISES = frozenset({"exercise", "solution"})
_GATED_START = re.compile(r"(exercise|solution)-start$")
_FIGURE_DIRECTIVES = frozenset({"figure", "glue:figure", "image"})
_DERIVES = frozenset(f"prf:{k}" for k in "theorem proposition lemma corollary definition proof".split())
# Directives whose body is not prose (code, math, tables, generated lists), besides code cells.
_NOT_PROSE = frozenset(
    "code-cell raw-cell code code-block literalinclude math list-table csv-table table bibliography "
    "glossary nb-exec-table toctree tableofcontents raw glue:any glue:math".split()
)

# Placeholders in a sentence's text: no digits, no sentence punctuation, not lowercase.
MATH, NUM, REF, CODE = "⟨math⟩", "⟨num⟩", "⟨ref⟩", "⟨code⟩"

_SUP = "⁰¹²³⁴⁵⁶⁷⁸⁹⁻"
_NUMBER = re.compile(
    rf"(?<![\w.])(?:\d{{1,3}}(?:,\d{{3}})+(?!\d)|\d+)(?:\.\d+)?"  # 30,000  0.15
    rf"(?:[eE][-+−]?\d+|\^[-−]?\d+|[{_SUP}]+)?"  # 1e-4  10^4  10⁴
    rf"(?:\s?[×x]\s?10(?:\^[-−]?\d+|[{_SUP}]+))?"  # 2.5×10⁴
)
_MATH_BLOCKS = frozenset({"math_block", "math_block_label", "amsmath"})
_FINISHED = re.compile(r"[.!?:;][\"'”’)\]]*$")
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*\s+")
_LAST_WORD = re.compile(r"(\S+)[.!?][\"'”’)\]]*$")
_FUNCTION_CALL = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)\(")
_ATTNLAB_PATH = re.compile(r"(?<![\w.])attnlab(?:\.\w+)+")
_FILE = re.compile(rf"(?<![\w/.-])[\w.-]*[\w-]\.(?:{'|'.join(FILE_EXTENSIONS)})(?![\w.]*\w)")
_PATH = re.compile(r"(?<![\w/.-])([\w.-]+)/(?:[\w.-]+/?)*")  # a path if it starts in _TOP_FOLDERS
_TOP_FOLDERS = frozenset(
    {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} | {"attnlab", "results"}
)

_MD = (
    MarkdownIt("commonmark")
    .enable("table")
    .use(front_matter_plugin)
    .use(myst_block_plugin)
    .use(myst_role_plugin)
    .use(dollarmath_plugin, allow_labels=True, double_inline=True)
    .use(amsmath_plugin)
    .use(colon_fence_plugin)
    .use(deflist_plugin)
    .use(footnote_plugin)
)


def count_numbers(text: str) -> int:
    """Numbers in a piece of running prose (math already removed): glued values and digit runs."""
    return text.count(NUM) + len(_NUMBER.findall(text))


def split_sentences(text: str) -> list[str]:
    """The sentences of one paragraph's text (see the module's docstring)."""
    sentences, start = [], 0
    for end in _SENTENCE_END.finditer(text):
        rest = text[end.end() :]
        word = _LAST_WORD.search(text[start : end.end()].rstrip())
        if rest[:1].islower() or (word and word.group(1).lower().lstrip("(") in ABBREVIATIONS):
            continue
        sentences.append(text[start : end.end()].strip())
        start = end.end()
    if text[start:].strip():
        sentences.append(text[start:].strip())
    return sentences


@functools.cache
def experiment_names() -> tuple[str, ...]:
    """The registered experiment names (imports ``attnlab.experiments``)."""
    from attnlab import experiments

    return tuple(experiments.names())


@dataclass
class Found:
    """A sentence, or a name, and the line of the page it starts on."""

    line: int
    text: str


@dataclass
class Report:
    """The measures of one page (see the module's docstring for each)."""

    path: Path
    kind: str  # "chapter", "overview" (a part's index) or "other" (reported, not held)
    sentences: list[Found] = field(default_factory=list)
    numeric: list[Found] = field(default_factory=list)  # sentences with >= MANY_NUMBERS numbers
    experiments: list[Found] = field(default_factory=list)
    files: list[Found] = field(default_factory=list)
    functions: list[Found] = field(default_factory=list)
    equations: int = 0
    derives: bool = False
    words: int = 0
    words_before_figure: int | None = None  # None: no figure or worked example

    @property
    def numeric_share(self) -> float:
        return len(self.numeric) / len(self.sentences) if self.sentences else 0.0

    @property
    def first_figure(self) -> float | None:
        """The share of the running-prose words before the first figure or worked example."""
        if self.words_before_figure is None:
            return None
        return self.words_before_figure / self.words if self.words else 0.0


def failures(report: Report) -> list[str]:
    """The targets a page misses (none for pages that are only reported)."""
    if report.kind == "other":
        return []
    missed = []
    if report.numeric_share > MAX_NUMERIC_SHARE:
        missed.append(f"{report.numeric_share:.1%} of sentences with >= {MANY_NUMBERS} numbers")
    if report.experiments:
        missed.append(f"experiment names in prose: {', '.join(sorted({f.text for f in report.experiments}))}")
    if report.files:
        missed.append(f"file names in prose: {', '.join(sorted({f.text for f in report.files}))}")
    if report.derives and report.equations == 0:
        missed.append("derives something but has no numbered display equation")
    if report.kind == "chapter" and (report.first_figure is None or report.first_figure >= FIGURE_BEFORE):
        where = "none" if report.first_figure is None else f"at {report.first_figure:.0%}"
        missed.append(f"first figure or worked example {where}, not before {FIGURE_BEFORE:.0%}")
    return missed


def page_kind(path: Path) -> str:
    """``chapter``, ``overview`` (a part's ``index.md``) or ``other``, from the page's folder."""
    path = Path(path).resolve()
    parts = path.relative_to(BOOK).parts if path.is_relative_to(BOOK) else ()
    if len(parts) == 2 and parts[0] in CHAPTER_FOLDERS:
        return "overview" if parts[1] == "index.md" else "chapter"
    return "other"


def check(path, kind: str | None = None, names=None) -> Report:
    """Measure the page at ``path``; ``kind`` defaults to :func:`page_kind`."""
    path = Path(path)
    return check_text(path.read_text(), kind or page_kind(path), names, path)


def check_text(text: str, kind: str = "chapter", names=None, path: Path | None = None) -> Report:
    """Measure a page given as text; ``names`` defaults to the registered experiment names."""
    if kind not in ("chapter", "overview", "other"):
        raise ValueError(f"kind must be 'chapter', 'overview' or 'other', got {kind!r}")
    names = experiment_names() if names is None else tuple(names)
    walker = _Walker(Report(Path(path or "<text>"), kind), names)
    walker.blocks(_MD.parse(text), 1)
    return walker.report


def _options(body: str) -> tuple[dict, str, int]:
    """A directive's options, its body without them, and how many lines they took."""
    lines = body.split("\n")
    if lines and lines[0].strip() == "---" and "---" in (s.strip() for s in lines[1:]):
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
        options = yaml.safe_load("\n".join(lines[1:end])) or {}
        return (options if isinstance(options, dict) else {}), "\n".join(lines[end + 1 :]), end + 1
    options, n = {}, 0
    while n < len(lines) and (m := re.match(r"^:([\w-]+):\s*(.*)$", lines[n])):
        options[m.group(1)] = m.group(2)
        n += 1
    return options, "\n".join(lines[n:]), n


def _makes_figure(source: str, options: dict) -> bool:
    if re.search(r"remove[-_](cell|output)|hide[-_]output", str(options.get("tags", ""))):
        return False  # not shown there (a glued figure is shown by its {glue:figure})
    mystnb = options.get("mystnb")
    if isinstance(mystnb, dict) and "figure" in mystnb:
        return True
    return bool(
        re.search(r"\bplt\.(subplots|subplot_mosaic|figure|show)\(", source)
        or re.search(r"\bplotting\.(?!use_style)\w+\(", source)
        or re.search(r"\b\w*figure\w*\(", source)
        or re.search(r"\bglue\([^)]*\bfig\w*\b", source)
    )


def _lead_in(children):
    """The text token of the bold run-in title a paragraph starts with ("**Check.**"), or None."""
    lead = [c for c in children if c.type != "text" or c.content][:3]
    kinds = [c.type for c in lead]
    if kinds == ["strong_open", "text", "strong_close"] and _FINISHED.search(lead[1].content):
        return lead[1]
    return None


@dataclass
class _Pending:
    """A paragraph's last sentence, unfinished: it may go on after a display equation."""

    line: int
    text: str
    math: bool = False  # a display equation came after it


class _Walker:
    """Walks markdown-it's tokens of a page and fills in a :class:`Report`."""

    def __init__(self, report: Report, names: tuple[str, ...]):
        self.report = report
        self.gated = False  # inside a gated exercise or solution
        self.pending: _Pending | None = None
        alternatives = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
        self.experiment = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)") if names else None

    def figure(self) -> None:
        if self.report.words_before_figure is None:
            self.report.words_before_figure = self.report.words

    def blocks(self, tokens, offset: int) -> None:
        """Running prose of a list of block tokens; ``offset`` is the line of their first line."""
        skip_until = None  # the closing token type of a container left out (footnotes)
        heading = False
        for i, token in enumerate(tokens):
            line = offset + (token.map[0] if token.map else 0)
            display_math = token.type in _MATH_BLOCKS or token.info.startswith("{math}")
            if display_math and self.pending:
                self.pending.math = True
            elif token.type not in ("paragraph_open", "paragraph_close", "inline"):
                self.flush()
            if skip_until:
                skip_until = None if token.type == skip_until else skip_until
                continue
            if token.type in ("fence", "colon_fence") and token.info.startswith("{"):
                self.directive(token, line)
            elif self.gated:
                continue
            elif token.type == "footnote_block_open":
                skip_until = "footnote_block_close"
            elif token.type in ("math_block_label", "amsmath"):
                if token.type == "math_block_label" or r"\label" in token.content:
                    self.report.equations += 1
            elif token.type == "heading_open":
                heading = True
            elif token.type == "inline":
                after_paragraph = i > 0 and tokens[i - 1].type == "paragraph_open"
                self.inline(token, line, sentences=after_paragraph and not heading)
                heading = False
        self.flush()

    def record(self, line: int, sentence: str) -> None:
        found = Found(line, sentence)
        self.report.sentences.append(found)
        self.report.words += len(sentence.split())
        if count_numbers(sentence) >= MANY_NUMBERS:
            self.report.numeric.append(found)

    def flush(self) -> None:  # record the unfinished sentence held back, if any
        if self.pending:
            self.record(self.pending.line, self.pending.text)
            self.pending = None

    def directive(self, token, line: int) -> None:
        name, _, argument = token.info[1:].partition("}")
        argument = argument.strip()
        options, body, n_options = _options(token.content)
        if _GATED_START.match(name):
            self.gated = True
        elif name in ("exercise-end", "solution-end"):
            self.gated = False
        if self.gated or name in _EXERCISES or name in _ASIDE or "dropdown" in str(options.get("class", "")):
            return
        if name == "code-cell":
            if _makes_figure(body, options):
                self.figure()
        elif name == "math":
            self.report.equations += "label" in options
        elif name in _FIGURE_DIRECTIVES:
            self.figure()
        elif name not in _NOT_PROSE:
            if name in _DERIVES:
                self.report.derives = True
            title = argument.lower()
            if name == "prf:example" or title.startswith(("worked example", "example")):
                self.figure()
            self.names(argument, line)
            self.blocks(_MD.parse(body), line + 1 + n_options)

    def inline(self, token, line: int, sentences: bool) -> None:
        """One inline token: a paragraph's sentences, or (headings, table cells) only its names."""
        plain, visible, autolink, at = [], [], False, line
        children = token.children or []
        lead_in = _lead_in(children)  # a title, not a sentence
        if sentences and lead_in and lead_in.content.lower().startswith("worked example"):
            self.figure()
        for child in children:
            kind = child.type
            if kind == "text" and not autolink:
                plain.append("" if child is lead_in else child.content)
                visible.append(child.content)
            elif kind in ("softbreak", "hardbreak"):
                plain.append("\n")
                visible.append("\n")
                at += 1
            elif kind.startswith("math_inline"):
                plain.append(MATH)
            elif kind == "code_inline":
                plain.append(CODE)
                visible.append(f" {child.content} ")
                self.report.functions += [Found(at, call) for call in _FUNCTION_CALL.findall(child.content)]
            elif kind == "myst_role":
                role = child.meta.get("name", "")
                if role in _NUMBER_ROLES:
                    plain.append(NUM)
                elif role in _FUNCTION_ROLES:
                    plain.append(CODE)
                    self.report.functions.append(Found(at, child.content.lstrip("~")))
                else:
                    plain.append(REF)
            elif kind == "link_open":
                autolink = child.markup == "autolink"
            elif kind == "link_close":
                autolink = False
        self.names("".join(visible), line)
        if not sentences:
            return
        text = "".join(plain)
        flat, cursor = text.replace("\n", " "), 0
        pending, self.pending, prefix = self.pending, None, ""
        if pending and pending.math and not flat.lstrip()[:1].isupper():
            # the sentence goes on after a display equation: "Take $$...$$ with ..."
            prefix = f"{pending.text} {MATH} "
            text, flat = prefix + text, prefix + flat
        elif pending:
            self.record(pending.line, pending.text)
        sentences = split_sentences(flat)
        for k, sentence in enumerate(sentences):
            cursor = flat.find(sentence, cursor)
            at = pending.line if cursor < len(prefix) else line + text[len(prefix) : cursor].count("\n")
            if k == len(sentences) - 1 and not _FINISHED.search(sentence):
                self.pending = _Pending(at, sentence)
            else:
                self.record(at, sentence)

    def names(self, text: str, line: int) -> None:
        """Experiment, file and function names in visible text (prose and inline code)."""
        report = self.report
        for n, segment in enumerate(text.split("\n")):
            if self.experiment:
                report.experiments += [Found(line + n, m) for m in self.experiment.findall(segment)]
            files = set(_FILE.findall(segment))
            files |= {m.group(0) for m in _PATH.finditer(segment) if m.group(1) in _TOP_FOLDERS}
            report.files += [Found(line + n, f) for f in sorted(files)]
            report.functions += [Found(line + n, f) for f in _ATTNLAB_PATH.findall(segment)]


def _table(reports: list[Report]) -> str:
    head = (
        "| page | sentences | with ≥3 numbers | experiment names | file names | function names "
        "| own display equations | first figure at | targets missed |"
    )
    rows = [head, "|" + "---|" * 9]
    for r in reports:
        figure = "none" if r.first_figure is None else f"{r.first_figure:.0%}"
        equations = f"{r.equations}" + (" (derives)" if r.derives else "")
        held = {"chapter": len(failures(r)), "overview": len(failures(r)), "other": "not held"}[r.kind]
        rows.append(
            f"| {_name(r.path)} | {len(r.sentences)} | {r.numeric_share:.1%} | {len(r.experiments)} "
            f"| {len(r.files)} | {len(r.functions)} | {equations} | {figure} | {held} |"
        )
    return "\n".join(rows)


def _name(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(BOOK).with_suffix("")) if path.is_relative_to(BOOK) else str(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="pages to measure (default: every page)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list the sentences and names found")
    kinds = ("chapter", "overview", "other")
    parser.add_argument("--kind", choices=kinds, help="hold every page as this kind (default: by folder)")
    args = parser.parse_args(argv)
    paths = args.files or chapter_paths()
    reports = [check(p, args.kind) for p in paths]
    print(_table(reports))
    for r in reports:
        missed = failures(r)
        if missed or args.verbose:
            print(f"\n{_name(r.path)}: " + ("; ".join(missed) if missed else "meets the targets"))
        if args.verbose:
            found = {
                "numbers": r.numeric,
                "experiment": r.experiments,
                "file": r.files,
                "function": r.functions,
            }
            for label, f in sorted(((k, f) for k, fs in found.items() for f in fs), key=lambda x: x[1].line):
                print(f"  line {f.line}: [{label}] {f.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
