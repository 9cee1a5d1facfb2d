"""Tests of attnlab.tasks.histogram and the Part I models (LinearSelfAttention, SoftmaxSelfAttention)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from attnlab.models import LinearSelfAttention, SoftmaxSelfAttention
from attnlab.tasks import histogram as th


def all_sequences(N, d):
    """Every sequence of length N over [d] as one-hot X [d**N, N, d] (for exact expectations)."""
    tokens = torch.tensor(list(itertools.product(range(d), repeat=N)))
    return tokens, th.one_hot(tokens, d)


# ---------------------------------------------------------------- sampling and targets


def test_sample_shapes_dtype_and_seed():
    X = th.sample_sequences(5, 7, 4, seed=3)
    assert X.shape == (5, 7, 4) and X.dtype == torch.float64
    assert torch.all(X.sum(-1) == 1)
    assert torch.equal(X, th.sample_sequences(5, 7, 4, seed=3))
    assert not torch.equal(X, th.sample_sequences(5, 7, 4, seed=4))
    tok = th.sample_tokens(2000, 10, 3, seed=0, probs=[0.0, 0.5, 0.5])
    assert tok.shape == (2000, 10) and int(tok.min()) == 1


def test_counts_and_histogram_targets_by_hand():
    tokens = torch.tensor([[0, 2, 0, 1, 0]])
    X = th.one_hot(tokens, 3)
    assert th.counts(X).tolist() == [[3.0, 1.0, 1.0]]
    assert th.targets(X, th.histogram_matrix(3)).tolist() == [[3.0, 1.0, 3.0, 1.0, 3.0]]
    # next letter (cyclic): token a counts letter a+1 mod 3
    assert th.targets(X, th.next_letter_matrix(3)).tolist() == [[1.0, 3.0, 1.0, 1.0, 1.0]]
    # classes {0} and {1, 2}
    assert th.targets(X, th.class_matrix([0, 1, 1])).tolist() == [[3.0, 2.0, 3.0, 2.0, 3.0]]
    assert th.targets(X[0], th.length_matrix(3)).tolist() == [5.0] * 5  # unbatched


def test_task_matrices():
    assert np.array_equal(th.task_matrix("histogram", 4), np.eye(4))
    P = th.task_matrix("next_letter", 4)
    assert np.array_equal(P @ P.T, np.eye(4)) and P[3, 0] == 1 and P[0, 1] == 1
    C = th.task_matrix("classes", 4)
    assert np.array_equal(C, np.kron(np.eye(2), np.ones((2, 2))))
    assert np.array_equal(th.task_matrix("histogram+next_letter", 4), np.eye(4) + P)
    assert np.array_equal(th.permutation_matrix([1, 0, 2])[0], [0.0, 1.0, 0.0])


def test_sampler_for_train():
    sample = th.make_sampler(8, 5, th.next_letter_matrix(5))
    X, y = sample(16, torch.Generator().manual_seed(0))
    assert X.shape == (16, 8, 5) and y.shape == (16, 8)
    assert torch.allclose(y, th.targets(X, th.next_letter_matrix(5)))


@pytest.mark.parametrize("probs", [None, [0.5, 0.3, 0.2]])
def test_count_moments_exact_by_enumeration(probs):
    N, d = 4, 3
    tokens, X = all_sequences(N, d)
    p = np.full(d, 1 / d) if probs is None else np.asarray(probs)
    weight = torch.as_tensor(np.prod(p[tokens.numpy()], axis=1))  # probability of each sequence
    h = th.counts(X)
    exact = torch.einsum("s,sa,sb,sc->abc", weight, h, h, h).numpy()
    assert np.abs(th.count_moments(N, d, probs) - exact).max() < 1e-12


def test_count_moments_small_N():
    # N = 1: h = e_x, so S[a, a, a] = p_a and everything else vanishes
    assert np.allclose(th.count_moments(1, 3), np.einsum("ab,ac->abc", np.eye(3), np.eye(3)) / 3)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: th.sample_tokens(0, 5, 3), "n_seq"),
        (lambda: th.sample_tokens(2, 0, 3), "N"),
        (lambda: th.sample_tokens(2, 5, 0), "d"),
        (lambda: th.sample_tokens(2, 5, 3, seed=-1), "seed"),
        (lambda: th.sample_tokens(2, 5, 3, probs=[0.5, 0.5]), "probs"),
        (lambda: th.one_hot(torch.tensor([0, 3]), 3), "tokens"),
        (lambda: th.one_hot(torch.tensor([0.5]), 3), "tokens"),
        (lambda: th.counts(torch.ones(2, 3, 4)), "X"),
        (lambda: th.counts(torch.ones(4)), "X"),
        (lambda: th.targets(th.sample_sequences(2, 3, 4), np.eye(3)), "M"),
        (lambda: th.targets(th.sample_sequences(2, 3, 2), [[np.nan, 0], [0, 1]]), "M"),
        (lambda: th.permutation_matrix([0, 0, 1]), "perm"),
        (lambda: th.permutation_matrix([0.0, 1.0]), "perm"),
        (lambda: th.class_matrix([]), "labels"),
        (lambda: th.task_matrix("reverse", 4), "name"),
        (lambda: th.next_letter_matrix(4, shift=1.5), "shift"),
        (lambda: th.make_sampler(5, 3, np.eye(4)), "M"),
        (lambda: th.count_moments(0, 3), "N"),
        (lambda: th.count_moments(3, 2, probs=[0.2, 0.2]), "probs"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- models


def test_linear_attention_forward_is_the_reduced_form():
    d, N = 5, 9
    model = LinearSelfAttention(d, init_scale=1.0, seed=1)
    X = th.sample_sequences(4, N, d, seed=0)
    f, A = model(X, return_scores=True)
    assert f.shape == (4, N) and A.shape == (4, N, N)
    h = th.counts(X)
    reduced = torch.einsum("bnd,de,e,be->bn", X, model.W, model.v, h)  # f = X W Diag(v) h
    assert torch.allclose(f, reduced, atol=1e-12)
    assert torch.allclose(A, model.scores(X)) and torch.allclose(model(X[0]), f[0])
    assert model.Q is model.W


def test_linear_attention_histogram_solution_counts():
    d = 4
    v = torch.tensor([0.5, 2.0, -1.0, 3.0])
    model = LinearSelfAttention(d, W0=torch.diag(1 / v), v0=v)
    X = th.sample_sequences(3, 11, d, seed=2)
    assert torch.allclose(model(X), th.targets(X, np.eye(d)), atol=1e-12)


def test_softmax_attention_rows_are_convex():
    model = SoftmaxSelfAttention(4, init_scale=1.0, seed=0)
    X = th.sample_sequences(3, 6, 4, seed=0)
    f, A = model(X, return_scores=True)
    assert torch.allclose(A.sum(-1), torch.ones(3, 6, dtype=A.dtype))
    assert torch.all(f <= model.v.max() + 1e-12) and torch.all(f >= model.v.min() - 1e-12)


def test_model_init_is_seeded_and_typed():
    a = LinearSelfAttention(3, seed=5, dtype="float32")
    b = LinearSelfAttention(3, seed=5, dtype="float32")
    assert a.W.dtype == torch.float32 and torch.equal(a.W, b.W) and torch.equal(a.v, b.v)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: LinearSelfAttention(0), "d"),
        (lambda: LinearSelfAttention(3, init_scale=-1.0), "init_scale"),
        (lambda: LinearSelfAttention(3, W0=np.eye(2)), "W0"),
        (lambda: LinearSelfAttention(3, v0=np.ones(4)), "v0"),
        (lambda: LinearSelfAttention(3, v0=[np.inf, 0, 0]), "v0"),
        (lambda: LinearSelfAttention(3, dtype="int8"), "dtype"),
        (lambda: LinearSelfAttention(3)(torch.ones(2, 5, 4)), "X"),
        (lambda: LinearSelfAttention(3)(np.ones((2, 5, 3))), "X"),
    ],
)
def test_model_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- experiments


def test_part1_experiments_are_registered_and_run():
    from attnlab import experiments

    assert {"hist_sgd", "hist_plateau"} <= set(experiments.names())
    res = experiments.run(
        "hist_plateau", overrides={"d": 3, "scales": [1e-2, 1e-4], "n_seeds": 1}, cache=False
    )
    T = res.column("T")
    assert T.shape == (2,) and T[1] > T[0]
    res = experiments.run("hist_sgd", overrides={"steps": 4, "record_every": 2, "n_test": 10}, cache=False)
    assert res.column("step").tolist() == [0, 2, 4] and np.all(np.isfinite(res.column("loss")))


def test_hist_saddle_and_hist_overshoot_at_small_settings():
    from attnlab import experiments

    res = experiments.run("hist_saddle", overrides={"d": 3, "eps": [0.0, 1e-3, 1e-6]}, cache=False)
    assert res.column("moved")[0] == 0.0 and res.column("loss_end")[0] == 0.5  # the saddle stays
    T = res.column("T")
    assert np.isnan(T[0]) and T[2] > T[1] and res.column("loss_end")[2] < 1e-10
    res = experiments.run("hist_overshoot", overrides={"d": 3, "N": 5, "n_seeds": 1, "n_t": 51}, cache=False)
    seed = res.column("seed")
    assert sorted(set(seed.tolist())) == [-1, 0] and np.all(np.isnan(res.column("mean_df")[seed == -1]))
    assert res.column("mean_tf")[seed == 0][0] < 1e-6  # from sigma = 1e-4 the mean mode starts near 0


def test_train_sgd_bad_attention():
    from attnlab.experiments.histogram import train_sgd

    with pytest.raises(ValueError, match="attention"):
        train_sgd(d=3, N=4, attention="relu")


def test_plateau_sweep_on_l_tf_has_the_escape_rate_of_the_linearised_flow():
    from attnlab.experiments.histogram import plateau_sweep
    from attnlab.theory import diagonal_net as dn

    d, N = 3, 4
    rows = plateau_sweep(d=d, task="histogram", scales=[1e-3, 1e-6], n_seeds=1, N=N)
    slope = (rows[1]["T"] - rows[0]["T"]) / np.log(1e6)  # against log(1/sigma^2)
    c_norm = dn.escape_rates(th.histogram_matrix(d), th.count_moments(N, d))
    assert np.allclose(c_norm, c_norm[0]) and abs(slope * 2 * c_norm[0] - 1) < 0.02
    with pytest.raises(ValueError, match="N"):
        plateau_sweep(d=d, task="histogram", scales=[1e-3], n_seeds=1, N=1)


def test_rate_sweep_measures_the_predicted_asymptotic_rate():
    from attnlab.experiments.histogram import rate_sweep

    rows = rate_sweep(d=3, scales=[0.3, 1.0], seed=1) + rate_sweep(d=3, scales=[0.5], seed=1, N=4)
    for row in rows:
        assert abs(row["measured"] / row["predicted"] - 1) < 0.02 and row["t_1e-8"] > 0
    assert rows[1]["predicted"] < rows[0]["predicted"]  # larger sigma, more negative delta, slower
    with pytest.raises(ValueError, match="scales"):
        rate_sweep(d=3, scales=[-1.0])


def test_hist_rates_committed_result_is_what_todays_code_computes():
    # the chapters load the committed paper-scale result; re-derive two of its rows
    from attnlab import experiments
    from attnlab.experiments.histogram import rate_sweep

    committed = experiments.load_result("hist_rates", "paper")
    assert committed.config["seed"] == 0 and len(committed.rows) == 16
    for kwargs, loss in ((dict(d=6, scales=[0.3]), "l_df"), (dict(d=6, scales=[1.0], N=10), "l_tf")):
        (row,) = rate_sweep(**kwargs, seed=0)
        same = [r for r in committed.rows if r["loss"] == loss and r["d"] == 6]
        (old,) = [r for r in same if np.isclose(r["sigma"], row["sigma"])]
        for key in ("predicted", "measured", "measured_loss", "t_1e-8"):
            assert abs(row[key] / old[key] - 1) < 1e-6, key
    book = experiments.run("hist_rates", cache=False)
    assert {r["loss"] for r in book.rows} == {"l_df", "l_tf"} and len(book.rows) == 3


# ---------------------------------------------------------------- exercise self-checks


def test_verify_task_solution_on_a_right_and_a_wrong_answer():
    from attnlab.models.linear_attention import verify_task_solution

    d = 4
    v = torch.full((d,), 2.0)  # float32, as a reader would write it: the checker converts
    W = torch.ones(d, 1) @ (1 / v)[None, :]
    assert "Correct" in verify_task_solution(W, v, th.length_matrix(d))
    with pytest.raises(AssertionError, match="W Diag"):  # the histogram's solution, not the length's
        verify_task_solution(torch.diag(1 / v), v, th.length_matrix(d))
    with pytest.raises(ValueError, match="M"):
        verify_task_solution(W, v, np.ones(3))


def test_verify_count_moments_on_a_right_and_two_wrong_answers():
    N, p = 7, np.array([0.5, 0.3, 0.2])
    d = p.size
    N2, N3, I = N * (N - 1), N * (N - 1) * (N - 2), np.eye(d)
    right = (
        N3 * np.einsum("a,b,c->abc", p, p, p)
        + N2 * (np.einsum("ab,a,c->abc", I, p, p) + np.einsum("ac,a,b->abc", I, p, p))
        + N2 * np.einsum("bc,a,b->abc", I, p, p)
        + N * np.einsum("ab,ac,a->abc", I, I, p)
    )
    assert "Correct" in th.verify_count_moments(right, N, p)
    with pytest.raises(AssertionError, match="uniform"):
        th.verify_count_moments(th.count_moments(N, d), N, p)
    without_one_token_term = right - N * np.einsum("ab,ac,a->abc", I, I, p)
    with pytest.raises(AssertionError, match="a = b = c"):
        th.verify_count_moments(without_one_token_term, N, p)


def test_verify_scaled_map_on_a_right_a_transposed_and_a_wrong_answer():
    tokens = np.array([0, 1, 1, 2, 4, 5, 5])
    M = th.next_letter_matrix(6)
    right = M[np.ix_(tokens, tokens)]
    assert "Correct" in th.verify_scaled_map(right, tokens, M)
    with pytest.raises(AssertionError, match="transposed"):
        th.verify_scaled_map(right.T, tokens, M)
    with pytest.raises(AssertionError, match="M\\[x_i, x_j\\]"):
        th.verify_scaled_map(np.eye(tokens.size), tokens, M)


def test_committed_paper_results_of_part1_are_what_todays_code_computes():
    # the chapters and lab notes load these files; re-derive a cheap part of each
    from attnlab import experiments
    from attnlab.experiments.histogram import hist_overshoot, hist_saddle, plateau_sweep, train_sgd

    sgd = experiments.load_result("hist_sgd", "paper")
    config = {**sgd.config, "steps": 100, "n_test": sgd.config["n_test"]}
    _, history = train_sgd(**config)
    first = history.as_arrays()
    for key in ("loss", "test_err"):
        committed = sgd.column(key)[: len(first[key])]
        assert np.allclose(first[key], committed, rtol=1e-6, atol=0), key

    plateau = experiments.load_result("hist_plateau", "paper")
    c = plateau.config
    rows = plateau_sweep(d=c["d"], task=c["task"], scales=[1e-2, 1e-6], n_seeds=1, fraction=c["fraction"])
    for row in rows:
        (old,) = [r for r in plateau.rows if r["seed"] == 0 and np.isclose(r["scale"], row["scale"])]
        assert abs(row["T"] / old["T"] - 1) < 1e-6

    over = experiments.load_result("hist_overshoot", "paper")
    new = hist_overshoot({**over.config, "n_seeds": 1}, "cpu")
    for seed in (-1, 0):
        ours = np.array([r["mean_tf"] for r in new if r["seed"] == seed])
        assert np.allclose(ours, over.column("mean_tf")[over.column("seed") == seed], rtol=1e-6, atol=1e-12)

    saddle = experiments.load_result("hist_saddle", "paper")
    new = hist_saddle({**saddle.config, "eps": [0.0, 1e-6]}, "cpu")
    for row in new:
        (old,) = [r for r in saddle.rows if r["eps"] == row["eps"]]
        # float64 sums: BLAS kernels of other CPUs move the last bits (1.7e-14 relative, measured)
        assert np.isclose(row["moved"], old["moved"], rtol=1e-12, atol=0) and np.isclose(
            row["loss_end"], old["loss_end"], rtol=1e-5, atol=1e-20
        )
        assert np.isnan(old["T"]) if np.isnan(row["T"]) else abs(row["T"] / old["T"] - 1) < 1e-6


def test_hist_sign_df_and_hist_finite_committed_results_are_what_todays_code_computes():
    from attnlab import experiments
    from attnlab.experiments.histogram import hist_finite, hist_sign_df

    signs = experiments.load_result("hist_sign_df", "paper")
    first = hist_sign_df({**signs.config, "n_starts": 4}, "cpu")  # the same generator, fewer starts
    for row, old in zip(first, signs.rows[:4], strict=True):
        assert row["exact"] == old["exact"] and row["small"] == old["small"]
        assert row["scale"] == old["scale"] and row["error_ratio"] < 0.5
    finite = experiments.load_result("hist_finite", "paper")
    c = finite.config
    (row,) = hist_finite({**c, "scales": [1e-2], "t_ends": [c["t_ends"][1]], "n_seeds": 1}, "cpu")
    (old,) = [r for r in finite.rows if r["seed"] == 0 and np.isclose(r["sigma"], 1e-2)]
    P_new = np.array([row[f"P{i}"] for i in range(36)])
    P_old = np.array([old[f"P{i}"] for i in range(36)])
    assert np.abs(P_new - P_old).max() < 1e-6 and np.isclose(row["test_loss"], old["test_loss"], rtol=1e-6)
    with pytest.raises(ValueError, match="t_ends"):
        hist_finite({**c, "t_ends": [1.0]}, "cpu")


def test_hist_sign_rule_committed_result_is_what_todays_code_computes():
    from attnlab import experiments
    from attnlab.experiments.histogram import hist_sign_rule

    committed = experiments.load_result("hist_sign_rule", "paper")
    new = hist_sign_rule({**committed.config, "tasks": ["next_letter"], "n_seeds": 2}, "cpu")
    old = [r for r in committed.rows if r["task"] == "next_letter" and r["seed"] < 2]
    assert len(new) == len(old) == 2 * 2 * 6
    for a, b in zip(new, old, strict=True):
        assert (a["loss"], a["k"], a["predicted"], a["final"]) == (
            b["loss"],
            b["k"],
            b["predicted"],
            b["final"],
        )
        assert abs(a["r0"] - b["r0"]) < 1e-9


def test_sgd_below_the_stability_threshold_is_not_fastest_at_the_largest_step():
    # ex-part1-lr: after 300 steps, learning rate 0.05 (still stable) is further from the
    # solution than 0.04, and 0.06 fails: the rate does not grow with the step up to the threshold
    from attnlab.experiments.histogram import train_sgd

    final, models = {}, {}
    for lr in (0.04, 0.05, 0.06):
        models[lr], history = train_sgd(d=6, N=10, lr=lr, steps=300, seed=0, record_every=300, n_test=500)
        final[lr] = history.as_arrays()["test_err"][-1]
    assert final[0.04] < final[0.05] < 1e-6 and final[0.06] > 1
    # why 0.05 converges: above 2 / lambda_max where gradient flow from the same start ends, below it
    # at the flatter minimum where SGD ends
    from attnlab.theory import diagonal_net as dn

    S = th.count_moments(10, 6)
    start = LinearSelfAttention(6, init_scale=0.1, seed=0)
    Q_lim, v_lim = dn.limit_point(start.W.detach().numpy(), start.v.detach().numpy(), np.eye(6), S=S)
    lam_flow = np.linalg.eigvalsh(dn.hessian(Q_lim, v_lim, np.eye(6), S))[-1]
    W, v = (p.detach().numpy() for p in (models[0.05].W, models[0.05].v))
    lam_sgd = np.linalg.eigvalsh(dn.hessian(W, v, np.eye(6), S))[-1]
    assert 2 / lam_flow < 0.05 < 2 / lam_sgd
