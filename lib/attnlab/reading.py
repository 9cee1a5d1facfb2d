"""Reading time of the book's chapters, counted from their sources (the reading-group guide).

A chapter's words are those of its MyST source, code cells included, as ``wc -w`` counts them.
A chapter finds its own source with :func:`book_dir`, from the folder it runs in (``book/...``
in the build, a converted copy inside the repository under nbval)::

    minutes(words(book_dir() / "linear-nn/gradient-flow.md"))
"""

from __future__ import annotations

from pathlib import Path

#: Reading speed for technical text, in words a minute.
WORDS_PER_MINUTE = 150


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


def words(path) -> int:
    """Words of the chapter at ``path``, code included, as ``wc -w`` counts them."""
    if not Path(path).is_file():
        raise ValueError(f"path must be a chapter's source file, got {path}")
    return len(Path(path).read_text().split())


def minutes(n_words: int) -> float:
    """Reading time in minutes of ``n_words`` words at :data:`WORDS_PER_MINUTE`."""
    return n_words / WORDS_PER_MINUTE
