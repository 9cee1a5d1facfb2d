"""Experiments of Part II (paper B): GD on the positional/semantic task, batched over seeds.

The authors' protocol (``src/empirics_mixed_teacher_softmax.py`` in their repository): full-batch
gradient descent (``torch.optim.SGD``, lr 0.15, weight decay ``lam``) on the *summed* risk
``sum_mu ||f_Q(x^mu) - y^mu||^2 / (2d) + lam/2 ||Q||^2`` for 5000 steps, from the semantic start
``Q = Q*`` or the positional start ``Q = 1_d/sqrt(d)``. The learning rate multiplies the gradient
of the *sum* over the ``n = alpha d`` samples, not of the mean; we keep that normalisation.

Two things make the runs cheap and batched:

* **Seeds in one tensor.** ``Q`` has shape ``[n_inits, n_seeds, d, r]`` and every seed (and both
  starts) is trained at once: the risk is a sum of independent terms, so the gradient of the total
  is the stack of the per-seed gradients, and GD and Adam (elementwise) act on each seed exactly as
  if it were trained alone.
* **Gram reduction.** ``||S X - Y||^2 / d = Tr(S G S^T) - 2 Tr(S P) + c`` with the per-sample
  ``2 x 2`` matrices ``G = X X^T / d``, ``P = X Y^T / d`` and ``c = ||Y||^2 / d``, computed once.
  Each step then touches the ``d``-dimensional data only through ``h = X Q / sqrt(d)`` and its
  adjoint, which is what autograd differentiates. ``tests/test_positional_semantic.py`` checks
  the reduced risk and its gradient against :class:`attnlab.models.TiedLowRankAttention`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlab.experiments import experiment
from attnlab.tasks import positional_semantic as ps
from attnlab.validation import (
    check_choice,
    check_int,
    check_positive,
    check_real,
    make_generator,
    resolve_device,
    resolve_dtype,
)

INITS = ("semantic", "positional", "random")
OPTIMIZERS = ("gd", "adam")

__all__ = ["INITS", "train_batched", "gram", "reduced_risk", "rows_from"]


def gram(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample ``G = x x^T / d``, ``P = x y^T / d`` (``[..., n, 2, 2]``) and ``c = ||y||^2 / d``."""
    d = x.shape[-1]
    G = x @ x.transpose(-1, -2) / d
    P = x @ y.transpose(-1, -2) / d
    c = (y * y).sum((-1, -2)) / d
    return G, P, c


