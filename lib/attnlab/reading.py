"""Reading time of the book's chapters, counted from their sources (the reading-group guide).

A chapter's words are those of its MyST source, code cells included, as ``wc -w`` counts them.
A section is a heading (``##`` and deeper, outside code fences) with everything below it up to
the next heading of the same or a higher level; :func:`words` can leave named sections out (the
guide's optional sections), and refuses a name that is not a heading of the chapter, so that a
renamed section cannot silently drop out of the count::

    words("book/linear-nn/gradient-flow.md", optional=["Exponential convergence"])

A chapter finds its own source with :func:`book_dir`, from the folder it runs in (``book/...``
in the build, a converted copy inside the repository under nbval).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

#: Reading speed for technical text, in words a minute.
WORDS_PER_MINUTE = 150

_HEADING = re.compile(r"^(#{2,6})\s+(.*?)\s*$")
_FENCE = re.compile(r"^(`{3,}|~{3,})")


def book_dir(start=None) -> Path:
    """The ``book/`` folder of the repository that holds ``start`` (default: the working folder).

    The repository is the nearest folder, ``start`` or above, with a ``_toc.yml``; raises
    ``ValueError`` if there is none.
    """
    here = Path.cwd() if start is None else Path(start)
    here = here.resolve()
    root = next((p for p in (here, *here.parents) if (p / "_toc.yml").is_file()), None)
    if root is None:
        raise ValueError(f"start must be inside the book's repository (a folder with _toc.yml), got {here}")
    return root / "book"


def sections(text: str) -> list[tuple[str, int, int, int]]:
    """The sections of a MyST source: ``(title, level, first line, end line)``, in order.

    ``end line`` is the index of the first line after the section (its subsections included).
    """
    lines = text.splitlines()
    heads, fence = [], None
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if m and fence is None:
            fence = m.group(1)
        elif m and fence is not None and line.strip() == fence[0] * len(line.strip()):
            if len(line.strip()) >= len(fence):
                fence = None
        elif fence is None and (h := _HEADING.match(line)):
            heads.append((h.group(2), len(h.group(1)), i))
    out = []
    for k, (title, level, start) in enumerate(heads):
        end = next((s for _, lv, s in heads[k + 1 :] if lv <= level), len(lines))
        out.append((title, level, start, end))
    return out


def subsections(path, parent: str) -> list[str]:
    """The titles of the sections one level below the section titled ``parent``, in order.

    Raises ``ValueError`` if ``parent`` is not exactly one section heading of the chapter.
    """
    found = sections(Path(path).read_text())
    hits = [s for s in found if s[0] == parent]
    if len(hits) != 1:
        raise ValueError(
            f"parent must be the title of one section of {Path(path).name}, got {parent!r} "
            f"({len(hits)} sections have it)"
        )
    _, level, start, end = hits[0]
    return [t for t, lv, s, _ in found if start < s < end and lv == level + 1]


def words(path, optional: Iterable[str] = ()) -> int:
    """Words of the chapter at ``path`` (code included), without the sections titled ``optional``.

    Raises ``ValueError`` if a title in ``optional`` is not exactly one section heading of the
    chapter (missing, or ambiguous).
    """
    text = Path(path).read_text()
    if isinstance(optional, str):
        raise ValueError(f"optional must be a list of section titles, got {optional!r}")
    optional = list(optional)
    if not all(isinstance(t, str) for t in optional):
        raise ValueError(f"optional must be a list of section titles, got {optional!r}")
    found = sections(text)
    titles = [title for title, *_ in found]
    bad = [t for t in optional if titles.count(t) != 1]
    if bad:
        raise ValueError(
            f"optional must name sections that {Path(path).name} has exactly once, got {bad}; "
            f"its sections are {titles}"
        )
    skip = set()
    for title, _, start, end in found:
        if title in optional:
            skip.update(range(start, end))
    lines = text.splitlines()
    return sum(len(line.split()) for i, line in enumerate(lines) if i not in skip)


def minutes(n_words: int) -> float:
    """Reading time in minutes of ``n_words`` words at :data:`WORDS_PER_MINUTE`."""
    return n_words / WORDS_PER_MINUTE
