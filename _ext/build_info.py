"""Which book is this: the version, the build date and the commit, on every page.

A reading group that meets weekly needs to tell which version of the book it reads. Every page's
footer (and, through the single page, the PDF's title page: ``tests/print_pdf.py``) says

    Version 0.2.0.dev0 · built 2026-12-04 from commit b6e033a · what changed

where the version is ``attnlab.__version__`` (read from ``lib/attnlab/__init__.py``, without
importing the library), the date is the day of the build in UTC (or of ``$SOURCE_DATE_EPOCH``,
for a reproducible build), and the commit is ``git rev-parse --short HEAD``; "with local changes"
is added when tracked files differ from it, and "unknown commit" is said where git or the
repository is missing. "what changed" links to the change list, ``book/changes.md``.

The footer's element carries the three values as ``data-`` attributes, which the PDF reads.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The page that lists what changed in each version.
CHANGES_PAGE = "book/changes"


def version(root: Path = ROOT) -> str:
    """``attnlab.__version__``, read from the library's ``__init__.py``."""
    text = (root / "lib" / "attnlab" / "__init__.py").read_text(encoding="utf8")
    match = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", text, flags=re.MULTILINE)
    if match is None:
        raise ValueError(f"no __version__ in {root / 'lib' / 'attnlab' / '__init__.py'}")
    return match.group(1)


def build_date() -> str:
    """The build's date (UTC, ISO), or that of ``$SOURCE_DATE_EPOCH`` when it is set."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    when = datetime.fromtimestamp(int(epoch), timezone.utc) if epoch.isdigit() else datetime.now(timezone.utc)
    return when.date().isoformat()


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit(root: Path = ROOT) -> str:
    """The short hash of ``HEAD``, "+ local changes" if tracked files differ; "unknown" without git."""
    head = _git(root, "rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    changed = _git(root, "status", "--porcelain", "--untracked-files=no")
    return f"{head} with local changes" if changed else head


def build_info(root: Path = ROOT) -> dict[str, str]:
    """``{"version", "date", "commit"}`` of this build."""
    return {"version": version(root), "date": build_date(), "commit": commit(root)}


def footer_html(info: dict[str, str], changes_url: str) -> str:
    """The footer line of a page; ``changes_url`` is the change list's URL from that page."""
    values = {key: html.escape(value, quote=True) for key, value in info.items()}
    commit_text = "an unknown commit" if info["commit"] == "unknown" else f"commit {values['commit']}"
    return (
        f'<p class="attnlab-build" data-version="{values["version"]}" data-date="{values["date"]}" '
        f'data-commit="{values["commit"]}">Version {values["version"]} · built {values["date"]} from '
        f'{commit_text} · <a href="{html.escape(changes_url, quote=True)}">what changed</a></p>'
    )


def _add_footer(app, pagename, templatename, context, doctree):
    info = app.env.attnlab_build_info if hasattr(app.env, "attnlab_build_info") else build_info()
    # On the change list itself Sphinx's pathto gives "#"; any other page gets a relative link.
    url = "#" if pagename == CHANGES_PAGE else context["pathto"](CHANGES_PAGE)
    context["theme_extra_footer"] = footer_html(info, url)


def _remember(app):
    app.env.attnlab_build_info = build_info()


def setup(app):
    app.connect("builder-inited", _remember)
    app.connect("html-page-context", _add_footer)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
