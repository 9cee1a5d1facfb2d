"""One figure style for the whole book, and the plots every part needs.

- :func:`use_style` applies the style of ``attnlab.mplstyle`` (every helper calls it, so a chapter
  need not; the book build, nbval and ``make lab`` also name the file in ``MATPLOTLIBRC``, so that
  every figure gets it): Okabe–Ito colours each paired with a line style, fonts of at least 9 pt.
- :func:`fit_text_column`, run on every new pyplot figure (the style's ``figure.hooks``), keeps a
  figure within the text column: at most :data:`MAX_WIDTH` inches wide, and a row of four or
  more panels is laid out as a grid of two rows.
- :func:`sharp_inline_figures`, the style's other ``figure.hooks`` entry, has a notebook show its
  figures as PNGs of :data:`INLINE_DPI` dots per inch, at the size of ``figure.dpi`` (96: one
  figure inch is one CSS inch), so that the book's and the PDF's images stay sharp.
- :data:`STYLES`: colour, line style and marker of each categorical distinction of the book
  (``ax.plot(x, y, **plotting.STYLES["gdpp"])``), so that no two differ by colour alone.
- :func:`loss_curve`: a loss against steps or time on a log scale.
- :func:`attention_map`: a heatmap of an attention matrix with labelled tokens.
- :func:`theory_vs_experiment`: a theory line with experiment means and error bars.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

from attnlab.validation import check_shape

#: The style file (a matplotlibrc), the one source of the book's figure style.
STYLE_FILE = Path(__file__).with_name("attnlab.mplstyle")

#: Widest figure in inches: the book's text column (672 CSS px at 96 dpi is 7 in; 6.8 leaves room
#: for a label that the tight bounding box of the inline backend adds outside the figure).
MAX_WIDTH = 6.8

#: Dots per inch of a figure's PNG in a notebook: twice ``figure.dpi`` (96), IPython's "retina"
#: format, which tells the page to show the image at half its pixel size.
INLINE_DPI = 192

#: The IPython shells whose figure format :func:`sharp_inline_figures` has set (once each, so that
#: a reader's own ``set_matplotlib_formats`` later in a notebook is kept).
_SHARP_SHELLS: set[int] = set()

#: Okabe–Ito colours (colour-blind safe).
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
}

#: Each categorical distinction of the book: its colour, line style and marker.
STYLES = {
    "theory": {"color": OKABE_ITO["black"], "linestyle": "-", "marker": None},
    "semantic": {"color": OKABE_ITO["blue"], "linestyle": "-", "marker": "o"},
    "positional": {"color": OKABE_ITO["vermillion"], "linestyle": "--", "marker": "s"},
    "linear": {"color": OKABE_ITO["bluish green"], "linestyle": "-.", "marker": "^"},
    "gd": {"color": OKABE_ITO["reddish purple"], "linestyle": "-", "marker": "o"},
    "gdpp": {"color": OKABE_ITO["orange"], "linestyle": "--", "marker": "s"},
    "diag": {"color": OKABE_ITO["sky blue"], "linestyle": "-.", "marker": "^"},
    "full": {"color": OKABE_ITO["blue"], "linestyle": ":", "marker": "D"},
    "baseline": {"color": "#999999", "linestyle": ":", "marker": "x"},
}

#: The colour of each distinction (``STYLES[name]["color"]``).
COLORS = {name: style["color"] for name, style in STYLES.items()}

#: The book's style as matplotlib rcParams (read from :data:`STYLE_FILE`).
STYLE = dict(mpl.rc_params_from_file(str(STYLE_FILE), use_default_template=False))


def use_style() -> None:
    """Apply the book's matplotlib style."""
    mpl.rcParams.update(STYLE)


def fit_text_column(fig) -> None:
    """Keep ``fig`` within the text column (a ``figure.hooks`` entry of the book's style).

    A figure wider than :data:`MAX_WIDTH` is narrowed to it. If it is then filled by
    ``fig.subplots`` (as ``plt.subplots`` does) with one row of four or more panels, the panels
    are laid out in two rows instead; the axes come back as the same flat array, in order.
    """
    width, height = fig.get_size_inches()
    if width <= MAX_WIDTH:
        return
    fig.set_size_inches(MAX_WIDTH, height)
    subplots = fig.subplots

    def grid_subplots(nrows=1, ncols=1, *, squeeze=True, gridspec_kw=None, **kwargs):
        reflow = nrows == 1 and ncols >= 4 and squeeze and not (gridspec_kw or {}).get("width_ratios")
        if not reflow:
            return subplots(nrows, ncols, squeeze=squeeze, gridspec_kw=gridspec_kw, **kwargs)
        columns = math.ceil(ncols / 2)
        axes = subplots(2, columns, squeeze=False, gridspec_kw=gridspec_kw, **kwargs).ravel()
        for extra in axes[ncols:]:
            extra.remove()
        fig.set_size_inches(MAX_WIDTH, min(2 * height, 1.1 * MAX_WIDTH))
        return axes[:ncols]

    fig.subplots = grid_subplots


