"""Tests of attnlab.models.LinearTransformer and the hand-set GD / GD++ weights (Part III)."""

import pytest
import torch

from attnlab.models import (
    PARAMETERISATIONS,
    DecayedLinearTransformer,
    LinearTransformer,
    fast_inputs,
    gd_construction,
    gdpp_construction,
    gdpp_schedule,
    one_step_gd,
)
from attnlab.tasks.icl_regression import (
    build_tokens,
    gram_inputs,
    half_mse_loss,
    sample_conditioned_regression,
    sample_regression,
)
from attnlab.train import train

D, N = 5, 12


@pytest.fixture
def batch():
    return sample_regression(16, d=D, n=N, noise="uniform:1", generator=0, dtype="float64")


def naive_forward(P, Q, Z):
    """Z <- Z + sum_k P_k Z M Z^T Q_k Z, one head at a time (reference for the einsum)."""
    n = Z.shape[2] - 1
    M = torch.diag(torch.tensor([1.0] * n + [0.0], dtype=Z.dtype))
    for layer in range(P.shape[0]):
        update = torch.zeros_like(Z)
        for k in range(P.shape[1]):
            update = update + P[layer, k] @ Z @ M @ Z.transpose(1, 2) @ Q[layer, k] @ Z
        Z = Z + update
    return Z


