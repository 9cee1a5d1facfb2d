"""Tests of attnlab.theory.implicit_gd (Thm 4.1, Lemmas 4.3 and 4.4 of paper C)."""

import pytest
import torch

from attnlab.models import LinearTransformer, gd_construction
from attnlab.tasks.icl_regression import build_tokens, sample_regression
from attnlab.theory.implicit_gd import (
    data_statistics,
    implicit_state,
    implicit_tokens,
    implicit_weights,
    layer_statistics,
    momentum_form,
    one_layer_optimum,
    verify_one_layer_optimum,
)

D, N = 4, 9


@pytest.fixture
def batch():
    return sample_regression(12, d=D, n=N, noise="uniform:2", generator=5, dtype="float64")


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize(
    ("param", "mode", "heads", "scale"),
    [("full", "pq", 3, 0.04), ("diag", "pq", 2, 0.15), ("diag", "omega", 1, 0.01), ("gdpp", "pq", 2, 0.15)],
)
def test_theorem_4_1_tokens_and_prediction(batch, param, mode, heads, scale):
    model = LinearTransformer(D, 3, heads, param, diag_mode=mode, init_scale=scale, seed=4, dtype="float64")
    state = implicit_state(model, batch.X, batch.y)
    assert state["w"].shape == (4, 12, D) and state["M"].shape == (4, 12, D, D)
    hidden = torch.stack(model.hidden_states(build_tokens(batch.X, batch.y, batch.x_query)))
    assert rel(implicit_tokens(state, batch.X, batch.y, batch.x_query), hidden) < 1e-10
    pred = model.predict(batch.X, batch.y, batch.x_query)
    w = implicit_weights(model, batch.X, batch.y)
    assert rel((w[-1] * batch.x_query).sum(-1), pred) < 1e-10


def test_float32_model_is_checked_in_float64(batch):
    model = LinearTransformer(D, 2, 1, "full", init_scale=0.05, seed=0)
    w = implicit_weights(model, batch.X, batch.y)
    assert w.dtype == torch.float64
    assert next(model.parameters()).dtype == torch.float32  # the model itself is untouched


def test_gd_layers_give_gd_weights(batch):
    eta = 0.03
    w_l = implicit_weights(gd_construction(D, 3, eta), batch.X, batch.y)
    Sigma, alpha, _ = data_statistics(batch.X, batch.y)
    w = torch.zeros(12, D, dtype=torch.float64)
    for step in range(4):
        torch.testing.assert_close(w_l[step], w)
        w = w + eta * (alpha - torch.einsum("bij,bj->bi", Sigma, w))


def test_layer_statistics_match_the_tokens(batch):
    Sigma, alpha, lam = data_statistics(batch.X, batch.y)
    g = torch.Generator().manual_seed(0)
    M = torch.randn(12, D, D, generator=g, dtype=torch.float64)
    u = torch.randn(12, D, generator=g, dtype=torch.float64)
    a = torch.randn(12, generator=g, dtype=torch.float64)
    w = torch.randn(12, D, generator=g, dtype=torch.float64)
    x_l = torch.einsum("bij,bnj->bni", M, batch.X) + batch.y[:, :, None] * u[:, None, :]
    y_l = a[:, None] * batch.y - torch.einsum("bnj,bj->bn", batch.X, w)
    S, al, la = layer_statistics(Sigma, alpha, lam, M, u, a, w)
    torch.testing.assert_close(S, x_l.transpose(1, 2) @ x_l)
    torch.testing.assert_close(al, torch.einsum("bn,bni->bi", y_l, x_l))
    torch.testing.assert_close(la, (y_l**2).sum(1))


@pytest.mark.parametrize(("param", "mode"), [("diag", "pq"), ("diag", "omega"), ("gdpp", "omega")])
def test_lemma_4_4_momentum_form(batch, param, mode):
    model = LinearTransformer(
        D, 4, 2, param, diag_mode=mode, init_scale=0.15 if mode == "pq" else 0.01, seed=7, dtype="float64"
    )
    mf = momentum_form(model, batch.X, batch.y)
    assert rel(mf["u_next"], mf["u"][1:]) < 1e-10 or mf["u"].abs().max() == 0
    assert rel(mf["w_next"], mf["w"][1:]) < 1e-10
    assert mf["Lambda"].shape == (4, 12, D, D) and mf["s"].shape == (4, 12)
    # w* is the OLS solution and rho its residual energy.
    resid = batch.y - torch.einsum("bnd,bd->bn", batch.X, mf["w_star"])
    torch.testing.assert_close(mf["rho"], (resid**2).sum(1))


