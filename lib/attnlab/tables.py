"""Results as real tables: a pandas DataFrame shown as one HTML table in the book's style.

:func:`table` formats every float to three significant figures, adds ratio columns (ours over the
paper's, say) right after their denominator, and flags the rows whose ratio falls outside a band
with a word in a ``flag`` column *and* a shaded row (not by colour alone)::

    from attnlab import tables
    tables.table(df, ratios={"ours / paper": ("ours", "paper")}, band=("ours / paper", 0.9, 1.1),
                 caption="Test error against the paper's Table 1")

The returned :class:`Table` shows as HTML in a notebook and in the book (``text/html``), as
plain aligned text elsewhere, and keeps the computed frame in ``.frame`` for assertions.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Mapping

import numpy as np
import pandas as pd

#: Word written in the ``flag`` column of a row whose ratio is outside the band.
OUTLIER = "outside"
#: Background of an outlier row: Okabe–Ito orange, light.
SHADE = "#f5deb3"


def sig(x, digits: int = 3) -> str:
    """``x`` to ``digits`` significant figures, in plain notation between 1e-3 and 1e5.

    Integers are written in full; NaN is written as an en dash; booleans and text are unchanged.
    """
    if isinstance(digits, bool) or not isinstance(digits, numbers.Integral) or digits < 1:
        raise ValueError(f"digits must be an integer >= 1, got {digits!r}")
    if x is None or isinstance(x, (bool, np.bool_, str)):
        return "–" if x is None else str(x)
    if isinstance(x, numbers.Integral):
        return str(int(x))
    if not isinstance(x, numbers.Real):
        return str(x)
    x = float(x)
    if math.isnan(x):
        return "–"
    if math.isinf(x) or x == 0:
        return "0" if x == 0 else ("∞" if x > 0 else "−∞")
    exponent = math.floor(math.log10(abs(float(f"{x:.{digits - 1}e}"))))
    if -3 <= exponent < 5:
        return f"{x:.{max(digits - 1 - exponent, 0)}f}".replace("-", "−")
    return f"{x:.{digits - 1}e}".replace("-", "−")


class Table:
    """A formatted table: ``frame`` holds the numbers, ``text`` the cells as shown."""

    def __init__(self, frame: pd.DataFrame, text: pd.DataFrame, outliers: np.ndarray, caption: str | None):
        self.frame = frame
        self.text = text
        self.outliers = outliers
        self.caption = caption

    def _repr_html_(self) -> str:
        head = "".join(f'<th scope="col">{html.escape(str(c))}</th>' for c in self.text.columns)
        index_name = html.escape(str(self.text.index.name or ""))
        rows = []
        for (label, cells), outlier in zip(self.text.iterrows(), self.outliers, strict=True):
            css = f' class="attnlab-outlier" style="background: {SHADE}"' if outlier else ""
            body = "".join(f"<td>{html.escape(str(v))}</td>" for v in cells)
            rows.append(f'<tr{css}><th scope="row">{html.escape(str(label))}</th>{body}</tr>')
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (
            '<table class="table attnlab-table">'
            f"{caption}<thead><tr><th>{index_name}</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
        )

    def __repr__(self) -> str:
        text = self.text.to_string()
        return f"{self.caption}\n{text}" if self.caption else text


def table(
    df: pd.DataFrame,
    *,
    ratios: Mapping[str, tuple[str, str]] | None = None,
    band: tuple[str, float, float] | None = None,
    digits: int = 3,
    caption: str | None = None,
) -> Table:
    """Format ``df`` as one table (see the module's docstring).

    ``ratios`` maps a new column's name to ``(numerator, denominator)`` column names; the new
    column is placed right after the denominator. ``band=(column, low, high)`` flags every row
    whose ``column`` is outside ``[low, high]`` (or NaN) as an outlier.
    """
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    frame = df.copy()
    for name, pair in (ratios or {}).items():
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(c in frame.columns for c in pair)):
            raise ValueError(
                f"ratios[{name!r}] must be a (numerator, denominator) pair of columns of df, got {pair!r}"
            )
        if name in frame.columns:
            raise ValueError(f"ratios names a new column, but {name!r} is already a column of df")
        values = frame[pair[0]].astype(float) / frame[pair[1]].astype(float)
        frame.insert(frame.columns.get_loc(pair[1]) + 1, name, values)
    outliers = np.zeros(len(frame), dtype=bool)
    if band is not None:
        if not (isinstance(band, tuple) and len(band) == 3 and band[0] in frame.columns):
            raise ValueError(f"band must be (column, low, high) with a column of the table, got {band!r}")
        column, low, high = band
        if not (isinstance(low, numbers.Real) and isinstance(high, numbers.Real) and low <= high):
            raise ValueError(f"band must have real low <= high, got low={low!r}, high={high!r}")
        values = frame[column].astype(float).to_numpy()
        outliers = ~((values >= low) & (values <= high))
        frame["flag"] = np.where(outliers, OUTLIER, "")
    text = frame.map(lambda v: sig(v, digits))
    return Table(frame, text, outliers, caption)