@pytest.mark.parametrize(("param", "mode"), [("full", "pq"), ("diag", "pq"), ("gdpp", "pq")])
def test_forward_matches_the_matrix_form(batch, param, mode):
    model = LinearTransformer(D, 3, 2, param, diag_mode=mode, init_scale=0.05, seed=1, dtype="float64")
    P, Q = model.layer_weights()
    Z = build_tokens(batch.X, batch.y, batch.x_query)
    torch.testing.assert_close(model(Z), naive_forward(P, Q, Z), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(model.predict(batch.X, batch.y, batch.x_query), -model(Z)[:, D, -1])


def test_omega_mode_matches_pq_mode(batch):
    pq = LinearTransformer(D, 2, 3, "diag", diag_mode="pq", init_scale=0.1, seed=2, dtype="float64")
    om = LinearTransformer(D, 2, 1, "diag", diag_mode="omega", dtype="float64")
    with torch.no_grad():
        om.omega.copy_(pq.omegas())
    torch.testing.assert_close(
        om.predict(batch.X, batch.y, batch.x_query), pq.predict(batch.X, batch.y, batch.x_query)
    )


def test_query_is_masked_out_of_keys_and_values(batch):
    model = LinearTransformer(D, 2, 2, "full", init_scale=0.05, seed=0, dtype="float64")
    Z1 = model(build_tokens(batch.X, batch.y, batch.x_query))
    Z2 = model(build_tokens(batch.X, batch.y, 3.0 * batch.x_query))
    torch.testing.assert_close(Z1[:, :, :N], Z2[:, :, :N])  # context tokens never see the query
    assert not torch.allclose(Z1[:, :, N], Z2[:, :, N])


@pytest.mark.parametrize("param", ["full", "diag", "gdpp"])
def test_one_step_gd_is_one_gd_step(batch, param):
    eta = 0.037
    model = one_step_gd(D, eta, param=param)
    alpha = torch.einsum("bn,bnd->bd", batch.y, batch.X)  # gradient step from w = 0
    expected = eta * (alpha * batch.x_query).sum(-1)
    got = model.predict(batch.X, batch.y, batch.x_query)
    assert (got - expected).abs().max().item() < 1e-12


@pytest.mark.parametrize("param", ["full", "diag"])
def test_gd_construction_is_several_gd_steps(batch, param):
    eta, L = 0.02, 4
    model = gd_construction(D, L, eta, param=param)
    w = torch.zeros(16, D, dtype=torch.float64)
    for _ in range(L):
        resid = batch.y - torch.einsum("bnd,bd->bn", batch.X, w)
        w = w + eta * torch.einsum("bn,bnd->bd", resid, batch.X)
    expected = (w * batch.x_query).sum(-1)
    got = model.predict(batch.X, batch.y, batch.x_query)
    assert (got - expected).abs().max().item() < 1e-12
    by_layer = model.predictions_by_layer(batch.X, batch.y, batch.x_query)
    assert by_layer.shape == (L + 1, 16)
    assert torch.all(by_layer[0] == 0)
    torch.testing.assert_close(by_layer[-1], got)


def test_gdpp_construction_meets_its_bound():
    b = sample_conditioned_regression(200, d=D, n=N, kappa=30.0, generator=3)
    scale = b.x_query.norm(dim=1) * b.w.norm(dim=1)
    for L in (1, 3, 6, 8):
        sched = gdpp_schedule(L, 1 / 30, 1.0)
        for mode in ("omega", "pq"):
            model = gdpp_construction(D, L, 1 / 30, 1.0, diag_mode=mode)
            err = ((model.predict(b.X, b.y, b.x_query) - b.target).abs() / scale).max().item()
            assert err <= sched["eps"] * (1 + 1e-9) + 1e-13
    # Quadratic convergence: the number of correct digits roughly doubles per layer.
    eps = [gdpp_schedule(L, 1 / 30, 1.0)["eps"] for L in (8, 9, 10)]
    assert 1.8 < torch.log(torch.tensor(eps[1])) / torch.log(torch.tensor(eps[0])) < 2.3
    assert 1.8 < torch.log(torch.tensor(eps[2])) / torch.log(torch.tensor(eps[1])) < 2.3


def test_gdpp_keeps_q_y_zero_when_trained():
    model = LinearTransformer(D, 2, 2, "gdpp", init_scale=0.05)
    train(
        model,
        half_mse_loss,
        lambda B, g: sample_regression(B, D, N, generator=g),
        optimizer="adam",
        lr=1e-2,
        steps=5,
        batch_size=32,
    )
    om = model.omegas()
    assert torch.all(om[:, 1] == 0) and torch.all(om[:, 3] == 0)
    assert torch.all(om[:, 0] != 0)


def test_training_reaches_the_one_step_optimum_scale():
    model = LinearTransformer(D, 1, 1, "diag", diag_mode="omega", seed=0)
    hist = train(
        model,
        half_mse_loss,
        lambda B, g: sample_regression(B, D, N, generator=g),
        optimizer="adam",
        lr=1e-2,
        steps=150,
        batch_size=128,
        seed=0,
    )
    assert hist.loss[-1] < 0.5 * hist.loss[0]
    # The best one-step-GD size is 1/(n+d+1): omega_yx should be near -1/18.
    assert abs(model.omegas()[0, 2].item() + 1 / (N + D + 1)) < 0.2 / (N + D + 1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d": 0}, "d"),
        ({"n_layers": 0}, "n_layers"),
        ({"n_heads": 1.0}, "n_heads"),
        ({"param": "diagonal"}, "param"),
        ({"diag_mode": "w"}, "diag_mode"),
        ({"init_scale": -1.0}, "init_scale"),
        ({"dtype": "int32"}, "dtype"),
        ({"seed": -3}, "seed"),
    ],
)
def test_bad_constructor_input(kwargs, match):
    args = {"d": 3, "n_layers": 2, "n_heads": 1, "param": "full"}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        LinearTransformer(**args)


