"""Two small fixes for Jupyter Book 1's HTML, so that pages load with a clean browser console.

- sphinx-thebe and sphinx-togglebutton register their inline scripts twice (once with the file
  name ``None``, once with ``""``), and a page that declares ``const THEBE_JS_URL`` twice logs a
  SyntaxError. Scripts with the same file and attributes are kept once.
- pydata-sphinx-theme logs "invalid theme mode" when no default colour mode is set.
"""


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


def setup(app):
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