def test_lemma_4_4_uses_the_momentum_term(batch):
    """A layer with omega_xy only, then one with omega_yx only: u carries information into w."""
    model = LinearTransformer(D, 2, 1, "diag", diag_mode="omega", dtype="float64")
    with torch.no_grad():
        model.omega.copy_(torch.tensor([[0.0, 0.01, 0.0, 0.0], [0.0, 0.0, -0.02, 0.0]]))
    mf = momentum_form(model, batch.X, batch.y)
    assert mf["u"][1].abs().max() > 0
    assert mf["Phi"][1].abs().max() > 0
    assert rel(mf["w_next"], mf["w"][1:]) < 1e-10


def test_one_layer_optimum_by_monte_carlo():
    best = one_layer_optimum(10, 20)
    assert best["eta"] == pytest.approx(1 / 31)
    assert best["half_mse"] == pytest.approx((10 - 200 / 31) / 2)
    b = sample_regression(100_000, generator=0, dtype="float64")
    alpha = torch.einsum("bn,bnd->bd", b.y, b.X)
    loss = 0.5 * ((best["eta"] * (alpha * b.x_query).sum(-1) - b.target) ** 2)
    assert abs(loss.mean().item() - best["half_mse"]) < 4 * loss.std().item() / 100_000**0.5
    assert one_layer_optimum(10, 20, 3.0)["eta"] == pytest.approx(1 / 34)
    assert "Correct" in verify_one_layer_optimum(1 / 31, (10 - 200 / 31) / 2, d=10, n=20)
    with pytest.raises(AssertionError, match="eta"):
        verify_one_layer_optimum(1 / 30, (10 - 200 / 31) / 2, d=10, n=20)
    with pytest.raises(AssertionError, match="half_mse"):
        verify_one_layer_optimum(1 / 31, 10 - 200 / 31, d=10, n=20)


def test_bad_input(batch):
    model = LinearTransformer(D, 2, 1, "full", dtype="float64")
    with pytest.raises(ValueError, match="model"):
        implicit_state(torch.nn.Linear(2, 2), batch.X, batch.y)
    with pytest.raises(ValueError, match="X"):
        implicit_weights(model, batch.X[:, :, :3], batch.y)
    with pytest.raises(ValueError, match="y"):
        implicit_weights(model, batch.X, batch.y[:, :3])
    with pytest.raises(ValueError, match="X"):
        implicit_weights(model, batch.X.numpy(), batch.y)
    with pytest.raises(ValueError, match="param"):
        momentum_form(model, batch.X, batch.y)
    diag = LinearTransformer(D, 2, 1, "diag", dtype="float64")
    with pytest.raises(ValueError, match="n >= d"):
        momentum_form(diag, batch.X[:, :2], batch.y[:, :2])
    with pytest.raises(ValueError, match="mean_sigma2"):
        one_layer_optimum(10, 20, -1.0)
    with pytest.raises(ValueError, match="n"):
        one_layer_optimum(10, 0)


def test_layer_counts_for_gd_and_gdpp():
    from attnlab.models import gdpp_schedule
    from attnlab.theory.implicit_gd import (
        gd_error_bound,
        gd_layers_needed,
        gdpp_layers_needed,
        verify_gdpp_layers,
    )

    assert gd_error_bound(3, 3.0) == pytest.approx(0.125)
    assert gd_layers_needed(3.0, 0.125) == 3 and gd_layers_needed(3.0, 0.124) == 4
    for kappa in (10.0, 1e4):
        L = gdpp_layers_needed(kappa, 1e-8)
        assert gdpp_schedule(L, 1 / kappa, 1.0)["eps"] <= 1e-8 < gdpp_schedule(L - 1, 1 / kappa, 1.0)["eps"]
    # log(kappa) growth for GD++, linear growth for GD.
    assert gdpp_layers_needed(1e8, 1e-8) - gdpp_layers_needed(1e4, 1e-8) < 13
    assert gd_layers_needed(1e4, 1e-8) > 90_000
    assert "Correct" in verify_gdpp_layers(gdpp_layers_needed(1e4, 1e-6), kappa=1e4, eps=1e-6)
    with pytest.raises(AssertionError, match="not enough"):
        verify_gdpp_layers(3, kappa=1e4, eps=1e-6)
    with pytest.raises(AssertionError, match="fewer"):
        verify_gdpp_layers(40, kappa=1e4, eps=1e-6)
    with pytest.raises(ValueError, match="kappa"):
        gd_error_bound(2, 0.5)
    with pytest.raises(ValueError, match="eps"):
        gdpp_layers_needed(10.0, 0.0)
    with pytest.raises(ValueError, match="max_layers"):
        gdpp_layers_needed(10.0, 1e-30, max_layers=5)