def test_bad_call_input(batch):
    full = LinearTransformer(D, 2, 1, "full", dtype="float64")
    omega = LinearTransformer(D, 2, 1, "diag", diag_mode="omega", dtype="float64")
    with pytest.raises(ValueError, match="omegas"):
        full.omegas()
    with pytest.raises(ValueError, match="omega"):
        omega.layer_weights()
    with pytest.raises(ValueError, match="Z"):
        full(torch.zeros(2, D, N))
    with pytest.raises(ValueError, match="layer"):
        full.layer_operator(2, torch.zeros(1, D + 1, D + 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="x_query"):
        full.predict(batch.X, batch.y, batch.x_query[:, :2])
    with pytest.raises(ValueError, match="dtype"):
        full.predict(batch.X.float(), batch.y.float(), batch.x_query.float())
    with pytest.raises(ValueError, match="forms"):
        fast_inputs(batch.X, batch.y, batch.x_query, {"tokens"})
    with pytest.raises(ValueError, match="'gram' form"):
        full.predict_from(fast_inputs(batch.X, batch.y, batch.x_query, {"spectral"}))
    with pytest.raises(ValueError, match="spectral form needs param='gdpp'"):
        full.spectral_forward(*fast_inputs(batch.X, batch.y, batch.x_query, {"spectral"})["spectral"])
    with pytest.raises(ValueError, match="eta"):
        one_step_gd(D, float("nan"))
    with pytest.raises(ValueError, match="nu"):
        gdpp_schedule(3, 1.0, 0.5)
    with pytest.raises(ValueError, match="mu"):
        gdpp_construction(D, 3, 0.0, 1.0)
    with pytest.raises(ValueError, match="n_layers"):
        gdpp_schedule(0, 0.1, 1.0)


KEYS = sorted(PARAMETERISATIONS)  # every (param, diag_mode)


def _model(key, batch_shape=(), seed=3, scale=0.2):
    param, mode = key
    return LinearTransformer(
        D, 3, 2, param, diag_mode=mode, batch_shape=batch_shape, init_scale=scale, seed=seed, dtype="float64"
    )


@pytest.mark.parametrize("key", KEYS)
def test_token_gram_and_spectral_forms_agree(batch, key):
    """The three forms of the forward pass give the same predictions, after every layer (float64)."""
    for batch_shape in ((), (2, 3)):
        model = _model(key, batch_shape)
        token = model.predictions_by_layer(batch.X, batch.y, batch.x_query)  # [*models, L+1, B]
        G, e_t = gram_inputs(batch.X, batch.y, batch.x_query)
        gram = model.gram_forward(G, e_t, return_layers=True)
        assert token.shape == (*batch_shape, 4, 16) and gram.shape == token.shape
        assert token[..., -1, :].abs().min() > 1e-3  # generic, not a trivial zero
        torch.testing.assert_close(gram, token, rtol=1e-12, atol=1e-12)
        fast = model.predict_fast(batch.X, batch.y, batch.x_query, return_layers=True)
        torch.testing.assert_close(fast, token, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(model.predict(batch.X, batch.y, batch.x_query), token[..., -1, :])


@pytest.mark.parametrize("key", KEYS)
def test_a_batch_of_models_is_the_models_one_by_one(key):
    """Model (i, j) of a batch predicts as the single model with its weights, on its own data."""
    data = sample_regression(
        8, D, N, noise=["uniform:1", "fixed:2"], generator=4, dtype="float64"
    )  # [2, 8, ..]
    X, y, xq = (t[:, None] for t in (data.X, data.y, data.x_query))  # one data set per first models index
    model = _model(key, (2, 3))
    pred = model.predict_fast(X, y, xq)
    assert pred.shape == (2, 3, 8)
    packed = model.packed_weights()
    for i in range(2):
        for j in range(3):
            one = LinearTransformer.from_packed(packed[i, j], D, key[0], diag_mode=key[1])
            torch.testing.assert_close(
                one.predict(data.X[i], data.y[i], data.x_query[i]), pred[i, j], rtol=1e-12, atol=0
            )


def test_seeds_give_each_model_its_own_initialisation():
    a = LinearTransformer(D, 2, 2, "diag", batch_shape=(2, 3), seed=[5, 6, 7])
    b = LinearTransformer(D, 2, 2, "diag", batch_shape=(2, 1), seed=[6])
    torch.testing.assert_close(a.p[:, 1:2], b.p, rtol=0, atol=0)  # seed 6 does not depend on its neighbours
    assert not torch.equal(a.p[:, 0], a.p[:, 1])
    c = LinearTransformer(D, 2, 2, "gdpp", batch_shape=(4,), init_scale=0.5, seed=1)
    assert torch.all(c.q[..., 1] == 0) and c.packed_weights().shape == (4, 2, 2, 3)
    with pytest.raises(ValueError, match="seed"):
        LinearTransformer(D, 2, 2, "diag", batch_shape=(2, 3), seed=[1, 2])
    with pytest.raises(ValueError, match="weights"):
        LinearTransformer.from_packed(torch.zeros(2, 2, 5), D, "diag")


def test_decayed_keys_token_form_equals_outer_product_form(batch):
    model = DecayedLinearTransformer(
        D, 2, 1, gamma_init=[0.7, 0.9, None], learn_decay=[True, False, False], batch_shape=(3,),
        init_scale=0.3, seed=2, dtype="float64",
    )  # fmt: skip
    token = model.predict(batch.X, batch.y, batch.x_query)
    fast = model.predict_fast(batch.X, batch.y, batch.x_query)
    torch.testing.assert_close(fast, token, rtol=1e-12, atol=1e-12)
    plain = LinearTransformer.from_packed(model.packed_weights()[2], D, "diag")  # gamma = sigmoid(30) ~ 1
    torch.testing.assert_close(token[2], plain.predict(batch.X, batch.y, batch.x_query), rtol=1e-9, atol=0)
    assert (token[0] - plain.predict(batch.X, batch.y, batch.x_query)).abs().max() > 1e-3
    token.sum().backward()
    assert model.decay_logit.grad[0].abs().min() > 0 and torch.all(model.decay_logit.grad[1:] == 0)


def test_gdpp_schedule_values():
    """Pinned values: gamma_l nu_l = 1/3, nu shrinks by 4/9, eta = 2/(mu + nu) at the last layer."""
    sched = gdpp_schedule(3, 0.1, 1.0)
    assert sched["gamma"][0] == pytest.approx(1 / 3, rel=1e-15)
    assert sched["gamma"][1] == pytest.approx(3 / 4, rel=1e-15)  # 1 / (3 * 4/9)
    mu1 = 0.1 * (1 - 0.1 / 3) ** 2
    mu2 = mu1 * (1 - 0.75 * mu1) ** 2
    assert sched["mu"] == pytest.approx([0.1, mu1, mu2], rel=1e-15)
    assert sched["nu"] == pytest.approx([1.0, 4 / 9, 16 / 81], rel=1e-15)
    assert sched["eta"] == pytest.approx(2 / (mu2 + 16 / 81), rel=1e-15)
    assert sched["eps"] == pytest.approx((16 / 81 - mu2) / (16 / 81 + mu2), rel=1e-14)


def test_gdpp_step_is_one_third_of_the_inverse_top_eigenvalue():
    """The step gamma of Thm 5.1 pinned by value at nu = 5/2 (gamma nu = 1/3, not 1/2): gamma_0 = 2/15,
    nu_1 = 4 nu / 9 = 10/9, gamma_1 = 3/10; the construction writes omega_xx = -gamma_l."""
    sched = gdpp_schedule(3, 0.25, 2.5)
    assert sched["gamma"] == pytest.approx([2 / 15, 3 / 10], rel=1e-15)
    assert sched["nu"][1] == pytest.approx(10 / 9, rel=1e-15)
    om = gdpp_construction(D, 3, 0.25, 2.5).omegas()
    assert om[:2, 0].tolist() == pytest.approx([-2 / 15, -3 / 10], rel=1e-15)
    assert om[2, 2].item() == pytest.approx(-sched["eta"], rel=1e-15)


def _gradients(model, G, e_t, ybar, data_grad):
    """Weight gradients of ``<ybar, readouts>`` through the hand-written backward (``data_grad=False``)
    or through autograd over the same Gram form (``data_grad=True``: ``G`` requires a gradient)."""
    G = G.clone().requires_grad_(data_grad)
    out = (model.gram_forward(G, e_t, return_layers=True) * ybar).sum()
    return torch.autograd.grad(out, list(model.parameters()))


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-12), ("float32", 1e-6)])
def test_hand_written_gram_backward_equals_autograd(key, dtype, rtol, kernel, monkeypatch):
    """The Gram form's hand-written backward gives autograd's weight gradients: several depths, heads,
    models batch shapes and seeds; generic weights (``T = I + K`` far from ``I``) and a generic
    upstream gradient on every layer's readout. Through the compiled kernel, and through the torch
    code that runs where the kernel is not built (``kernel=False``)."""
    from attnlab.models import gram_kernel

    if not kernel:
        monkeypatch.setattr(gram_kernel, "usable", lambda *args: False)
    param, mode = key
    for L, H, batch_shape, seed in [(1, 1, (), 0), (2, 2, (3,), 1), (4, 1, (2, 2), 2), (7, 2, (2,), 3)]:
        # the layer operators of order 0.1 to 1: T far from I, the readouts finite at depth 7
        scale = (0.04 if param == "full" else 0.06) / L**0.5 if mode == "pq" else 0.004 / L
        model = LinearTransformer(
            D, L, H, param, diag_mode=mode, batch_shape=batch_shape, init_scale=scale, seed=seed, dtype=dtype
        )
        data = sample_regression(32, D, N, noise="uniform:1", generator=seed, dtype=dtype)
        G, e_t = gram_inputs(data.X, data.y, data.x_query)
        ybar = torch.randn(
            *batch_shape, L + 1, 32, generator=torch.Generator().manual_seed(seed), dtype=G.dtype
        )
        hand = _gradients(model, G, e_t, ybar, data_grad=False)
        auto = _gradients(model, G, e_t, ybar, data_grad=True)
        K = model.layer_operator(L - 1, G).detach()  # on the input G: T is far from the identity
        assert 0.02 < float(K.abs().amax()) < 3, float(K.abs().amax())
        for h, a in zip(hand, auto, strict=True):
            assert torch.isfinite(a).all() and float(a.norm()) > 1e-3
            err = float((h - a).norm() / a.norm())
            assert err < rtol, (L, H, batch_shape, err)
    # the data get no gradient from the hand-written backward: autograd is used when they need one
    G.requires_grad_(True)
    model.gram_forward(G, e_t).sum().backward()
    assert G.grad is not None and G.grad.abs().max() > 0


