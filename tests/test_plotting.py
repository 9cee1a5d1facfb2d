import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnlab import plotting  # noqa: E402


def test_use_style_sets_rcparams():
    plotting.use_style()
    assert matplotlib.rcParams["axes.spines.top"] is False


def test_loss_curve_is_log_scale():
    fig, ax = plt.subplots()
    plotting.loss_curve(ax, np.arange(5), np.exp(-np.arange(5.0)), label="gd")
    assert ax.get_yscale() == "log"
    assert len(ax.lines) == 1
    plt.close(fig)


def test_attention_map_accepts_torch_and_labels():
    fig, ax = plt.subplots()
    im = plotting.attention_map(ax, torch.eye(3), labels=["a", "b", "c"])
    assert im.get_array().shape == (3, 3)
    plt.close(fig)


def test_theory_vs_experiment_draws_both():
    fig, ax = plt.subplots()
    x = np.linspace(0, 1, 5)
    plotting.theory_vs_experiment(ax, x, x**2, x, x**2 + 0.01, 0.02 * np.ones(5), label="semantic")
    assert len(ax.lines) >= 1 and len(ax.containers) == 1
    plt.close(fig)


def test_new_axes_when_none():
    ax = plotting.loss_curve(None, [0, 1], [1.0, 0.5])
    assert ax.get_yscale() == "log"
    plt.close(ax.figure)


def test_bad_input():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="losses must be positive"):
        plotting.loss_curve(ax, [0, 1], [1.0, 0.0])
    with pytest.raises(ValueError, match="steps and losses must be 1-D of equal length"):
        plotting.loss_curve(ax, [0, 1, 2], [1.0, 0.5])
    with pytest.raises(ValueError, match="A must have shape"):
        plotting.attention_map(ax, np.ones(3))
    with pytest.raises(ValueError, match="labels must have one entry per row"):
        plotting.attention_map(ax, np.eye(3), labels=["a"])
    with pytest.raises(ValueError, match="x_theory and y_theory must have equal shapes"):
        plotting.theory_vs_experiment(ax, [0, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="y_mean must be given"):
        plotting.theory_vs_experiment(ax, [0, 1], [0, 1], x_exp=[0, 1])
    with pytest.raises(ValueError, match="ax must be a matplotlib Axes"):
        plotting.loss_curve("ax", [0], [1.0])
    with pytest.raises(ValueError, match="A must be array-like"):
        plotting.attention_map(ax, [["a", "b"]])
    plt.close(fig)


def test_style_file_is_the_style():
    plotting.use_style()
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()
    assert (
        cycle["color"][0].upper() == "#0072B2"
        and len(set(zip(cycle["color"], cycle["linestyle"], strict=True))) == 8
    )
    assert len(set(cycle["linestyle"])) == 4, "lines must differ by line style as well as by colour"
    sizes = ["font.size", "axes.labelsize", "legend.fontsize", "xtick.labelsize", "ytick.labelsize"]
    assert min(float(matplotlib.rcParams[k]) for k in sizes) >= 9
    assert matplotlib.rcParams["figure.figsize"][0] <= plotting.MAX_WIDTH


def test_styles_differ_without_colour():
    pairs = [(s["linestyle"], s["marker"]) for name, s in plotting.STYLES.items() if name != "theory"]
    for group in (["gd", "gdpp", "diag", "full"], ["semantic", "positional", "linear"]):
        looks = {(plotting.STYLES[g]["linestyle"], plotting.STYLES[g]["marker"]) for g in group}
        assert len(looks) == len(group), group
    assert len(pairs) == len(plotting.STYLES) - 1


def test_wide_figures_fit_the_text_column():
    plotting.use_style()
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2), sharey=True)
    assert axes.shape == (4,) and fig.get_size_inches()[0] == plotting.MAX_WIDTH
    rows = {round(ax.get_position().y0, 3) for ax in axes}
    assert len(rows) == 2, "four panels in a row become two rows"
    plt.close(fig)
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    assert axes.shape == (3,) and tuple(fig.get_size_inches()) == (plotting.MAX_WIDTH, 3.2)
    assert len({round(ax.get_position().y0, 3) for ax in axes}) == 1
    plt.close(fig)
    fig, axes = plt.subplots(1, 5, figsize=(12, 3))
    assert axes.shape == (5,) and len(fig.axes) == 5
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 3))
    assert tuple(fig.get_size_inches()) == (5, 3)
    plt.close(fig)


def test_any_figure_wider_than_the_column_is_narrowed():
    plotting.use_style()
    for extra in (0.01, 0.5, 0.99, 3.0):
        fig = plt.figure(figsize=(plotting.MAX_WIDTH + extra, 3))
        assert tuple(fig.get_size_inches()) == (plotting.MAX_WIDTH, 3), extra
        plt.close(fig)


def test_neighbouring_series_differ_by_line_style():
    """A figure's first four series (and the next four) can be told apart without colour."""
    plotting.use_style()
    styles = matplotlib.rcParams["axes.prop_cycle"].by_key()["linestyle"]
    assert len(set(styles[:4])) == 4 and len(set(styles[4:8])) == 4, styles
