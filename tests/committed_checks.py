"""The re-derivations of committed results that need a function of their own (:class:`committed.Check`).

Each returns rows to compare with the committed ones, computed by the experiment's own code from
the committed configuration (or from committed rows: a model rebuilt from its stored weights, the
start of a Monte-Carlo step, the runs a table was spliced from).
"""

from __future__ import annotations

import functools
from pathlib import Path

from committed import RESULTS, committed_config

from attnlab import experiments as ex

# ------------------------------------------------------------------------------------------------
# Part III
# ------------------------------------------------------------------------------------------------


def spliced_table(res) -> list[dict]:
    """The CPU table spliced again by today's :func:`splice` from the committed runs it was made
    of (its base, the runs that replace some of its models and the learning-rate sweeps, which
    must choose the recipe's rates), with today's registered recipe."""
    import tempfile

    from attnlab.experiments.in_context.reproduce import CPU_TABLE_RUNS, splice_table

    runs = [CPU_TABLE_RUNS["base"], *CPU_TABLE_RUNS["replacements"], *CPU_TABLE_RUNS["lr_sweep"]]
    with tempfile.TemporaryDirectory() as out:
        path = splice_table(dict.fromkeys(runs, RESULTS), out, scale=res.scale)
        return ex.load_result(res.name, res.scale, directory=Path(path).parent).rows


@functools.lru_cache(maxsize=3)  # icl_beyond's runs and icl_bayes_floor share prompt sets (~0.1 GB each)
def _beyond_data(noise: tuple, d: int, n: int, n_eval: int, eval_seed: int):
    from attnlab.experiments.in_context import beyond

    data = beyond._eval_data(list(noise), {"d": d, "n": n, "n_eval": n_eval, "eval_seed": eval_seed})
    return data, beyond._oracle_sq(list(noise), data)


def _beyond(res, noise):
    """icl_beyond's evaluation prompts of ``noise`` and the oracle's loss on them, as the run drew them."""
    config = committed_config(res.name + "-" + res.scale)
    keys = tuple(config[k] for k in ("d", "n", "n_eval", "eval_seed"))
    return (config, *_beyond_data(tuple(noise), *keys))


def _model_row(group, model_name, L, noise, seed, model, config, data, osq) -> dict:
    from attnlab.experiments.in_context import beyond

    pred = beyond._predict(model, data["X"], data["y"][noise], data["x_query"], config["chunk"])
    sq = 0.5 * (pred - data["target"]) ** 2
    return {"kind": "model", "group": group, "model": model_name, "n_layers": L, "noise": noise, "seed": seed,
            "adjusted": float((sq - osq[noise]).mean()), "loss": float(sq.mean()),
            "oracle_loss": float(osq[noise].mean())}  # fmt: skip


def beyond_baselines(noise: str):
    """icl_beyond's baseline rows of ``noise`` (Bayes-optimal, ConstRR) computed again."""

    def fn(res):
        from attnlab.experiments.in_context import beyond

        config, data, osq = _beyond(res, [noise])
        return beyond._baseline_rows([noise], data, osq, config)

    return fn


def beyond_construction(L: int):
    """icl_beyond's Thm 5.1 construction rows at depth ``L`` with the worst-case and the
    Marchenko-Pastur bounds, computed again (the run's tuning prompts cut to 100: the tuned
    bounds' row, which depends on them, is left out)."""

    def fn(res):
        from attnlab.experiments.in_context import beyond

        config = {**committed_config(res.name + "-" + res.scale), "gdpp_depths": [L], "n_tune": 100}
        return [r for r in beyond._construction_rows(config) if r["bounds"] != "tuned"]

    return fn


def beyond_gdpp(L: int, seed: int):
    """icl_beyond's trained GD++ with ``L`` layers rebuilt from its stored omegas (``kind="omega"``:
    GD++ has two free omegas per layer) and evaluated again on the noiseless evaluation prompts."""

    def fn(res):
        import torch

        from attnlab.models import LinearTransformer

        om = sorted((r["layer"], r["omega_xx"], r["omega_yx"]) for r in res.rows
                    if r["kind"] == "omega" and r["n_layers"] == L and r["seed"] == seed)  # fmt: skip
        model = LinearTransformer(10, L, 1, "gdpp", diag_mode="omega", dtype="float64")
        with torch.no_grad():
            model.omega.copy_(torch.tensor([[xx, 0.0, yx, 0.0] for _, xx, yx in om], dtype=torch.float64))
        config, data, osq = _beyond(res, ["fixed:0"])
        return [
            _model_row("gdpp", "gdpp", L, "fixed:0", seed, model.requires_grad_(False), config, data, osq)
        ]

    return fn