def test_hand_written_backward_in_chunks_of_models():
    """Models x sequences beyond GRAM_CHUNK go through the backward a few models at a time: same gradients."""
    from attnlab.models.linear_transformer import GRAM_CHUNK

    B = GRAM_CHUNK // 2  # two models per call: the three models take two calls
    for param in ("full", "diag"):
        model = LinearTransformer(D, 2, 1, param, batch_shape=(3,), init_scale=0.05, seed=5, dtype="float64")
        data = sample_regression(
            B, D, N, noise=["uniform:1", "uniform:2", "fixed:0"], generator=6, dtype="float64"
        )
        G, e_t = gram_inputs(data.X, data.y, data.x_query)  # [3, B, ...]: one data set per model
        ybar = torch.randn(3, 3, B, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
        hand = _gradients(model, G, e_t, ybar, data_grad=False)
        auto = _gradients(model, G, e_t, ybar, data_grad=True)
        for h, a in zip(hand, auto, strict=True):
            assert float(a.norm()) > 1e-3 and float((h - a).norm() / a.norm()) < 1e-12


def test_gram_kernel_is_built_where_a_compiler_is():
    """Where the machine has a C compiler the DIAG/GD++ kernel must be built (a silent fallback to
    the torch code would only show as a slower trainer)."""
    import shutil

    from attnlab.models import gram_kernel

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    for dtype in (torch.float32, torch.float64):
        for d in (D, 10):
            assert gram_kernel.available(dtype, d)


@pytest.mark.parametrize("kind", ["omega", "full"])
@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_gram_kernel_equals_the_torch_gram_form(kind, dtype, rtol):
    """The compiled kernel gives the readouts and weight gradients of GramForward (the torch code,
    itself checked against autograd above), for DIAG/GD++ and FULL: several depths, heads, model
    counts, data shared by the models or one set per model, batch sizes that leave a partial block
    of lanes; generic weights (``T`` far from ``I``) and a generic upstream gradient on every
    layer's readout."""
    from attnlab.models import gram_kernel
    from attnlab.models.gram_backward import GramForward, padded_state

    if not gram_kernel.available(dtype, D):
        pytest.skip("the kernel is not built on this machine")
    cases = [(1, 1, 1, 1, True, 0), (3, 3, 2, 37, False, 1), (2, 7, 1, 64, True, 2), (1, 5, 3, 13, False, 3)]
    for M, L, H, B, shared, seed in cases:
        gen = torch.Generator().manual_seed(seed)
        data = sample_regression(B, D, N, noise="uniform:1", generator=seed, dtype=dtype)
        X = padded_state(*gram_inputs(data.X, data.y, data.x_query))[None]
        if not shared:
            X = X * (1 + 0.5 * torch.rand(M, 1, 1, 1, generator=gen, dtype=dtype))
        scale = 0.5 / L / X.abs().amax()  # K(G) of order 0.5 / L
        if kind == "omega":
            w = [scale * torch.randn(M, L, 4, generator=gen, dtype=dtype)]
        else:
            shape = (M, L, H, D + 1, D + 1)
            w = [(scale / H) ** 0.5 * torch.randn(*shape, generator=gen, dtype=dtype) for _ in "PQ"]
        w = [t.requires_grad_() for t in w]
        ybar = torch.randn(M, L + 1, B, generator=gen, dtype=dtype)
        y_torch = GramForward.apply(kind, X.expand(M, -1, -1, -1).contiguous(), *w)
        y_kernel = gram_kernel.GramKernel.apply(kind, X[..., :-1, :-1], X[..., :-1, -1], *w)
        g_torch = torch.autograd.grad((y_torch * ybar).sum(), w)
        g_kernel = torch.autograd.grad((y_kernel * ybar).sum(), w)
        y_torch, y_kernel = y_torch.detach(), y_kernel.detach()
        assert float(y_torch[:, 1:].abs().amax()) > 1e-2 and torch.isfinite(y_torch).all()
        assert float((y_kernel - y_torch).abs().amax() / y_torch.abs().amax()) < rtol, (M, L, H, B)
        for gk, gt in zip(g_kernel, g_torch, strict=True):
            assert float(gt.norm()) > 1e-3 and float((gk - gt).norm() / gt.norm()) < rtol, (M, L, H, B)
    # the model takes the kernel in training (weight gradient) and in evaluation (no gradient)
    param = "diag" if kind == "omega" else "full"
    model = LinearTransformer(D, 2, 1, param, batch_shape=(2,), init_scale=0.05, seed=4, dtype=dtype)
    G, e_t = gram_inputs(data.X, data.y, data.x_query)
    with torch.no_grad():
        y = model.gram_forward(G, e_t)
    ref = model.gram_forward(G.requires_grad_(True), e_t).detach()  # data gradient: autograd, torch
    assert float((y - ref).abs().amax() / ref.abs().amax()) < rtol


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-13), (torch.float32, 1e-6)])
def test_gram_kernel_gram_matrices_equal_torch(dtype, rtol):
    """The kernel's context Gram matrices ``EᵀE`` equal torch's (``gram_inputs``) for leading
    dimensions, batches that leave a partial block of lanes, two ``d`` and ``n``, and columns of
    unequal scale; inputs that need a gradient are left to torch (``None``)."""
    from attnlab.models import gram_kernel

    if not (gram_kernel.available(dtype, D) and gram_kernel.available(dtype, 10)):
        pytest.skip("the kernel is not built on this machine")
    gen = torch.Generator().manual_seed(5)
    for lead, B, d, n in [((), 13, D, N), ((2, 3), 9, 10, 7), ((1,), 64, D, 1)]:
        X = torch.randn(*lead, B, n, d, generator=gen, dtype=dtype) * torch.linspace(0.2, 3.0, d, dtype=dtype)
        y = 5 * torch.randn(*lead, B, n, generator=gen, dtype=dtype)
        xq = torch.randn(*lead, B, d, generator=gen, dtype=dtype)
        G_torch, _ = gram_inputs(X, y, xq)
        G_kernel = gram_kernel.gram_matrices(X, y)
        assert G_kernel.shape == G_torch.shape
        err = float((G_kernel - G_torch).abs().amax() / G_torch.abs().amax())
        assert err < rtol, (lead, B, d, n, err)
        assert torch.equal(G_kernel, G_kernel.transpose(-1, -2))
    assert gram_kernel.gram_matrices(X.requires_grad_(), y) is None
    with pytest.raises(ValueError, match="G must have shape"):
        gram_inputs(X, y, xq, G=G_torch[..., :-1, :-1])


