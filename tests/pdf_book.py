"""The printed book's PDF structure: bookmarks with math as text, and the contents' page numbers.

Chromium prints the single page (``tests/print_pdf.py``) without an outline of its own: its
outline, made from the tagged text, doubled titles, ran words together at line breaks and lost
every formula. Here, with pikepdf (qpdf), the printed file gets

- one bookmark for every part, chapter, section and subsection, titled with the heading's text
  and each formula written as text (:func:`tex_to_text`: ``\\gamma^{-1}`` as ``γ⁻¹``), each
  leading to the heading's place (the named destination Chromium writes for every link target);
- the page numbers of the contents, printed by Chromium in a second, short pass over the
  contents' pages only, laid over the first pass's contents pages (:func:`finish`).

:func:`outline` and :func:`destinations` read a PDF back (the browser test checks both editions).
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

#: TeX commands written as text in a bookmark.
_SYMBOLS = {
    **{
        rf"\{name}": char
        for name, char in zip(
            "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi rho sigma tau "
            "upsilon phi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Phi Psi Omega".split(),
            "αβγδϵζηθικλμνξπρστυϕχψωΓΔΘΛΞΠΣΦΨΩ",
            strict=True,
        )
    },
    r"\varepsilon": "ε",
    r"\varphi": "φ",
    r"\vartheta": "ϑ",
    r"\perp": "⊥",
    r"\cdot": "·",
    r"\times": "×",
    r"\infty": "∞",
    r"\leq": "≤",
    r"\le": "≤",
    r"\geq": "≥",
    r"\ge": "≥",
    r"\neq": "≠",
    r"\ne": "≠",
    r"\approx": "≈",
    r"\sim": "∼",
    r"\to": "→",
    r"\in": "∈",
    r"\pm": "±",
    r"\top": "⊤",
    r"\partial": "∂",
    r"\nabla": "∇",
    r"\sum": "∑",
    r"\ell": "ℓ",
    r"\E": "𝔼",
    r"\R": "ℝ",
}
#: Operator names, written as words.
_OPERATORS = ("log", "exp", "min", "max", "arg", "sin", "cos", "tanh", "det", "Tr", "Diag", "sign")
_SUB = dict(zip("0123456789+-=()aehijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ", strict=True))
_SUP = dict(
    zip(
        "0123456789+-=()abcdefghijklmnoprstuvwxyz⊤",
        "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ᵃᵇᶜᵈᵉᶠᵍʰⁱʲᵏˡᵐⁿᵒᵖʳˢᵗᵘᵛʷˣʸᶻᵀ",
        strict=True,
    )
)
_ACCENTS = {"hat": "\u0302", "tilde": "\u0303", "bar": "\u0304", "dot": "\u0307", "vec": "\u20d7"}


def _group(tex: str, start: int) -> tuple[str, int]:
    """The argument at ``tex[start:]`` (a braced group, a command or one character) and its end."""
    while start < len(tex) and tex[start] == " ":
        start += 1
    if start >= len(tex):
        return "", start
    if tex[start] == "{":
        depth = 0
        for end in range(start, len(tex)):
            depth += {"{": 1, "}": -1}.get(tex[end], 0)
            if depth == 0:
                return tex[start + 1 : end], end + 1
        return tex[start + 1 :], len(tex)
    if tex[start] == "\\":
        match = re.match(r"\\([A-Za-z]+|.)", tex[start:])
        return match.group(0), start + match.end()
    return tex[start], start + 1


def _script(text: str, table: dict[str, str], mark: str) -> str:
    """``text`` as Unicode sub- or superscripts, or ``mark`` + text where a character has none."""
    if text and all(ch in table for ch in text):
        return "".join(table[ch] for ch in text)
    return f"{mark}{text}" if len(text) <= 1 or text.isalnum() else f"{mark}({text})"


def tex_to_text(tex: str) -> str:
    """A formula of a heading as plain text: ``l_{tf}`` → ``l_tf``, ``\\sigma^2`` → ``σ²``."""
    out, i = [], 0
    while i < len(tex):
        ch = tex[i]
        if ch in "_^":
            arg, i = _group(tex, i + 1)
            out.append(_script(tex_to_text(arg), _SUB if ch == "_" else _SUP, ch))
        elif ch == "{" or ch == "}":
            i += 1
        elif ch == "~":
            out.append(" ")
            i += 1
        elif ch == "\\":
            match = re.match(r"\\([A-Za-z]+|.)", tex[i:])
            command, name = match.group(0), match.group(1)
            i += match.end()
            if command in _SYMBOLS:
                out.append(_SYMBOLS[command])
            elif name in _OPERATORS:
                out.append(f" {name} ")
            elif name in ("operatorname", "mathrm", "text", "textrm", "mathit", "mathbf", "boldsymbol"):
                arg, i = _group(tex, i)
                out.append(tex_to_text(arg) if name != "operatorname" else f" {tex_to_text(arg)} ")
            elif name == "mathbb":
                arg, i = _group(tex, i)
                out.append({"E": "𝔼", "R": "ℝ", "N": "ℕ", "Z": "ℤ"}.get(arg, arg))
            elif name in _ACCENTS:
                arg, i = _group(tex, i)
                out.append(tex_to_text(arg) + _ACCENTS[name])
            elif name == "sqrt":
                arg, i = _group(tex, i)
                inner = tex_to_text(arg)
                out.append(f"√{inner}" if len(inner) <= 1 else f"√({inner})")
            elif name == "frac":
                top, i = _group(tex, i)
                bottom, i = _group(tex, i)
                top, bottom = tex_to_text(top), tex_to_text(bottom)
                wrap = lambda s: s if re.fullmatch(r"√?[\w.]+", s) else f"({s})"  # noqa: E731
                out.append(f"{wrap(top)}/{wrap(bottom)}")
            elif name in ("left", "right", "big", "Big", "bigl", "bigr", "Bigl", "Bigr"):
                pass
            elif name in (",", ";", ":", "quad", "qquad", " "):
                out.append(" ")
            elif name in ("!",):
                pass
            else:
                out.append(name)
        else:
            out.append(ch)
            i += 1
    text = re.sub(r"\s+", " ", "".join(out))
    text = re.sub(r"\b(" + "|".join(_OPERATORS) + r") \(", r"\1(", text)
    return unicodedata.normalize("NFC", re.sub(r"\( ", "(", text).strip())


def bookmark_title(text: str) -> str:
    """A heading's text, each ``\\(TeX\\)`` in it written as text, spaces normalised."""
    text = re.sub(r"\\\((.*?)\\\)", lambda m: tex_to_text(m.group(1)), text, flags=re.DOTALL)
    return re.sub(r"\s+", " ", text).strip()