def reduced_risk(S: torch.Tensor, G: torch.Tensor, P: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Per-sample ``||S x - y||^2 / (2d)`` from the Gram reduction: ``[..., n]``."""
    SG = S @ G
    return 0.5 * ((SG * S).sum((-1, -2)) - 2.0 * (S * P.transpose(-1, -2)).sum((-1, -2)) + c)


def quadratic_coefficients(G, P, c):
    """With ``S = [[a, 1-a], [1-b, b]]`` the per-sample risk ``Tr(SGS^T)/2 - Tr(SP) + c/2`` is
    ``(k2 (a^2 + b^2) + ka a + kb b + k0) / 2``; returns ``(k2, ka, kb, k0)``, each ``[..., n]``."""
    G11, G12, G22 = G[..., 0, 0], G[..., 0, 1], G[..., 1, 1]
    P11, P12, P21, P22 = P[..., 0, 0], P[..., 0, 1], P[..., 1, 0], P[..., 1, 1]
    k2 = G11 - 2 * G12 + G22
    ka = 2 * (G12 - G22 - P11 + P21)
    kb = 2 * (G12 - G11 + P12 - P22)
    k0 = G11 + G22 - 2 * (P12 + P21) + c
    return k2, ka, kb, k0


def _scores(Xt, Qp, n_inits):
    """``h = X Q / sqrt(d)`` in the fast layout: ``Xt`` ``[S, d, n L]``, ``Qp`` ``[S, I r, d]``.

    Returns ``h`` as ``[I, S, n, L, r]`` (``L = 2``). ``Qp @ Xt`` is one batched matrix product
    whose backward is another, the only operations that touch the ``d``-dimensional data.
    """
    S_, Ir, d = Qp.shape
    r = Ir // n_inits
    h = (Qp @ Xt) * d**-0.5  # [S, I r, n L]
    return h.view(S_, n_inits, r, -1, ps.L_TOKENS).permute(1, 0, 3, 4, 2)  # [I, S, n, L, r]


class _Students:
    """All students of a batch: ``Q`` (and ``K``, ``W``) for ``n_inits`` starts x ``n_seeds`` seeds."""

    def __init__(self, Qp, n_inits, K=None, W=None):
        self.Qp, self.K, self.W, self.n_inits = Qp, K, W, n_inits

    @property
    def params(self):
        return [p for p in (self.Qp, self.K, self.W) if p is not None]

    def gates(self, Xt):
        """For ``L = 2`` a row softmax is a sigmoid: ``S = [[a, 1 - a], [1 - b, b]]``, ``[I, S, n]`` each.

        ``a = sigmoid(s_11 - s_12)`` and ``b = sigmoid(s_22 - s_21)`` with the scores
        ``s = h_Q h_K^T``.
        """
        hq = _scores(Xt, self.Qp, self.n_inits)  # [I, S, n, 2, r]
        hk = hq if self.K is None else _scores(Xt, self.K, self.n_inits)
        dk = hk[..., 0, :] - hk[..., 1, :]  # [I, S, n, r]
        a = torch.sigmoid((hq[..., 0, :] * dk).sum(-1))
        b = torch.sigmoid(-(hq[..., 1, :] * dk).sum(-1))
        return a, b

    def attention(self, Xt):
        """The attention matrices ``[I, S, n, 2, 2]``."""
        a, b = self.gates(Xt)
        return torch.stack([torch.stack([a, 1 - a], -1), torch.stack([1 - b, b], -1)], -2)

    def errors(self, Xt, k, X=None, Y=None):
        """Per-sample ``||f(x) - y||^2 / (2d)``, ``[I, S, n]``; ``k`` from :func:`quadratic_coefficients`."""
        if self.W is None:
            a, b = self.gates(Xt)
            k2, ka, kb, k0 = k
            return 0.5 * (k2 * (a * a + b * b) + ka * a + kb * b + k0)
        S = self.attention(Xt)
        XW = torch.einsum("snld,isde->isnle", X, self.W)  # learned value
        res = S @ XW - Y[None]
        return (res * res).sum((-1, -2)) / (2 * X.shape[-1])

    def Q(self):
        """``Q`` as ``[I, S, d, r]``."""
        S_, Ir, d = self.Qp.shape
        return self.Qp.detach().view(S_, self.n_inits, Ir // self.n_inits, d).permute(1, 0, 3, 2)


def _tied_gradient(Xt, Qp, k, n_inits):
    """Gradient of the summed risk for tied rank-one ``Q`` (``Qp`` ``[S, I, d]``), by hand.

    With ``h_l = x_l^T Q / sqrt(d)``, ``a = sigmoid(h_1 (h_1 - h_2))``, ``b = sigmoid(h_2 (h_2 - h_1))``
    and the per-sample risk ``(k2 (a^2 + b^2) + ka a + kb b + k0) / 2``: ``g_a = (k2 a + ka/2) a (1-a)``,
    ``g_b = (k2 b + kb/2) b (1-b)``, ``dR/dh_1 = g_a (2h_1 - h_2) - g_b h_2``,
    ``dR/dh_2 = g_b (2h_2 - h_1) - g_a h_1``, and ``dR/dQ = sum_mu sum_l x_l dR/dh_l / sqrt(d)``.
    """
    S_, I, d = Qp.shape
    scale = d**-0.5
    k2, ka, kb, _ = (t[:, None] for t in k)  # [S, 1, n]
    h = (Qp @ Xt).mul_(scale).view(S_, I, -1, 2)  # [S, I, n, 2]
    h1, h2 = h[..., 0], h[..., 1]
    dh = h1 - h2
    a = torch.sigmoid(h1 * dh)
    b = torch.sigmoid(-h2 * dh)
    ga = (k2 * a + 0.5 * ka) * a * (1 - a)
    gb = (k2 * b + 0.5 * kb) * b * (1 - b)
    g = torch.stack([ga * (h1 + dh) - gb * h2, gb * (h2 - dh) - ga * h1], -1)  # [S, I, n, 2]
    return (g.view(S_, I, -1) @ Xt.transpose(1, 2)).mul_(scale)  # [S, I, d]


def _layout(X):
    """``[S, n, L, d]`` -> ``[S, d, n L]`` (contiguous)."""
    S_, n, L, d = X.shape
    return X.reshape(S_, n * L, d).transpose(1, 2).contiguous()


def _initial_Q(init, teacher, r, gen):
    """Starting ``Q`` ``[S, r, d]`` for one start (rows are the rank-one directions)."""
    S_, d = teacher.Q_star.shape
    kw = {"dtype": teacher.Q_star.dtype, "device": teacher.Q_star.device}
    if init == "semantic":
        Q = 0.1 * torch.randn(S_, r, d, generator=gen, **kw)  # extra directions start small
        Q[:, 0] = teacher.Q_star
        return Q
    if init == "positional":
        return torch.full((S_, r, d), d**-0.5, **kw)
    return 0.1 * torch.randn(S_, r, d, generator=gen, **kw)


class _threads:
    """Run with ``n`` torch threads, restoring the previous number afterwards.

    Small batched products run far faster on one thread when the two cores are shared (the book's
    tests execute notebooks in parallel), so the experiments default to one.
    """

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.old = torch.get_num_threads()
        if self.n:
            torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        torch.set_num_threads(self.old)


def train_batched(
    *,
    alpha,
    d: int,
    omega: float = 0.3,
    inits=("semantic", "positional"),
    n_seeds: int = 4,
    seed: int = 0,
    sigma: float = 0.5,
    lam: float = 0.01,
    lr: float = 0.15,
    steps: int = 5000,
    optimizer: str = "gd",
    r: int = 1,
    n_test: int = 10000,
    lam_lin: float = 1e-4,
    correlation: float = 0.0,
    A=None,
    normalize_teacher: bool = False,
    tied: bool = True,
    value: str = "identity",
    record_every: int = 0,
    fast: bool = True,
    threads: int = 1,
    dtype: str = "float32",
    device: str = "cpu",
) -> dict[str, np.ndarray]:
    """Train ``n_seeds`` students from each start in ``inits`` at once; return per-run arrays.

    All runs of one seed share the teacher and the training/test data, so the starts are
    compared on the same problem (the empirical global minimum is the run with the lower
    training loss). Returns arrays of shape ``[n_inits, n_seeds]``: ``eps_g`` (mean of
    ``||f - y||^2 / (2d)`` on ``n_test`` fresh samples), ``eps_t`` (the regularised training risk
    divided by ``d``), ``m`` and ``theta_over_sigma2`` (absolute values, of the first column of
    ``Q``: ``Q -> -Q`` leaves the model unchanged), ``q``; ``eps_lin`` ``[n_seeds]``, the test error
    of the ridge-optimal positional baseline ``B`` fitted on the same training contents; and, if
    ``record_every > 0``, ``curve_steps`` and ``curve_eps_t``, ``curve_m``, ``curve_theta_over_sigma2``
    (each ``[n_records, n_inits, n_seeds]``).

    ``alpha`` may also be a sequence: every ``(alpha, seed)`` pair is then one more run of the same
    batch (training sets padded to the largest ``n`` with samples of weight zero, which is exact),
    and the arrays gain an ``alpha`` axis after the start axis: ``[n_inits, n_alpha, n_seeds]``.
    This trades a little padding for one optimisation loop instead of one per ``alpha``.

    ``optimizer="gd"`` is the authors' full-batch GD (lr on the summed risk); ``"adam"`` is
    ``torch.optim.Adam`` with coupled weight decay ``lam`` (their Adam runs: lr 0.01, 2500 steps).
    ``normalize_teacher=True`` rescales each ``Q*`` to norm ``sqrt(d)``: then ``rho = sigma^2
    ||Q*||^2 / d`` equals ``sigma^2`` exactly instead of fluctuating by ``O(1/sqrt(d))`` from seed to
    seed, a variance reduction for comparisons with the ``d -> infinity`` theory (the authors did not
    normalise). ``tied=False`` trains a separate key ``K`` (started like ``Q``); ``value="learned"`` trains a
    value matrix ``W`` (``[d, d]``, started at the identity, weight decay ``lam``).
    ``fast=True`` uses the hand-written gradient :func:`_tied_gradient` for tied rank-one GD (about
    twice as fast as autograd; the tests check that both give the same runs).
    """
    many = isinstance(alpha, (list, tuple, np.ndarray))
    alphas = [check_positive("alpha", a) for a in (alpha if many else [alpha])]
    if not alphas:
        raise ValueError("alpha must be a positive number or a non-empty sequence of them")
    d = check_int("d", d, minimum=2)
    omega = check_real("omega", omega, minimum=0.0, maximum=1.0)
    if isinstance(inits, str) or not inits:
        raise ValueError(f"inits must be a non-empty sequence of starts from {INITS}, got {inits!r}")
    inits = tuple(check_choice("inits", i, INITS) for i in inits)
    n_seeds = check_int("n_seeds", n_seeds, minimum=1)
    sigma = check_positive("sigma", sigma)
    lam = check_real("lam", lam, minimum=0.0)
    lr = check_positive("lr", lr)
    steps = check_int("steps", steps, minimum=0)
    optimizer = check_choice("optimizer", optimizer, OPTIMIZERS)
    r = check_int("r", r, minimum=1)
    n_test = check_int("n_test", n_test, minimum=1)
    value = check_choice("value", value, ("identity", "learned"))
    record_every = check_int("record_every", record_every, minimum=0)
    threads = check_int("threads", threads, minimum=0)
    options = {
        "d": d, "omega": omega, "inits": inits, "sigma": sigma, "lam": lam, "lr": lr, "steps": steps,
        "optimizer": optimizer, "r": r, "n_test": n_test, "lam_lin": lam_lin, "correlation": correlation,
        "A": A, "normalize_teacher": bool(normalize_teacher), "tied": tied, "value": value,
        "record_every": record_every, "fast": bool(fast),
        "dtype": resolve_dtype(dtype), "device": resolve_device(device),
    }  # fmt: skip
    ns = [max(1, int(round(a * d))) for a in alphas]
    with _threads(threads):
        out = _train(ns, n_seeds, seed, **options)
    I, A_ = len(inits), len(alphas)
    for key in ("eps_g", "eps_t", "m", "theta_over_sigma2", "q"):
        out[key] = out[key].reshape(I, A_, n_seeds) if many else out[key]
    out["eps_lin"] = out["eps_lin"].reshape(A_, n_seeds) if many else out["eps_lin"]
    if record_every:
        for key in ("curve_eps_t", "curve_m", "curve_theta_over_sigma2"):
            out[key] = out[key].reshape(-1, I, A_, n_seeds) if many else out[key]
    out["n"] = ns if many else ns[0]
    return out


def _train(ns, n_seeds, seed, *, d, omega, inits, sigma, lam, lr, steps, optimizer, r, n_test, lam_lin,
           correlation, A, normalize_teacher, tied, value, record_every, dtype, device, fast):  # fmt: skip
    """The work of :func:`train_batched`; the batch is ``len(ns) * n_seeds`` runs, ``alpha`` major."""
    I = len(inits)
    S_ = len(ns) * n_seeds
    n_max = max(ns)
    gen = make_generator(seed, device=device)
    teacher = ps.make_teacher(d, omega, sigma=sigma, A=A, n_seeds=S_, seed=gen, dtype=dtype, device=device)
    if normalize_teacher:  # ||Q*||^2 = d exactly, so rho = sigma^2 as in the d -> infinity theory
        teacher.Q_star *= d**0.5 / teacher.Q_star.norm(dim=-1, keepdim=True)
    X, Y, Z = ps.sample(n_max, teacher, seed=gen, correlation=correlation)  # [S, n, 2, d] each
    # samples beyond a run's own n carry weight zero: they add nothing to the risk or its gradient
    n_run = torch.tensor(ns, device=device).repeat_interleave(n_seeds)  # [S]
    mask = (torch.arange(n_max, device=device)[None] < n_run[:, None]).to(dtype)  # [S, n]
    k = tuple(t * mask for t in quadratic_coefficients(*gram(X, Y)))
    B = ps.fit_positional_linear(Z * mask[..., None, None], Y * mask[..., None, None], lam=lam_lin)
    Xt = _layout(X)
    if value == "identity":
        X = Y = None
    del Z

    Q0 = torch.stack([_initial_Q(i, teacher, r, gen) for i in inits], dim=1)  # [S, I, r, d]
    Qp = Q0.reshape(S_, I * r, d).clone().requires_grad_(True)
    K = Qp.detach().clone().requires_grad_(True) if not tied else None
    W = None
    if value == "learned":
        W = torch.eye(d, dtype=dtype, device=device).expand(I, S_, d, d).clone().requires_grad_(True)
    students = _Students(Qp, I, K, W)
    if optimizer == "gd":
        opt = torch.optim.SGD(students.params, lr=lr, weight_decay=lam)
    else:
        opt = torch.optim.Adam(students.params, lr=lr, weight_decay=lam)

    def penalty():
        return sum(
            (p.detach() * p.detach()).reshape(S_, I, -1).sum(-1).T
            if p is not W
            else (p.detach() * p.detach()).sum((-1, -2))
            for p in students.params
        )  # [I, S]

    def data_risk():
        e = students.errors(Xt, k, X, Y)  # [I, S, n]
        return (e if W is None else e * mask).sum(-1)  # [I, S]

    fast = fast and tied and value == "identity" and r == 1 and optimizer == "gd"
    curve_steps, curve, curve_m, curve_theta = [], [], [], []
    Q_star = teacher.Q_star[None].expand(I, S_, d)
    for step in range(steps + 1):
        if fast and not (record_every and step % record_every == 0) and step < steps:
            with torch.no_grad():  # SGD with weight decay, by hand: Q <- Q - lr (grad + lam Q)
                Qp.sub_(lr * (_tied_gradient(Xt, Qp, k, I) + lam * Qp))
            continue
        data = data_risk()
        if record_every and (step % record_every == 0 or step == steps):
            curve_steps.append(step)
            curve.append(((data.detach() + 0.5 * lam * penalty()) / d).double().cpu().numpy())
            ov = ps.overlaps(students.Q()[..., 0], Q_star, sigma=sigma)
            curve_m.append(np.abs(ov["m"]))
            curve_theta.append(np.abs(ov["theta"]) / sigma**2)
        if step == steps:
            break
        opt.zero_grad(set_to_none=True)
        data.sum().backward()
        opt.step()

    with torch.no_grad():
        eps_t = (data.detach() + 0.5 * lam * penalty()) / d
        # fresh test data, in chunks that keep memory bounded (~1e7 numbers per chunk)
        chunk = max(1, min(n_test, int(1e7 // (S_ * 2 * d))))
        err_sum = torch.zeros(I, S_, dtype=torch.float64, device=device)
        lin_sum = torch.zeros(S_, dtype=torch.float64, device=device)
        done = 0
        while done < n_test:
            kk = min(chunk, n_test - done)
            Xc, Yc, Zc = ps.sample(kk, teacher, seed=gen, correlation=correlation)
            kc = quadratic_coefficients(*gram(Xc, Yc))
            err_sum += students.errors(_layout(Xc), kc, Xc, Yc).sum(-1).double()
            lin_sum += ps.linear_error(B, Zc, Yc).double() * kk
            done += kk
        Q = students.Q()[..., 0]  # [I, S, d]
        ov = ps.overlaps(Q, teacher.Q_star[None].expand(I, S_, d), sigma=sigma)
    out = {
        "eps_g": (err_sum / n_test).cpu().numpy(),
        "eps_t": eps_t.double().cpu().numpy(),
        "m": np.abs(ov["m"]),
        "theta_over_sigma2": np.abs(ov["theta"]) / sigma**2,
        "q": ov["q"],
        "eps_lin": (lin_sum / n_test).cpu().numpy(),
    }
    if record_every:
        out["curve_steps"] = np.asarray(curve_steps)
        out["curve_eps_t"] = np.stack(curve)
        out["curve_m"] = np.stack(curve_m)
        out["curve_theta_over_sigma2"] = np.stack(curve_theta)
    return out


def rows_from(out: dict, inits, **fixed) -> list[dict]:
    """Flatten :func:`train_batched` arrays (of one ``alpha``) into one row per (start, seed)."""
    rows = []
    for i, init in enumerate(inits):
        for s in range(out["eps_g"].shape[-1]):
            row = dict(fixed)
            row.update(init=init, seed_index=s)
            for key in ("eps_g", "eps_t", "m", "theta_over_sigma2", "q"):
                row[key] = float(out[key][i, s])
            row["eps_lin"] = float(out["eps_lin"][s])
            rows.append(row)
    return rows


PAD_LIMIT = 3e7  # numbers in one padded batch over alphas before falling back to a loop


def run_alphas(alphas, *, d, n_seeds, seed, inits=("semantic", "positional"), **options) -> list[dict]:
    """Train at every ``alpha`` and return rows; one batch over all ``alpha`` when it is small.

    When ``len(alphas) * n_seeds * max(n) * 2 * d`` stays under :data:`PAD_LIMIT` all runs share
    one loop (:func:`train_batched` with a sequence of ``alpha``, seed ``seed``); otherwise each
    ``alpha`` is its own batch over seeds, with seed ``seed + 1000 k``.
    """
    alphas = [float(a) for a in alphas]
    fixed = {key: options[key] for key in ("omega",) if key in options}
    size = len(alphas) * n_seeds * round(max(alphas) * d) * 2 * d
    rows = []
    if size <= PAD_LIMIT:
        out = train_batched(alpha=alphas, d=d, n_seeds=n_seeds, seed=seed, inits=inits, **options)
        for j, alpha in enumerate(alphas):
            one = {key: out[key][:, j] for key in ("eps_g", "eps_t", "m", "theta_over_sigma2", "q")}
            one["eps_lin"] = out["eps_lin"][j]
            rows += rows_from(one, inits, alpha=alpha, d=d, n=out["n"][j], **fixed)
        return rows
    for k, alpha in enumerate(alphas):
        out = train_batched(alpha=alpha, d=d, n_seeds=n_seeds, seed=seed + 1000 * k, inits=inits, **options)
        rows += rows_from(out, inits, alpha=alpha, d=d, n=out["n"], **fixed)
    return rows


# ---------------------------------------------------------------------------------------------
# Registered experiments
# ---------------------------------------------------------------------------------------------


def _train_kwargs(config: dict, device: str) -> dict:
    keys = ("omega", "sigma", "lam", "lr", "steps", "n_test", "lam_lin", "n_seeds", "normalize_teacher")
    return {k: config[k] for k in keys if k in config} | {"device": device}


_COMMON = {"omega": 0.3, "sigma": 0.5, "lam": 0.01, "lr": 0.15, "steps": 5000, "lam_lin": 1e-4}


def alpha_grid(config: dict) -> list[float]:
    """``linspace(alpha_min, alpha_max, n_alpha)[::alpha_every]``: the authors' grid is
    ``linspace(0.01, 2, 25)``; ``alpha_every`` > 1 keeps every k-th point (reduced runs)."""
    grid = np.linspace(
        config["alpha_min"], config["alpha_max"], check_int("n_alpha", config["n_alpha"], minimum=1)
    )
    return [float(a) for a in grid[:: check_int("alpha_every", config["alpha_every"], minimum=1)]]


@experiment(
    "pt_gd",
    book={
        **_COMMON,
        "steps": 2000,
        "d": 400,
        "alpha_min": 1.0,
        "alpha_max": 2.0,
        "n_alpha": 2,
        "alpha_every": 1,
        "n_seeds": 4,
        "n_test": 4000,
        "normalize_teacher": True,
        "seed": 0,
    },
    paper={
        **_COMMON,
        "d": 1000,
        "alpha_min": 0.01,
        "alpha_max": 2.0,
        "n_alpha": 25,
        "alpha_every": 1,
        "n_seeds": 24,
        "n_test": 10000,
        "normalize_teacher": False,
        "seed": 0,
    },
    description="full-batch GD from the semantic and positional starts vs alpha (chapter 3)",
)
def pt_gd(config: dict, device: str) -> list[dict]:
    """GD from both starts at every ``alpha`` of the grid; one row per (alpha, start, seed)."""
    return run_alphas(alpha_grid(config), d=config["d"], seed=config["seed"], **_train_kwargs(config, device))


@experiment(
    "pt_curves",
    book={**_COMMON, "d": 100, "alpha": 2.0, "n_seeds": 8, "n_test": 4000, "record_every": 250, "seed": 0},
    paper={
        **_COMMON,
        "d": 1000,
        "alpha": 2.0,
        "n_seeds": 24,
        "n_test": 10000,
        "record_every": 100,
        "seed": 0,
    },
    description="GD from both starts at one alpha, with training curves of eps_t, m and theta (chapter 1)",
)
def pt_curves(config: dict, device: str) -> list[dict]:
    """One row per (start, seed, recorded step) with ``eps_t``, ``m`` and ``theta_over_sigma2``;
    the rows of the last step also carry ``eps_g``, ``q`` and ``eps_lin``."""
    inits = ("semantic", "positional")
    out = train_batched(alpha=config["alpha"], d=config["d"], inits=inits, seed=config["seed"],
                        record_every=config["record_every"], **_train_kwargs(config, device))  # fmt: skip
    final = rows_from(out, inits, alpha=config["alpha"], d=config["d"], omega=config["omega"])
    rows = []
    last = len(out["curve_steps"]) - 1
    for j, step in enumerate(out["curve_steps"]):
        for i, init in enumerate(inits):
            for s in range(config["n_seeds"]):
                row = {"step": int(step), "init": init, "seed_index": s}
                row["eps_t"] = float(out["curve_eps_t"][j, i, s])
                row["m"] = float(out["curve_m"][j, i, s])
                row["theta_over_sigma2"] = float(out["curve_theta_over_sigma2"][j, i, s])
                if j == last:
                    row = {**final[i * config["n_seeds"] + s], **row}
                rows.append(row)
    return rows


def _mean(x):
    return float(np.mean(x))


def summarize(result, by=("alpha", "init")) -> list[dict]:
    """Mean and standard error over seeds of every metric, grouped by ``by`` (for plots and CSVs)."""
    keys = sorted({tuple(row[k] for k in by) for row in result.rows})
    out = []
    for key in keys:
        where = dict(zip(by, key, strict=True))
        row = dict(where)
        for col in ("eps_g", "eps_t", "m", "theta_over_sigma2", "eps_lin"):
            v = result.column(col, **where)
            row[col] = _mean(v)
            row[col + "_se"] = float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else float("nan")
        out.append(row)
    return out


@experiment(
    "pt_finite_d",
    book={
        **_COMMON,
        "steps": 2000,
        "alpha": 1.5,
        "ds": "25,50,100,200",
        "n_seeds": 6,
        "n_test": 2000,
        "normalize_teacher": True,
        "seed": 0,
    },  # fmt: skip
    paper={
        **_COMMON,
        "alpha": 1.5,
        "ds": "10,15,23,36,56,87,135,209,323,500",
        "n_seeds": 24,
        "n_test": 10000,
        "normalize_teacher": False,
        "seed": 0,
    },
    description="finite-d scaling at alpha = 1.5, omega = 0.3: GD from both starts vs d (chapter 4)",
)
def pt_finite_d(config: dict, device: str) -> list[dict]:
    """GD from both starts at one ``alpha`` for every ``d`` in ``ds`` (a comma-separated string)."""
    rows = []
    inits = ("semantic", "positional")
    for k, d in enumerate(int(v) for v in str(config["ds"]).split(",")):
        out = train_batched(alpha=config["alpha"], d=d, inits=inits, seed=config["seed"] + 1000 * k,
                            **_train_kwargs(config, device))  # fmt: skip
        rows += rows_from(out, inits, alpha=config["alpha"], d=d, omega=config["omega"], n=out["n"])
    return rows


_ADAM = {**_COMMON, "lr": 0.01, "steps": 2500, "d": 100, "alpha": 2.0, "seed": 0}
# GD references: the book scale stops at 2000 steps (converged at d = 100, see chapter 1)


@experiment(
    "pt_adam_random",
    book=_ADAM | {"n_seeds": 12, "n_test": 2000, "steps_gd": 2000, "normalize_teacher": True},
    paper=_ADAM | {"n_seeds": 48, "n_test": 10000, "steps_gd": 5000, "normalize_teacher": False},
    description="which minimum Adam reaches from a random start (d = 100, alpha = 2; chapter 4)",
)
def pt_adam_random(config: dict, device: str) -> list[dict]:
    """Adam (lr 0.01, 2500 steps, weight decay lam, as the authors) from ``Q = 0.1 N(0, I)``.

    On the same teachers and training sets, GD from the semantic and positional starts gives the
    two reference minima; each row carries both, so a reader can tell which one Adam reached.
    """
    kw = _train_kwargs(config, device)
    common = {"alpha": config["alpha"], "d": config["d"], "seed": config["seed"]}
    adam = train_batched(inits=("random",), optimizer="adam", **common, **kw)
    kw_gd = kw | {"lr": 0.15, "steps": config["steps_gd"]}
    gd = train_batched(inits=("semantic", "positional"), optimizer="gd", **common, **kw_gd)
    rows = rows_from(adam, ("random",), alpha=config["alpha"], d=config["d"], omega=config["omega"])
    for s, row in enumerate(rows):
        for i, name in enumerate(("semantic", "positional")):
            row[f"eps_t_{name}_gd"] = float(gd["eps_t"][i, s])
            row[f"eps_g_{name}_gd"] = float(gd["eps_g"][i, s])
        gap = {name: abs(row["eps_t"] - row[f"eps_t_{name}_gd"]) for name in ("semantic", "positional")}
        row["reached"] = (
            min(gap, key=gap.get) if row["theta_over_sigma2"] > 0.2 or row["m"] > 0.1 else "other"
        )
    return rows


def _variant_rows(config, device, variants: dict) -> list[dict]:
    """Run each named variant (a dict of :func:`train_batched` options) from both starts.

    Every variant uses the same seed, hence the same teachers and training sets."""
    rows = []
    for name, options in variants.items():
        new = run_alphas(alpha_grid(config), d=config["d"], seed=config["seed"],
                         **_train_kwargs(config, device), **options)  # fmt: skip
        rows += [{"variant": name, **row} for row in new]
    return rows


_VARIANT_BOOK = {**_COMMON, "steps": 2000, "d": 100, "alpha_min": 0.5, "alpha_max": 2.0, "n_alpha": 4,
                 "alpha_every": 1, "n_seeds": 6, "n_test": 2000, "normalize_teacher": True,
                 "seed": 0}  # fmt: skip
_VARIANT_PAPER = {**_COMMON, "d": 500, "alpha_min": 0.25, "alpha_max": 2.0, "n_alpha": 8,
                  "alpha_every": 1, "n_seeds": 12, "n_test": 10000, "normalize_teacher": False,
                  "seed": 0}  # fmt: skip


@experiment(
    "pt_untied",
    book=_VARIANT_BOOK,
    paper=_VARIANT_PAPER,
    description="reviewers' question: untied query and key (both started alike) vs tied (chapter 4)",
)
def pt_untied(config: dict, device: str) -> list[dict]:
    """Tied ``Q = K`` against untied ``Q, K`` (both started at the same point), same data."""
    return _variant_rows(config, device, {"tied": {"tied": True}, "untied": {"tied": False}})


@experiment(
    "pt_value",
    book=_VARIANT_BOOK | {"d": 40, "n_seeds": 4, "alpha_min": 1.0, "n_alpha": 3},
    paper=_VARIANT_PAPER | {"d": 200},
    description="reviewers' question: a learned d x d value matrix (started at I) vs value = I (chapter 4)",
)
def pt_value(config: dict, device: str) -> list[dict]:
    """Value fixed to the identity against a learned ``W`` (``[d, d]``, from ``I``), same data."""
    return _variant_rows(config, device, {"identity": {"value": "identity"}, "learned": {"value": "learned"}})


@experiment(
    "pt_correlated",
    book=_VARIANT_BOOK | {"correlation": 0.5},
    paper=_VARIANT_PAPER | {"correlation": 0.5},
    description="reviewers' question: correlated tokens z_2 = c z_1 + sqrt(1-c^2) z' (chapter 4)",
)
def pt_correlated(config: dict, device: str) -> list[dict]:
    """Independent tokens against tokens with correlation ``c`` (the same teachers)."""
    c = float(config["correlation"])
    return _variant_rows(
        config, device, {"independent": {"correlation": 0.0}, f"c={c:g}": {"correlation": c}}
    )


# ---------------------------------------------------------------------------------------------
# Theory curves (the solver of attnlab.theory.phase_transition) for chapter 3
# ---------------------------------------------------------------------------------------------

_THEORY = {"omega": 0.3, "sigma": 0.5, "lam": 0.01, "alpha_min": 0.1, "alpha_max": 2.5}


@experiment(
    "pt_theory",
    book={**_THEORY, "n_alpha": 9, "n_nodes": 12, "xtol": 1e-3, "delta": 0.03},
    paper={**_THEORY, "n_alpha": 25, "n_nodes": 20, "xtol": 1e-4, "delta": 0.03},
    description="theory: both branches vs alpha, eps_lin, alpha_c and alpha_l by root finding (chapter 3)",
)
def pt_theory(config: dict, device: str) -> list[dict]:
    """Rows ``kind="curve"`` (alpha, branch, eps_g, eps_t, m, theta_over_sigma2, q, V, converged),
    one row ``kind="eps_lin"``, rows ``kind="transition"`` (``name`` alpha_c or alpha_l, ``alpha``)
    and rows ``kind="bracket"``: both branches solved at ``alpha_c -+ delta`` and ``alpha_l -+ delta``
    (``name``, ``side`` below/above), so that a reader can check that the roots are roots.

    The transitions are roots (``brentq`` inside :func:`~attnlab.theory.phase_transition.alpha_c`
    and ``alpha_l``), bracketed by the sign changes found on the curve's grid.
    """
    from attnlab.theory import phase_transition as se

    omega, sigma, lam = config["omega"], config["sigma"], config["lam"]
    kw = {"n_nodes": config["n_nodes"]}
    alphas = np.linspace(config["alpha_min"], config["alpha_max"], config["n_alpha"])
    rows, sols = [], {}
    for branch in ("semantic", "positional"):
        for a in alphas:
            fp = se.solve(float(a), omega, branch, sigma, lam, **kw)
            sols[branch, float(a)] = fp
            rows.append({
                "kind": "curve", "alpha": float(a), "branch": branch, "eps_g": fp.eps_g, "eps_t": fp.eps_t,
                "m": abs(fp.m), "theta_over_sigma2": abs(fp.theta) / sigma**2, "q": fp.q, "V": fp.V,
                "converged": bool(fp.converged),
            })  # fmt: skip
    lin = se.eps_lin(omega, sigma)
    rows.append({"kind": "eps_lin", "eps_lin": float(lin)})
    diff_t = [sols["semantic", float(a)].eps_t - sols["positional", float(a)].eps_t for a in alphas]
    diff_l = [sols["semantic", float(a)].eps_g - lin for a in alphas]
    roots = {"alpha_c": (se.alpha_c, diff_t), "alpha_l": (se.alpha_l, diff_l)}
    for name, (finder, diff) in roots.items():
        value = float("nan")
        for i in range(len(alphas) - 1):
            if np.isfinite(diff[i]) and np.isfinite(diff[i + 1]) and diff[i] * diff[i + 1] <= 0:
                bracket = (float(alphas[i]), float(alphas[i + 1]))
                value = finder(omega, sigma, lam, bracket=bracket, n_grid=2, xtol=config["xtol"], **kw)
                break
        rows.append({"kind": "transition", "name": name, "alpha": float(value)})
        if np.isfinite(value):
            for side, a in (("below", value - config["delta"]), ("above", value + config["delta"])):
                for branch in ("semantic", "positional"):
                    fp = se.solve(float(a), omega, branch, sigma, lam, **kw)
                    rows.append({"kind": "bracket", "name": name, "side": side, "alpha": float(a),
                                 "branch": branch, "eps_g": fp.eps_g, "eps_t": fp.eps_t,
                                 "converged": bool(fp.converged)})  # fmt: skip
    return rows


# ---------------------------------------------------------------------------------------------
# Bridge to Part I: a one-layer transformer on the histogram task, positional or semantic
# ---------------------------------------------------------------------------------------------


def histogram_data(n: int, seq_len: int, alphabet: int, generator: torch.Generator):
    """Sequences ``[n, seq_len]`` of tokens in ``range(alphabet)`` and, at every position, how
    many times its token occurs in the sequence (the histogram task of Part I)."""
    x = torch.randint(alphabet, (n, seq_len), generator=generator)
    y = (x[:, :, None] == x[:, None, :]).sum(-1)  # [n, L]: counts, 1..L
    return x, y


class _HistogramTransformer(torch.nn.Module):
    """The authors' one-layer model (``src/transformer.py``), scaled down.

    Token and learned positional embeddings live in two halves of the model dimension; the
    attention's queries and keys read only one half (``attention_input="semantic"`` or
    ``"positional"``), its values the whole; then LayerNorm and a two-layer ReLU read-out.
    """

    def __init__(self, seq_len, alphabet, dim, hidden, attention_input, generator):
        super().__init__()
        half = dim // 2
        self.tok = torch.nn.Parameter(torch.randn(alphabet, half, generator=generator) / half**0.5)
        self.pos = torch.nn.Parameter(torch.randn(seq_len, half, generator=generator) / half**0.5)
        self.Q = torch.nn.Parameter(torch.randn(half, half, generator=generator) / half**0.5)
        self.K = torch.nn.Parameter(torch.randn(half, half, generator=generator) / half**0.5)
        self.V = torch.nn.Parameter(torch.randn(dim, dim, generator=generator) / dim**0.5)
        self.norm = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, hidden)
        self.fc2 = torch.nn.Linear(hidden, seq_len + 1)
        self.attention_input = attention_input
        with torch.no_grad():
            for layer in (self.fc1, self.fc2):
                layer.weight.copy_(
                    torch.randn(layer.weight.shape, generator=generator) / layer.in_features**0.5
                )
                layer.bias.zero_()

    def attention(self, x):
        e_tok = self.tok[x]  # [n, L, half]
        e_pos = self.pos.expand_as(e_tok)
        a = e_tok if self.attention_input == "semantic" else e_pos
        scores = (a @ self.Q) @ (a @ self.K).transpose(-1, -2) / a.shape[-1] ** 0.5
        return torch.softmax(scores, dim=-1), torch.cat([e_tok, e_pos], -1)

    def forward(self, x):
        A, e = self.attention(x)
        return self.fc2(torch.relu(self.fc1(self.norm(A @ e @ self.V))))  # [n, L, classes]


@experiment(
    "pt_histogram",
    book={"seq_len": 10, "alphabet": 15, "dim": 32, "hidden": 64, "n_train": 3000, "n_test": 2000,
          "batch": 150, "epochs": 40, "lr": 3e-3, "n_seeds": 1, "seed": 0},
    paper={"seq_len": 10, "alphabet": 15, "dim": 64, "hidden": 128, "n_train": 35000, "n_test": 15000,
           "batch": 32, "epochs": 200, "lr": 1e-3, "n_seeds": 10, "seed": 0},
    description="bridge to Part I: one-layer attention solves the histogram task by content or by position",
)  # fmt: skip
def pt_histogram(config: dict, device: str) -> list[dict]:
    """Train the semantic-only and the positional-only model; report accuracy and attention.

    ``same_token_mass``: average attention a position pays to the *other* positions holding its
    own token (``same_token_mass_uniform`` is that mass under uniform attention); ``self_mass``:
    attention on itself; ``input_dependence``: standard deviation of the attention weights across
    inputs, averaged (zero for a purely positional attention).
    """
    rows = []
    L, T = config["seq_len"], config["alphabet"]
    with _threads(1):
        for s in range(config["n_seeds"]):
            gen = make_generator(config["seed"] + s)
            x_tr, y_tr = histogram_data(config["n_train"], L, T, gen)
            x_te, y_te = histogram_data(config["n_test"], L, T, gen)
            for kind in ("semantic", "positional"):
                model = _HistogramTransformer(L, T, config["dim"], config["hidden"], kind, gen)
                opt = torch.optim.Adam(model.parameters(), lr=config["lr"], betas=(0.9, 0.98))
                for _ in range(config["epochs"]):
                    perm = torch.randperm(config["n_train"], generator=gen)
                    for i in range(0, config["n_train"], config["batch"]):
                        idx = perm[i : i + config["batch"]]
                        loss = torch.nn.functional.cross_entropy(model(x_tr[idx]).reshape(-1, L + 1),
                                                                 y_tr[idx].reshape(-1))  # fmt: skip
                        opt.zero_grad(set_to_none=True)
                        loss.backward()
                        opt.step()
                with torch.no_grad():
                    acc = float((model(x_te).argmax(-1) == y_te).float().mean())
                    A, _ = model.attention(x_te)  # [n, L, L]
                    same = (x_te[:, :, None] == x_te[:, None, :]).float()
                    others = same * (1 - torch.eye(L))  # same token, other position
                    rows.append({
                        "model": kind, "seed_index": s, "test_accuracy": acc, "final_loss": float(loss),
                        "self_mass": float(torch.diagonal(A, dim1=-2, dim2=-1).mean()),
                        "same_token_mass": float((A * others).sum(-1).mean()),
                        "same_token_mass_uniform": float(others.mean(-1).mean()),
                        "input_dependence": float(A.std(0).mean()),
                    })  # fmt: skip
    return rows