@pytest.mark.parametrize("param", ["diag", "full"])
@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-12), ("float32", 2e-6)])
def test_gram_half_mse_in_one_pass_equals_the_loss_of_the_predictions(param, dtype, rtol):
    """The training loss through the kernel's one pass (GramHalfMSE) has the value and the weight
    gradient of ½·MSE computed from the predictions (through autograd and the torch code): models
    with one data set each and with one shared data set, a batch with a partial block of lanes."""
    from attnlab.models import gram_kernel

    if not gram_kernel.available(getattr(torch, dtype), D):
        pytest.skip("the kernel is not built on this machine")
    model = LinearTransformer(D, 3, 2, param, batch_shape=(2, 2), init_scale=0.02, seed=8, dtype=dtype)
    for noise in (["uniform:1", "uniform:3"], "uniform:2"):
        data = sample_regression(37, D, N, noise=noise, generator=9, dtype=dtype)
        G, e_t = gram_inputs(data.X, data.y, data.x_query)
        if G.ndim == 4:  # [2, B, ...]: one data set per row of models
            G, e_t, target = G[:, None], e_t[:, None], data.target[:, None]
        else:
            target = data.target
        fused = model.gram_half_mse(G, e_t, target)
        plain = 0.5 * ((model.gram_forward(G.clone().requires_grad_(True), e_t) - target) ** 2).mean(-1)
        assert "GramHalfMSE" in type(fused.grad_fn.next_functions[0][0]).__name__  # the one pass ran
        upstream = torch.randn(2, 2, generator=torch.Generator().manual_seed(10), dtype=fused.dtype)
        g_fused = torch.autograd.grad((fused * upstream).sum(), list(model.parameters()))
        g_plain = torch.autograd.grad((plain * upstream).sum(), list(model.parameters()))
        assert 0.1 < float(plain.detach().min()) and float(plain.detach().max()) < 100  # order one: generic
        fused, plain = fused.detach(), plain.detach()
        assert float((fused - plain).abs().max() / plain.abs().max()) < rtol
        for a, b in zip(g_fused, g_plain, strict=True):
            assert float(b.norm()) > 1e-6 and float((a - b).norm() / b.norm()) < rtol

    with pytest.raises(ValueError, match="target"):
        model.gram_half_mse(G, e_t, target[..., :-1])


