"""Small fixes and additions to Jupyter Book 1's HTML.

- sphinx-togglebutton registers its inline scripts twice (once with the file name ``None``,
  once with ``""``; sphinx-thebe did too, and a page that declared ``const THEBE_JS_URL`` twice
  logged a SyntaxError). Scripts with the same file and attributes are kept once.
- pydata-sphinx-theme logs "invalid theme mode" when no default colour mode is set.
- Every chapter's download menu offers its executed ``.ipynb``, with the outputs of this build
  (sphinx-book-theme only copies it when a launch button is configured, and the book has none;
  myst-nb, when it takes a chapter's outputs from its cache, writes the notebook it read, without
  them, so :func:`_write_executed_notebook` writes it again with them). Each entry's label says
  what it is: ".ipynb (executed, with outputs)" or, should a notebook have none, ".ipynb (no
  outputs)"; ".md (source, no outputs)". A page without code cells offers only its ``.md``. The
  menu also links to "run it locally: make lab" (the execution page says how).
- sphinx-thebe (live code, which the book does not use: ``launch_buttons.thebe`` is off) is
  loaded by Jupyter Book whatever the configuration; its handlers and stylesheet are removed, so
  that no page ships its scripts, its stylesheet or its configuration.
- The execution table says "passed"/"failed" in words, not with emoji that need an emoji font.
- The role ``exec-time``, given docnames separated by spaces, writes the summed execution time
  of those chapters in minutes, as measured by this very build (the reading-group guide's
  session timings).
- Bibliography entries are labelled by author and year ("Cui et al. 2024"), like the citations,
  and an arXiv identifier written as ``note = {arXiv:NNNN.NNNNN}`` becomes a link.
- ``_ext/static/attnlab.css``: the tables of ``attnlab.tables``, and print (wrapped code, no
  navigation, figures kept whole); ``_ext/static/favicon.svg`` is the favicon.
- The single-page builder (``make pdf``) can write every node the HTML builder can.
- The chapters are executed on every core before they are read (``_ext/parallel_execution.py``).
- Every page's footer says the version, the build date and the commit (``_ext/build_info.py``).
- Every figure of every chapter gets the book's style: the kernels inherit ``MATPLOTLIBRC``
  pointing to ``lib/attnlab/attnlab.mplstyle`` (the Makefile sets it too, for nbval and
  ``make lab``).
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
from pathlib import Path

from docutils import nodes
from myst_nb.ext import execution_tables
from myst_nb.sphinx_ import NbMetadataCollector
from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxRole

ROOT = Path(__file__).resolve().parent.parent
#: The page whose section "Run it locally" every chapter's download menu links to.
EXECUTION_PAGE = "book/execution"
LOGGER = logging.getLogger(__name__)
os.environ.setdefault("MATPLOTLIBRC", str(ROOT / "lib" / "attnlab" / "attnlab.mplstyle"))

execution_tables._key2transform["succeeded"] = lambda ok: "passed" if ok is True else "failed"


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {}) or {}
        key = (getattr(script, "filename", script) or "", tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique
    context["default_mode"] = context.get("default_mode") or "light"


def _write_executed_notebook(app, doctree):
    """Write ``jupyter_execute/<doc>.ipynb`` again, with the outputs myst-nb took from its cache.

    myst-nb (1.4, execution mode "cache") writes that file from the notebook it read, before the
    cached outputs are merged into a copy; the copy is what it renders. A notebook that is not in
    the cache (myst-nb executed it itself, which writes its outputs in place) is left as it is.
    """
    import nbformat
    from jupyter_cache import get_cache

    env = app.env
    nb_config = getattr(env, "mystnb_config", None)
    if nb_config is None or nb_config.execution_mode != "cache" or not nb_config.output_folder:
        return
    path = Path(nb_config.output_folder, *f"{env.docname}.ipynb".split("/"))
    if not path.exists():
        return
    notebook = nbformat.read(path, as_version=4)
    if not any(cell.cell_type == "code" for cell in notebook.cells):
        return
    cache = get_cache(nb_config.execution_cache_path or ".jupyter_cache")
    try:
        _, executed = cache.merge_match_into_notebook(notebook)
    except KeyError:
        return
    nbformat.write(executed, path)


def _code_cells(path: Path) -> tuple[int, int]:
    """``(code cells, code cells with outputs)`` of the notebook at ``path``."""
    import nbformat

    cells = [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
    return len(cells), sum(1 for cell in cells if cell.get("outputs"))


def _offer_notebook(app, pagename, templatename, context, doctree):
    """Copy the executed notebook next to the page's sources, for the download menu."""
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if "kernelspec" not in app.env.metadata.get(pagename, {}) or not executed.exists():
        return
    code, with_outputs = _code_cells(executed)
    if code == 0:
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(executed, target)
    context["ipynb_source"] = f"{pagename}.ipynb"
    context["attnlab_ipynb_outputs"] = with_outputs


#: The download menu's labels and tooltips: the notebook with and without outputs, and the source.
IPYNB_EXECUTED = (".ipynb (executed, with outputs)", "The notebook as this build ran it, with its outputs")
IPYNB_BARE = (".ipynb (no outputs)", "The notebook, without outputs: run it to see them")
MD_SOURCE = (".md (source, no outputs)", "The chapter's source (MyST markdown), without outputs")


