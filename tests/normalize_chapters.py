"""Rewrite every chapter in the exact style jupytext writes, so that saving it unchanged is a no-op.

JupyterLab opens a chapter's ``.md`` as a notebook through jupytext and, on save, writes it back
with ``jupytext.writes``. A chapter that is not already in that style is rewritten on its first
save (cell options reordered, YAML re-wrapped), so ``git diff`` shows changes nobody made.
``make normalize`` (``python tests/normalize_chapters.py``) rewrites every chapter once:

1. every multi-line string in a cell's options (a figure's ``caption``, an image's ``alt``) is
   folded into one line: single line breaks become spaces, which changes nothing in Markdown,
   and keeps the YAML readable (jupytext dumps a string with line breaks as one quoted string
   broken by blank lines; a one-line string is wrapped plainly);
2. the kernelspec is written as JupyterLab writes it on save (:data:`KERNELSPEC`: the name,
   display name and language of ipykernel's ``python3`` kernel, in that order);
3. every code cell is formatted by ruff's formatter at :data:`LINE_LENGTH` characters, the width
   of the book's text column (``make lint`` checks the chapters' code with ruff at that width);
4. the chapter is read and written by jupytext with the project's ``jupytext.toml``.

``--check`` only reports the chapters that would change (exit 1 if any). ``tests/test_chapters.py``
checks that every chapter is a fixed point once :data:`CHAPTERS_NORMALISED` is true.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
from convert_chapters import chapter_paths
from jupytext.config import load_jupytext_config

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"

#: Set to True in the commit that runs ``make normalize`` on the chapters: from then on the
#: round-trip tests (tests/test_chapters.py, tests/test_lab.py) run instead of being skipped.
CHAPTERS_NORMALISED = True

#: The kernelspec JupyterLab writes into a chapter it saves (from ipykernel's kernel.json).
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

#: The chapters' code width: what fits the text column of the web book and of the PDF.
LINE_LENGTH = 76

_LINE_BREAK = re.compile(r"(?<!\n)\n(?!\n)")


def _fold(value):
    if isinstance(value, str):
        return _LINE_BREAK.sub(" ", value.strip("\n"))
    if isinstance(value, dict):
        return {k: _fold(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fold(v) for v in value]
    return value


def _ruff() -> str:
    here = Path(sys.executable).parent / "ruff"
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        raise RuntimeError("ruff is not installed (it comes with the project's test extra)")
    return found


def format_code(source: str) -> str:
    """``source`` (one code cell) as ruff's formatter writes it at :data:`LINE_LENGTH` characters."""
    if not source.strip():
        return source
    done = subprocess.run(
        [_ruff(), "format", "--line-length", str(LINE_LENGTH), "--stdin-filename", "cell.py", "-"],
        input=source,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return done.stdout.rstrip("\n")


def config():
    """The project's jupytext configuration (``jupytext.toml``), as JupyterLab's server reads it."""
    return load_jupytext_config(str(BOOK))


def write(nb) -> str:
    """``nb`` as jupytext writes a chapter (MyST Markdown, the project's configuration)."""
    return jupytext.writes(nb, fmt="md:myst", config=config())


def normalize(text: str) -> str:
    """The chapter ``text`` in jupytext's exact style, with cell options folded (see above)."""
    nb = jupytext.reads(text, fmt="md:myst")
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    for cell in nb.cells:
        cell.metadata = _fold(dict(cell.metadata))
        if cell.cell_type == "code":
            cell.source = format_code(cell.source)
    return write(nb)


def chapters(book: Path = BOOK) -> list[Path]:
    """The chapters to normalise (JupyterLab's ``.ipynb_checkpoints`` copies are not chapters)."""
    return chapter_paths(book)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    changed = []
    for path in chapters():
        text = path.read_text()
        new = normalize(text)
        if new != text:
            changed.append(path.relative_to(ROOT))
            if not check:
                path.write_text(new)
    verb = "would change" if check else "rewrote"
    print(f"{verb} {len(changed)} of {len(chapters())} chapters" + "".join(f"\n  {p}" for p in changed))
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