def _dest_map(pdf) -> dict[str, object]:
    """The named destinations of an open pikepdf ``pdf``: ``{name without "/": destination}``."""
    found = {}
    if "/Dests" in pdf.Root:
        for key, value in pdf.Root.Dests.items():
            found[str(key).lstrip("/")] = value
    if "/Names" in pdf.Root and "/Dests" in pdf.Root.Names:
        import pikepdf

        for key, value in pikepdf.NameTree(pdf.Root.Names.Dests).items():
            found[str(key).lstrip("/")] = value
    return found


def destinations(pdf: Path) -> dict[str, int]:
    """The named destinations of ``pdf`` and their pages (1-based)."""
    import pikepdf

    with pikepdf.open(pdf) as doc:
        index = {page.obj.objgen: number for number, page in enumerate(doc.pages, start=1)}
        found = {}
        for name, dest in _dest_map(doc).items():
            if isinstance(dest, pikepdf.Dictionary) and "/D" in dest:
                dest = dest.D
            if isinstance(dest, pikepdf.Array) and len(dest) and dest[0].objgen in index:
                found[name] = index[dest[0].objgen]
        return found


def finish(
    printed: Path,
    numbers: Path,
    front_pages: int,
    entries: list[dict],
    out: Path,
    metadata: dict[str, str],
) -> None:
    """Write ``out``: ``printed`` with the page numbers of ``numbers`` laid over its first
    ``front_pages`` pages (the title page and the contents), and one bookmark per entry
    (``{id, depth, title}``, in order)."""
    import pikepdf

    with pikepdf.open(printed) as doc, pikepdf.open(numbers) as stamp:
        for number in range(front_pages):
            overlay = stamp.pages[number]
            if "/Annots" in overlay.obj:
                del overlay.obj["/Annots"]
            doc.pages[number].add_overlay(overlay)
        dests = _dest_map(doc)
        missing = [entry["id"] for entry in entries if entry["id"] not in dests]
        if missing:
            raise ValueError(f"no destination in {printed} for the headings {missing[:5]}")
        with doc.open_outline() as outline:
            outline.root.clear()
            parents: dict[int, pikepdf.OutlineItem] = {}
            for entry in entries:
                item = pikepdf.OutlineItem(bookmark_title(entry["title"]), pikepdf.Name("/" + entry["id"]))
                depth = entry["depth"]
                parent = next((parents[d] for d in range(depth - 1, -1, -1) if d in parents), None)
                (parent.children if parent is not None else outline.root).append(item)
                parents = {d: p for d, p in parents.items() if d < depth}
                parents[depth] = item
                item.is_closed = depth >= 1
        doc.Root.PageMode = pikepdf.Name.UseOutlines
        with doc.open_metadata(set_pikepdf_as_editor=False) as meta:
            for key, value in metadata.items():
                meta[key] = value
        doc.docinfo["/Title"] = metadata.get("dc:title", "")
        out.parent.mkdir(parents=True, exist_ok=True)
        doc.save(out)


def outline(pdf: Path) -> list[tuple[int, str, int | None]]:
    """The bookmarks of ``pdf`` in order: ``(depth, title, page)`` (page 1-based)."""
    import pikepdf

    found = []
    with pikepdf.open(pdf) as doc:
        index = {page.obj.objgen: number for number, page in enumerate(doc.pages, start=1)}
        dests = _dest_map(doc)

        def page_of(item):
            dest = item.destination
            if dest is None and item.action is not None and "/D" in item.action:
                dest = item.action.D
            if isinstance(dest, pikepdf.Name | pikepdf.String):
                dest = dests.get(str(dest).lstrip("/"))
            if isinstance(dest, pikepdf.Dictionary) and "/D" in dest:
                dest = dest.D
            if isinstance(dest, pikepdf.Array) and len(dest):
                return index.get(dest[0].objgen)
            return None

        def walk(items, depth):
            for item in items:
                found.append((depth, str(item.title), page_of(item)))
                walk(item.children, depth + 1)

        with doc.open_outline() as tree:
            walk(tree.root, 0)
    return found


def page_count(pdf: Path) -> int:
    import pikepdf

    with pikepdf.open(pdf) as doc:
        return len(doc.pages)