def test_verify_gd_weights_right_and_wrong(batch):
    from attnlab.models import verify_gd_weights

    eta = 0.03
    alpha = torch.einsum("bn,bnd->bd", batch.y, batch.X)
    w1 = eta * alpha
    resid = batch.y - torch.einsum("bnd,bd->bn", batch.X, w1)
    w2 = w1 + eta * torch.einsum("bn,bnd->bd", resid, batch.X)
    assert "Correct" in verify_gd_weights(w1, batch.X, batch.y, eta=eta, n_layers=1)
    assert "Correct" in verify_gd_weights(w2, batch.X, batch.y, eta=eta, n_layers=2)
    with pytest.raises(AssertionError, match="residuals"):
        verify_gd_weights(2 * w1, batch.X, batch.y, eta=eta, n_layers=2)  # the raw labels twice
    with pytest.raises(ValueError, match="w must have shape"):
        verify_gd_weights(w2[:, :2], batch.X, batch.y, eta=eta, n_layers=2)
    with pytest.raises(ValueError, match="n_layers"):
        verify_gd_weights(w2, batch.X, batch.y, eta=eta, n_layers=0)


def test_verify_gdpp_bounds_right_and_wrong():
    from attnlab.models import verify_gdpp_bounds

    mu, nu = 0.01, 2.0
    gamma = 1 / (3 * nu)
    assert "Correct" in verify_gdpp_bounds(mu * (1 - gamma * mu) ** 2, 4 * nu / 9, mu=mu, nu=nu)
    with pytest.raises(AssertionError, match="nu_next"):
        verify_gdpp_bounds(mu * (1 - gamma * mu) ** 2, nu, mu=mu, nu=nu)
    with pytest.raises(AssertionError, match="mu_next"):
        verify_gdpp_bounds(mu * (1 - mu / nu) ** 2, 4 * nu / 9, mu=mu, nu=nu)  # gamma = 1/nu
    with pytest.raises(ValueError, match="mu_next"):
        verify_gdpp_bounds("a", 1.0, mu=mu, nu=nu)