def beyond_gated(noise: str, seed: int):
    """A gated model of a run that kept its omegas (``kind="gate_omega"``) rebuilt from its gate and
    omega rows, as chapter 06 does, and evaluated again on the run's evaluation prompts."""

    def fn(res):
        import torch

        from attnlab.models import GatedLinearTransformer

        def layers(kind, cols):
            rows = sorted((r["layer"], [r[c] for c in cols]) for r in res.rows
                          if r["kind"] == kind and r["noise"] == noise and r["seed"] == seed)  # fmt: skip
            return torch.tensor([v for _, v in rows], dtype=torch.float64)

        gate = layers("gate", ("a", "b", "c"))
        omega = layers("gate_omega", ("omega_xx", "omega_xy", "omega_yx", "omega_yy"))
        model = GatedLinearTransformer(10, len(gate), diag_mode="omega", init_scale=0.0, dtype="float64",
                                       features=res.config.get("gate_features", "raw"))  # fmt: skip
        with torch.no_grad():
            model.gate.copy_(gate)
            model.omega.copy_(omega)
        config, data, osq = _beyond(res, [noise])
        L = len(gate)
        return [_model_row("gated", "gla", L, noise, seed, model.requires_grad_(False), config, data, osq)]

    return fn


def bayes_floor_oracle(res) -> list[dict]:
    """icl_bayes_floor's oracle column of every block: its prompts (icl_beyond's evaluation
    prompts, drawn again) and the oracle ridge on them (float64); the Bayes columns are Gibbs
    chains on the run's device (see :data:`test_committed_results.NOT_REDERIVED`)."""
    config, _, osq = _beyond(res, [res.config["noise"]])
    N, block = config["n_floor"], config["block"]
    oracle_sq = osq[config["noise"]][:N]
    return [{"start": s, "oracle_loss": float(oracle_sq[s : s + block].mean())} for s in range(0, N, block)]


# ------------------------------------------------------------------------------------------------
# Part II
# ------------------------------------------------------------------------------------------------


def authors_rules_cheap(res) -> list[dict]:
    """pt_authors_rules' rows of the authors' procedure with the order-3 rule and of the solver at
    12 nodes, by the experiment's own row builders (the whole run solves at up to 28 nodes)."""
    from attnlab.experiments.phase_transition import metastable

    c = committed_config(res.name + "-" + res.scale)
    common = {"sigma": c["sigma"], "lam": c["lam"], "omega": c["omega_A"]}
    rows = metastable._rule_rows(alpha=c["alpha_A"], n_nodes=3, **common)
    return rows + metastable._nodes_rows(alpha=c["node_alphas"][0], n_nodes=12, **common)


def authors_rules_monte_carlo(branch: str, start: str):
    """One Monte-Carlo step of the exact map (seed 0, the committed number of samples) from the
    start a committed row records (``q_start``, ``V_start`` and the order parameter; the other one
    is 0 on the branch), as pt_authors_rules takes it."""

    def fn(res):
        from attnlab.theory import phase_transition as se

        c = committed_config(res.name + "-" + res.scale)
        (r,) = [r for r in res.rows if r["kind"] == "monte carlo" and r["branch"] == branch
                and r["start"] == start and r["seed"] == 0]  # fmt: skip
        sigma2, semantic = c["sigma"] ** 2, branch == "semantic"
        theta, m = (r["value_start"] * sigma2, 0.0) if semantic else (0.0, r["value_start"])
        args = (r["alpha"], r["omega"], r["q_start"], m, r["V_start"], theta, c["sigma"], c["lam"])
        new = se.hat_variables(*args, monte_carlo=r["samples"], seed=0)
        value = new["theta"] / sigma2 if semantic else new["m"]
        return [{**{k: r[k] for k in ("kind", "branch", "start", "seed")}, "q": new["q"], "V": new["V"],
                 "value": value}]  # fmt: skip

    return fn