def sharp_inline_figures(fig) -> None:
    """Show a notebook's figures at :data:`INLINE_DPI` (a ``figure.hooks`` entry of the book's style).

    In an IPython kernel, the first figure sets the inline figure format to "retina": PNGs of
    twice ``figure.dpi`` whose width and height metadata keep their size on the page. Elsewhere
    (a script, ``savefig``, which uses ``savefig.dpi``) it does nothing.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or id(shell) in _SHARP_SHELLS or not hasattr(shell, "kernel"):
        return
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("retina")
    _SHARP_SHELLS.add(id(shell))


def _as_numpy(name: str, x) -> np.ndarray:
    try:
        arr = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be array-like of numbers") from err
    return arr


def _axes(ax):
    if ax is None:
        use_style()
        _, ax = plt.subplots()
    elif not isinstance(ax, mpl.axes.Axes):
        raise ValueError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
    return ax


def loss_curve(ax, steps, losses, *, label: str | None = None, color=None, logx: bool = False, **kwargs):
    """Plot ``losses`` against ``steps`` with a logarithmic loss axis; returns the axes.

    Non-positive losses cannot be shown on a log scale and raise ``ValueError``.
    """
    ax = _axes(ax)
    steps = _as_numpy("steps", steps)
    losses = _as_numpy("losses", losses)
    if steps.shape != losses.shape or steps.ndim != 1:
        raise ValueError(
            f"steps and losses must be 1-D of equal length, got {steps.shape} and {losses.shape}"
        )
    if np.any(losses <= 0):
        raise ValueError("losses must be positive to be shown on a log scale")
    ax.plot(steps, losses, label=label, color=color, **kwargs)
    ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(ax.get_xlabel() or "step")
    ax.set_ylabel(ax.get_ylabel() or "loss")
    if label is not None:
        ax.legend()
    return ax


def attention_map(
    ax,
    A,
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    cmap: str = "viridis",
    colorbar: bool = True,
    vmin=None,
    vmax=None,
):
    """Show an attention matrix ``A`` ``[n_query, n_key]`` as a heatmap; returns the image."""
    ax = _axes(ax)
    A = _as_numpy("A", A)
    check_shape("A", A, (None, None))
    if labels is not None:
        labels = list(labels)
        if len(labels) != A.shape[0] or A.shape[0] != A.shape[1]:
            raise ValueError(
                f"labels must have one entry per row of a square A ({A.shape[0]}), got {len(labels)}"
            )
    im = ax.imshow(A, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    ax.grid(False)
    if labels is not None:
        ax.set_xticks(range(len(labels)), labels)
        ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("key token")
    ax.set_ylabel("query token")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return im


def theory_vs_experiment(
    ax,
    x_theory,
    y_theory,
    x_exp=None,
    y_mean=None,
    y_err=None,
    *,
    label: str = "",
    color=None,
    marker: str = "o",
    linestyle: str = "-",
):
    """Draw a theory line and, optionally, experiment means with error bars; returns the axes."""
    ax = _axes(ax)
    x_theory = _as_numpy("x_theory", x_theory)
    y_theory = _as_numpy("y_theory", y_theory)
    if x_theory.shape != y_theory.shape:
        raise ValueError(
            f"x_theory and y_theory must have equal shapes, got {x_theory.shape} and {y_theory.shape}"
        )
    ax.plot(x_theory, y_theory, linestyle, color=color, label=f"{label} theory".strip())
    if x_exp is not None:
        if y_mean is None:
            raise ValueError("y_mean must be given with x_exp")
        x_exp = _as_numpy("x_exp", x_exp)
        y_mean = _as_numpy("y_mean", y_mean)
        err = None if y_err is None else _as_numpy("y_err", y_err)
        if x_exp.shape != y_mean.shape or (err is not None and err.shape != y_mean.shape):
            raise ValueError("x_exp, y_mean and y_err must have equal shapes")
        ax.errorbar(
            x_exp,
            y_mean,
            yerr=err,
            fmt=marker,
            color=color,
            ms=4,
            capsize=2,
            label=f"{label} experiment".strip(),
        )
    if label:
        ax.legend()
    return ax