def _download_menu(app, pagename, templatename, context, doctree):
    """Say in the download menu what each file is, and add "run it locally"."""
    # On the execution page itself Sphinx's pathto gives "#", which made the link "##run-it-locally".
    page = "" if pagename == EXECUTION_PAGE else context["pathto"](EXECUTION_PAGE)
    for button in context.get("header_buttons", []):
        if button.get("label") != "download-buttons":
            continue
        for entry in button.get("buttons", []):
            if entry.get("label") == "download-notebook-button":
                entry["text"], entry["tooltip"] = (
                    IPYNB_EXECUTED if context.get("attnlab_ipynb_outputs") else IPYNB_BARE
                )
            elif entry.get("label") == "download-source-button" and str(entry.get("url", "")).endswith(".md"):
                entry["text"], entry["tooltip"] = MD_SOURCE
        if "ipynb_source" in context:
            button["buttons"].append(
                {
                    "type": "link",
                    "url": f"{page}#run-it-locally",
                    "text": "run it locally: make lab",
                    "icon": "fas fa-terminal",
                    "tooltip": "Run this chapter on your machine",
                    "label": "run-locally-button",
                }
            )


def _drop_thebe(app):
    """Remove sphinx-thebe's event handlers and stylesheet (live code is off)."""
    for listeners in app.events.listeners.values():
        listeners[:] = [
            listener
            for listener in listeners
            if not getattr(listener.handler, "__module__", "").startswith("sphinx_thebe")
        ]
    app.registry.css_files[:] = [css for css in app.registry.css_files if "thebe" not in css[0]]


class ExecTimeNode(nodes.Inline, nodes.TextElement):
    """Placeholder for a summed execution time, filled in once every chapter has run."""


class ExecTimeRole(SphinxRole):
    def run(self):
        names = [posixpath.normpath(n) for n in self.text.split()]
        if not names:
            return [], [self.inliner.reporter.error("exec-time needs at least one docname", line=self.lineno)]
        # Marked like a page with an execution table, so that myst-nb rewrites it after execution.
        NbMetadataCollector.set_doc_data(self.env, self.env.docname, execution_tables.METADATA_KEY, True)
        return [ExecTimeNode(self.text, "", docnames=names)], []


class ExecTimeTransform(SphinxPostTransform):
    default_priority = 8

    def run(self, **kwargs):
        data = NbMetadataCollector.get_doc_data(self.env)
        for node in list(self.document.findall(ExecTimeNode)):
            total, missing = 0.0, []
            for name in node["docnames"]:
                runtime = (data.get(name, {}).get("exec_data") or {}).get("runtime")
                if runtime is None:
                    missing.append(name)
                else:
                    total += runtime
            if missing:
                LOGGER.warning(f"exec-time: not executed in this build: {', '.join(missing)}", location=node)
                node.replace_self(nodes.Text("(not executed in this build)"))
                continue
            node.replace_self(nodes.Text(f"{total / 60:.1f} min"))


class AuthorYearLabels(BaseLabelStyle):
    """Labels such as "Cui et al. 2024", with a letter added when two would be equal."""

    def format_labels(self, sorted_entries):
        labels = []
        for entry in sorted_entries:
            people = entry.persons.get("author") or entry.persons.get("editor") or []
            surnames = [" ".join(p.last_names) for p in people] or [entry.fields.get("title", "")[:20]]
            surnames = [re.sub(r"[{}\\'~\"]", "", name) for name in surnames]
            if len(surnames) == 1:
                who = surnames[0]
            elif len(surnames) == 2:
                who = f"{surnames[0]} and {surnames[1]}"
            else:
                who = f"{surnames[0]} et al."
            labels.append(f"{who} {entry.fields.get('year', '')}".strip())
        for label in set(labels):
            if labels.count(label) > 1:
                suffixes = iter("abcdefghijklmnopqrstuvwxyz")
                labels = [f"{x}{next(suffixes)}" if x == label else x for x in labels]
        yield from labels


class AuthorYearStyle(PlainStyle):
    """pybtex's plain style with author–year labels and linked arXiv identifiers."""

    default_label_style = "attnlab_author_year"

    def format_entry(self, label, entry, bib_data=None):
        note = entry.fields.get("note", "")
        match = re.fullmatch(r"\s*arXiv:\s*(\d{4}\.\d{4,5}(v\d+)?)\s*", note)
        if match and "eprint" not in entry.fields:
            key = entry.key
            entry = entry.__class__(entry.type, fields=dict(entry.fields), persons=entry.persons)
            entry.key = key
            entry.fields["eprint"] = match.group(1)
            del entry.fields["note"]
        return super().format_entry(label, entry, bib_data=bib_data)


register_plugin("pybtex.style.labels", "attnlab_author_year", AuthorYearLabels)
register_plugin("pybtex.style.formatting", "attnlab_author_year", AuthorYearStyle)


def _html_handlers_for_singlehtml(app):
    """Give the single-page builder (``make pdf``) every HTML visitor the ``html`` builder has.

    Sphinx falls back to the ``html`` visitors only for a builder that has none of its own, and
    some extensions register a few for ``singlehtml``; myst-nb's hidden-cell node then has none.
    """
    handlers = app.registry.translation_handlers
    if app.builder.name != "html" and app.builder.format == "html":
        own = handlers.setdefault(app.builder.name, {})
        for node, visitors in handlers.get("html", {}).items():
            own.setdefault(node, visitors)


def _add_static(app):
    app.config.html_static_path.append(str(ROOT / "_ext" / "static"))


def setup(app):
    app.setup_extension("parallel_execution")
    app.setup_extension("build_info")
    _drop_thebe(app)
    app.connect("doctree-read", _write_executed_notebook)
    app.connect("builder-inited", _html_handlers_for_singlehtml)
    app.connect("builder-inited", _add_static)
    app.add_css_file("attnlab.css")
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("html-page-context", _offer_notebook, priority=400)
    app.connect("html-page-context", _download_menu, priority=600)
    app.add_node(ExecTimeNode)
    app.add_role("exec-time", ExecTimeRole())
    app.add_post_transform(ExecTimeTransform)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
