import math

import numpy as np
import pandas as pd
import pytest

from attnlab import tables


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (0.008612, "0.00861"),
        (0.009, "0.00900"),
        (1.0, "1.00"),
        (12.345, "12.3"),
        (99.96, "100"),
        (12345.6, "12346"),
        (123456.0, "1.23e+05"),
        (-0.0004567, "−4.57e−04"),
        (7, "7"),
        (np.int64(12), "12"),
        (float("nan"), "–"),
        (0.0, "0"),
        ("GD++", "GD++"),
    ],
)
def test_sig_three_figures(x, text):
    assert tables.sig(x) == text


def test_sig_digits_and_bad_digits():
    assert tables.sig(math.pi, 5) == "3.1416"
    with pytest.raises(ValueError, match="digits must be an integer >= 1"):
        tables.sig(1.0, 0)


def test_table_ratios_band_and_html():
    df = pd.DataFrame(
        {"ours": [0.0086, 0.020, 0.5], "paper": [0.009, 0.010, 0.5], "n": [10, 20, 30]},
        index=pd.Index(["GD", "GD++", "FULL"], name="model"),
    )
    ratio = {"ours / paper": ("ours", "paper")}
    t = tables.table(df, ratios=ratio, band=("ours / paper", 0.9, 1.1), caption="c")
    assert list(t.frame.columns) == ["ours", "paper", "ours / paper", "n", "flag"]
    np.testing.assert_allclose(t.frame["ours / paper"], [0.0086 / 0.009, 2.0, 1.0], rtol=1e-12)
    assert list(t.outliers) == [False, True, False]
    assert list(t.frame["flag"]) == ["", tables.OUTLIER, ""]
    assert t.text.loc["GD", "ours / paper"] == "0.956" and t.text.loc["FULL", "n"] == "30"
    page = t._repr_html_()
    assert page.count("<tr") == 4 and page.count('class="attnlab-outlier"') == 1
    assert "<caption>c</caption>" in page and '<th scope="row">GD++</th>' in page
    assert "0.00860" in repr(t) and "<" not in repr(t)
    assert df.columns.tolist() == ["ours", "paper", "n"], "the caller's frame is not changed"


def test_table_bad_arguments():
    df = pd.DataFrame({"a": [1.0], "b": [2.0]})
    with pytest.raises(ValueError, match="df must be a pandas DataFrame"):
        tables.table([1, 2])
    with pytest.raises(ValueError, match=r"ratios\['r'\] must be a \(numerator, denominator\) pair"):
        tables.table(df, ratios={"r": ("a", "missing")})
    with pytest.raises(ValueError, match="already a column"):
        tables.table(df, ratios={"a": ("a", "b")})
    with pytest.raises(ValueError, match="band must be"):
        tables.table(df, band=("missing", 0, 1))
    with pytest.raises(ValueError, match="band must have real low <= high"):
        tables.table(df, band=("a", 2, 1))


def test_a_value_on_the_bands_edge_is_inside_it():
    df = pd.DataFrame({"r": [0.9, 1.1, 1.0, 0.8999, 1.1001]})
    t = tables.table(df, band=("r", 0.9, 1.1))
    assert list(t.outliers) == [False, False, False, True, True]
