"""One figure style for the whole book, and the plots every part needs.

- :func:`use_style` sets the style (called by every helper, so a chapter need not).
- :func:`loss_curve`: a loss against steps or time on a log scale.
- :func:`attention_map`: a heatmap of an attention matrix with labelled tokens.
- :func:`theory_vs_experiment`: a theory line with experiment means and error bars.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

from attnlab.validation import check_shape

#: Colours used consistently across the book (colour-blind safe, Okabe–Ito).
COLORS = {
    "theory": "#000000",
    "semantic": "#0072B2",
    "positional": "#D55E00",
    "linear": "#009E73",
    "gd": "#CC79A7",
    "gdpp": "#E69F00",
    "diag": "#56B4E9",
    "full": "#0072B2",
    "baseline": "#999999",
}

STYLE = {
    "figure.figsize": (6.0, 3.6),
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "lines.linewidth": 1.8,
    "image.cmap": "viridis",
}


def use_style() -> None:
    """Apply the book's matplotlib style."""
    mpl.rcParams.update(STYLE)


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