def _diag_step(omegas, Sigma, alpha, lam, M, u, a, w):
    """The DIAG recursion written out (the solution of chapter 02's exercise)."""
    xx, xy, yx, yy = omegas
    Sig_l, alpha_l, lam_l = layer_statistics(Sigma, alpha, lam, M, u, a, w)
    IA = torch.eye(M.shape[-1], dtype=M.dtype) + xx * Sig_l
    b, c, delta = xy * alpha_l, yx * alpha_l, yy * lam_l
    return (
        IA @ M - b[:, :, None] * w[:, None, :],
        torch.einsum("bij,bj->bi", IA, u) + a[:, None] * b,
        (1 + delta) * a + (c * u).sum(-1),
        (1 + delta)[:, None] * w - torch.einsum("bji,bj->bi", M, c),
    )


def test_verify_diag_step_right_and_wrong():
    from attnlab.theory.implicit_gd import verify_diag_step

    assert "Correct" in verify_diag_step(_diag_step)
    assert "Correct" in verify_diag_step(_diag_step, d=2, n=5, n_layers=2, seed=3)

    def wrong_sign(omegas, Sigma, alpha, lam, M, u, a, w):  # w + M^T c instead of w - M^T c
        M1, u1, a1, w1 = _diag_step(omegas, Sigma, alpha, lam, M, u, a, w)
        c = omegas[2] * layer_statistics(Sigma, alpha, lam, M, u, a, w)[1]
        return M1, u1, a1, w1 + 2 * torch.einsum("bji,bj->bi", M, c)

    def data_statistics_instead(omegas, Sigma, alpha, lam, M, u, a, w):  # forgets the current tokens
        eye, zero = torch.eye(M.shape[-1], dtype=M.dtype).expand_as(M), torch.zeros_like(u)
        return _diag_step(omegas, Sigma, alpha, lam, eye, zero, torch.ones_like(a), zero)

    with pytest.raises(AssertionError, match="w after layer 1"):
        verify_diag_step(wrong_sign)
    with pytest.raises(AssertionError, match="after layer 2"):
        verify_diag_step(data_statistics_instead)
    with pytest.raises(AssertionError, match="four quantities"):
        verify_diag_step(lambda *args: args[4])
    with pytest.raises(ValueError, match="step"):
        verify_diag_step(3.0)


def test_verify_two_step_step_right_and_wrong():
    from attnlab.tasks.icl_regression import sample_regression
    from attnlab.theory.implicit_gd import verify_two_step_step

    # the exercise's answer, by Monte Carlo: 0.05 (1 - 1e-3 lambda) averaged over prompts
    for s in (0.0, 5.0):
        b = sample_regression(5000, 10, 20, noise=f"fixed:{s}", generator=3, dtype="float64")
        mc = float((0.05 * (1 - 1e-3 * (b.y**2).sum(1))).mean())
        assert "Correct" in verify_two_step_step(mc, sigma=s)
    assert "Correct" in verify_two_step_step(0.05 * (1 - 1e-3 * 20 * 14), sigma=2.0)
    with pytest.raises(AssertionError, match="wrong sign"):
        verify_two_step_step(-0.015, sigma=5.0)
    with pytest.raises(AssertionError, match="mean step"):  # the noise forgotten in lambda
        verify_two_step_step(0.05 * (1 - 1e-3 * 20 * 10), sigma=5.0)
    with pytest.raises(ValueError, match="sigma"):
        verify_two_step_step(0.04, sigma=-1.0)
