"""The engine of Part II's finite-d experiments (pt = phase transition): batched GD on the task.

The authors' protocol (``src/empirics_mixed_teacher_softmax.py`` in their repository): full-batch
gradient descent (``torch.optim.SGD``, lr 0.15, weight decay ``lam``) on the *summed* risk
``sum_mu ||f_Q(x^mu) - y^mu||^2 / (2d) + lam/2 ||Q||^2`` for 5000 steps, from the semantic start
``Q = Q*`` or the positional start ``Q = 1_d/sqrt(d)``. The learning rate multiplies the gradient
of the *sum* over the ``n = alpha d`` samples, not of the mean; we keep that normalisation.

:func:`train_batched` builds one :class:`attnlab.models.TiedLowRankAttention` (or a variant) that
holds every run at once, ``Q`` of shape ``[n_inits, n_seeds, d, r]``, and trains it with
:func:`attnlab.train.train` on the per-run risks of its fast (Gram) form
(:meth:`~attnlab.models.TiedLowRankAttention.risk`); the model documents why this is exact and
fast. This module only sets up the teachers, the data and the starts, and evaluates the result.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlab.experiments import Result, get, load_result, names, run
from attnlab.models import TiedLowRankAttention, TiedLowRankAttentionWithValue, UntiedLowRankAttention
from attnlab.tasks import phase_transition as ps
from attnlab.train import train
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

__all__ = [
    "INITS",
    "alpha_grid",
    "book_run",
    "lowest_risk_at_overlap",
    "rows_from",
    "run_alphas",
    "summarize",
    "train_batched",
]


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

    ``optimizer="gd"`` is the authors' full-batch GD (lr on the summed risk); ``"adam"`` is Adam
    with coupled weight decay ``lam``, as ``torch.optim.Adam`` (their Adam runs: lr 0.01, 2500
    steps); both are :func:`attnlab.train.train` with :mod:`attnlab.optim`.
    ``normalize_teacher=True`` rescales each ``Q*`` to norm ``sqrt(d)``: then ``rho = sigma^2
    ||Q*||^2 / d`` equals ``sigma^2`` exactly instead of fluctuating by ``O(1/sqrt(d))`` from seed to
    seed, a variance reduction for comparisons with the ``d -> infinity`` theory (the authors did not
    normalise). ``tied=False`` trains :class:`~attnlab.models.UntiedLowRankAttention` (a separate
    key ``K``, started like ``Q``); ``value="learned"`` trains
    :class:`~attnlab.models.TiedLowRankAttentionWithValue` (a value matrix ``W``, ``[d, d]``, started
    at the identity, weight decay ``lam``); one variant at a time. ``fast=True`` uses the model's
    hand-written gradient for tied rank-one GD (about twice as fast as autograd; the tests check
    that both give the same runs).
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


def _model(inits, teacher, r, gen, *, tied, value, dtype):
    """One model holding every run, ``Q`` ``[I, S, d, r]``, started as ``inits`` say (rows: runs)."""
    Q0 = torch.stack([_initial_Q(i, teacher, r, gen) for i in inits])  # [I, S, r, d]
    S_, d = teacher.Q_star.shape
    cls = TiedLowRankAttention if tied else UntiedLowRankAttention
    if value == "learned":
        if not tied:
            raise ValueError("tied must be True when value='learned' (one variant at a time)")
        cls = TiedLowRankAttentionWithValue
    return cls(d, r, init=Q0.transpose(-1, -2), runs=(len(inits), S_), dtype=dtype)


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
    data = TiedLowRankAttention.reduce(X, Y, mask)
    B = ps.fit_positional_linear(Z * mask[..., None, None], Y * mask[..., None, None], lam=lam_lin)
    del X, Y, Z

    model = _model(inits, teacher, r, gen, tied=tied, value=value, dtype=dtype)
    fast = fast and optimizer == "gd"  # Adam runs keep autograd's gradient (their published protocol)
    Q_star = teacher.Q_star[None].expand(I, S_, d)
    callbacks = {"penalty": lambda m: m.penalty()}
    if record_every:
        callbacks["overlaps"] = lambda m: ps.overlaps(m.Q.detach()[..., 0], Q_star, sigma=sigma)
    history = train(
        model,
        lambda m, *batch: m.risk(type(data)(*batch), fast=fast),  # per-run summed risk, [I, S]
        tuple(data),  # full batch: every field leads with the runs dimension S
        optimizer=optimizer,
        lr=lr,
        steps=steps,
        weight_decay=lam,
        dtype=dtype,
        device=device,
        callbacks=callbacks,
        record_every=record_every or max(steps, 1),
    )
    eps_t = (history.loss[-1] + 0.5 * lam * history.tracked["penalty"][-1]) / d  # [I, S]

    with torch.no_grad():
        # fresh test data, in chunks that keep memory bounded (~1e7 numbers per chunk)
        chunk = max(1, min(n_test, int(1e7 // (S_ * 2 * d))))
        err_sum = torch.zeros(I, S_, dtype=torch.float64, device=device)
        lin_sum = torch.zeros(S_, dtype=torch.float64, device=device)
        done = 0
        while done < n_test:
            kk = min(chunk, n_test - done)
            Xc, Yc, Zc = ps.sample(kk, teacher, seed=gen, correlation=correlation)
            err_sum += model.risk(TiedLowRankAttention.reduce(Xc, Yc)).double()
            lin_sum += ps.linear_error(B, Zc, Yc).double() * kk
            done += kk
        ov = ps.overlaps(model.Q.detach()[..., 0], Q_star, sigma=sigma)
    out = {
        "eps_g": (err_sum / n_test).cpu().numpy(),
        "eps_t": np.asarray(eps_t, dtype=np.float64),
        "m": np.abs(ov["m"]),
        "theta_over_sigma2": np.abs(ov["theta"]) / sigma**2,
        "q": ov["q"],
        "eps_lin": (lin_sum / n_test).cpu().numpy(),
    }
    if record_every:
        penalty = np.stack(history.tracked["penalty"])
        out["curve_steps"] = np.asarray(history.steps)
        out["curve_eps_t"] = ((np.stack(history.loss) + 0.5 * lam * penalty) / d).astype(np.float64)
        overlaps = history.tracked["overlaps"]
        out["curve_m"] = np.abs(np.stack([ov["m"] for ov in overlaps]))
        out["curve_theta_over_sigma2"] = np.abs(np.stack([ov["theta"] for ov in overlaps])) / sigma**2
    return out


def lowest_risk_at_overlap(
    *,
    alpha,
    omega: float,
    branch: str,
    values,
    d: int,
    seed: int = 0,
    sigma: float = 0.5,
    lam: float = 0.01,
    A=None,
    max_iter: int = 5000,
) -> list[dict]:
    """The lowest training loss found at finite ``d`` with the branch's order parameter held fixed.

    The finite-d counterpart of :func:`attnlab.theory.phase_transition.constrained`: for one teacher
    (normalised, ``||Q*||^2 = d``) and one training set of ``n = alpha d`` samples, minimise the
    regularised risk ``eps_t = (sum_mu ||f_Q - y||^2/(2d) + lam/2 ||Q||^2) / d`` over students with
    ``Q*^T Q / d = value`` and ``m = 0`` (``branch="semantic"``), or with ``m = value`` and
    ``theta = 0`` (``"positional"``): ``Q = a e + w``, with ``e`` the component of ``Q*`` (or of
    ``1``) orthogonal to the other direction and ``w`` orthogonal to both. ``w`` is found by
    L-BFGS (scipy, float64, projected gradient below 1e-9 or ``max_iter`` iterations), by
    continuation along ``values`` in both directions from a small random start; at each value the
    lower of the two results is kept. The landscape is not convex, so this is the lowest loss
    *found*, an upper bound on the minimum at that overlap. One row per value: ``value``, ``eps_t``,
    ``q``, ``grad`` (the norm of the projected gradient of the summed risk at the result), and the
    result's ``m`` and ``theta_over_sigma2`` (one is ``value``, the other 0, to rounding).
    """
    from scipy.optimize import minimize

    alpha = check_positive("alpha", alpha)
    omega = check_real("omega", omega, minimum=0.0, maximum=1.0)
    branch = check_choice("branch", branch, ("semantic", "positional"))
    values = [check_real("values", v) for v in np.atleast_1d(np.asarray(values, dtype=float))]
    if not values:
        raise ValueError("values must be a non-empty sequence of overlaps")
    d = check_int("d", d, minimum=2)
    sigma, lam = check_positive("sigma", sigma), check_real("lam", lam, minimum=0.0)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    dtype = torch.float64
    gen = make_generator(seed)
    teacher = ps.make_teacher(d, omega, sigma=sigma, A=A, n_seeds=1, seed=gen, dtype=dtype)
    teacher.Q_star *= d**0.5 / teacher.Q_star.norm(dim=-1, keepdim=True)
    X, Y, _ = ps.sample(max(1, int(round(alpha * d))), teacher, seed=gen)
    data = TiedLowRankAttention.reduce(X, Y)
    del X, Y
    model = TiedLowRankAttention(d, 1, init=teacher.Q_star[:, :, None].clone(), runs=(1,), dtype=dtype)
    Q_star, ones = teacher.Q_star[0], torch.ones(d, dtype=dtype)
    held, other = (Q_star, ones) if branch == "semantic" else (ones, Q_star)
    other = other / other.norm()
    e = held - (other @ held) * other  # the held direction, orthogonal to the other one
    e_hat = e / e.norm()

    def project(w):  # onto the complement of span(e, other)
        w = w - (other @ w) * other
        return w - (e_hat @ w) * e_hat

    def loss_grad(Q):
        model.zero_grad()
        with torch.no_grad():
            model.Q.copy_(Q.reshape(1, d, 1))
        loss = model.risk(data, fast=False).sum() + 0.5 * lam * model.Q.square().sum()
        loss.backward()
        return loss.item(), model.Q.grad[0, :, 0].clone()

    def at(value, w0):
        a = value * d / (held @ e).item()  # held^T Q / d = value

        def f(v):
            loss, g = loss_grad(a * e + project(torch.from_numpy(v)))
            return loss, project(g).numpy()

        opts = {"maxiter": max_iter, "maxcor": 50, "gtol": 1e-9, "ftol": 1e-15}
        res = minimize(f, project(w0).numpy(), jac=True, method="L-BFGS-B", options=opts)
        w = project(torch.from_numpy(res.x))
        Q = a * e + w
        loss, g = loss_grad(Q)
        row = {
            "eps_t": loss / d,
            "q": sigma**2 * Q.square().sum().item() / d,
            "grad": project(g).norm().item(),
        }
        row |= {"m": (ones @ Q).item() / d, "theta_over_sigma2": (Q_star @ Q).item() / d}
        return row, w

    start = 0.5 * project(torch.randn(d, dtype=dtype, generator=gen))
    best: dict = {}
    for order in (sorted(values, reverse=True), sorted(values)):
        w = start
        for value in order:
            row, w = at(value, w)
            if value not in best or row["eps_t"] < best[value]["eps_t"]:
                best[value] = row
    return [{"value": v, **best[v]} for v in sorted(best)]


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


def book_run(name: str, **overrides) -> Result:
    """Part II experiment ``name`` at book scale: the committed result, or a new run with ``overrides``.

    Without overrides it loads the result committed with the library and checks that its
    configuration is the one registered for ``book`` (a stale result raises ``RuntimeError``; the
    command that made it is in its ``meta``, and the lab notes list every one). With overrides
    (e.g. ``book_run("pt_untied", n_seeds=12)``) it runs the experiment anew with the book
    configuration so changed, through :func:`attnlab.experiments.run` (cached on disk; an unknown
    key raises ``ValueError`` there). ``name`` must be a registered
    Part II experiment (``pt_...``), else ``ValueError``.
    """
    known = [n for n in names() if n.startswith("pt_")]
    if name not in known:
        raise ValueError(f"name must be a registered Part II experiment ({', '.join(known)}), got {name!r}")
    if overrides:
        return run(name, "book", overrides=overrides)
    result = load_result(name, "book")
    if result.config != get(name).config("book"):
        raise RuntimeError(
            f"the committed {name}-book result was run with {result.config}, not the registered "
            f"configuration {get(name).config('book')}: run it again ({result.meta.get('command', '')})"
        )
    return result
