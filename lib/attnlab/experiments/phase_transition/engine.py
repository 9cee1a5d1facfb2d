"""The engine of Part II's finite-d experiments (pt = phase transition): batched GD on the task.

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
  adjoint, which is what autograd differentiates. ``tests/test_pt_task.py`` checks
  the reduced risk and its gradient against :class:`attnlab.models.TiedLowRankAttention`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlab.tasks import phase_transition as ps
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


def alpha_grid(config: dict) -> list[float]:
    """``linspace(alpha_min, alpha_max, n_alpha)[::alpha_every]``: the authors' grid is
    ``linspace(0.01, 2, 25)``; ``alpha_every`` > 1 keeps every k-th point (reduced runs)."""
    grid = np.linspace(
        config["alpha_min"], config["alpha_max"], check_int("n_alpha", config["n_alpha"], minimum=1)
    )
    return [float(a) for a in grid[:: check_int("alpha_every", config["alpha_every"], minimum=1)]]


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
