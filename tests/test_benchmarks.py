"""Smoke test of ``benchmarks/``: the smallest configuration of every benchmark runs (no timing checks)."""

import math

import pytest
import torch
from benchmarks import bench
from benchmarks.bench import ROOT
from benchmarks.icl_reference import reference_forward

from attnlab.models import LinearTransformer
from attnlab.tasks.icl_regression import sample_regression


@pytest.mark.parametrize("param", ["diag", "full"])
def test_reference_trainer_computes_the_library_model(param):
    model = LinearTransformer(10, 3, 2, param, init_scale=0.3, seed=0, dtype="float64")
    X, y, xq, *_ = sample_regression(16, noise="uniform:1", generator=1, dtype="float64")
    ref = reference_forward(param, model.packed_weights().detach(), X, y, xq)
    lib = model.predict_fast(X, y, xq).detach()
    assert torch.allclose(ref, lib, rtol=1e-9, atol=1e-9), float((ref - lib).abs().max())


def test_smallest_benchmarks_run(tmp_path):
    se = bench.bench_state_evolution(n_nodes=2, ref_nodes=4, candidates=(2,), repeats=1, baseline_max_iter=2)
    assert se["baseline"]["iterations"] == 2 and math.isfinite(se["speedup_same_quadrature"])
    pd = bench.bench_phase_diagram(n_alpha=2, n_omega=1, n_jobs=1)
    assert pd["points"] == 2
    th = bench.bench_thresholds(n_nodes=4)
    assert th["alpha_c"]["root"] == pytest.approx(th["alpha_c"]["plain_root"], abs=2e-4)
    th["prox"] = bench.bench_prox(n_nodes=(4,), repeats=1)
    assert all(r["max_diff"] < 1e-12 for r in th["prox"]["rows"])
    th["lines"] = bench.bench_transition_lines(n_omega=1, omega_max=0.3, n_nodes=4, n_jobs=2)
    assert [p["name"] for p in th["lines"]["points"]] == ["alpha_c", "alpha_l"]
    icl = bench.bench_icl(n_layers=2, batch_size=8, steps=1, repeats=1, batched_models=2)
    assert set(icl["params"]) == {"diag", "full"} and icl["peak"] > 0
    chapter = tmp_path / "c.md"
    header = (ROOT / "book" / "intro.md").read_text().split("---\n")[1]  # a chapter's jupytext header
    chapter.write_text(f"---\n{header}---\n\n```{{code-cell}} ipython3\nx = 1 + 1\n```\n")
    book = bench.bench_book([chapter], timeout=60)
    assert book["chapters"][0]["ok"]
    text = bench.render(se, pd, icl, book, quick=True, wall=1.0, th_res=th)
    assert "Part II" in text and "Total" in text and "the thresholds" in text and "α_c(ω), α_l(ω)" in text
    readme = tmp_path / "README.md"
    readme.write_text("a\n<!-- bench:start -->\nold\n<!-- bench:end -->\nb\n")
    assert (
        bench.update_readme("new", readme) and "new" in readme.read_text() and "old" not in readme.read_text()
    )


def test_build_times_make_book_and_make_test_from_their_logs():
    """``--build``'s code path, with a fake ``make`` and clock: the table's rows come from the logs."""
    import itertools

    calls, ticks = [], itertools.count(0, 100.0)

    def fake_make(target):
        calls.append(target)
        log = (
            "reading sources...\nexecuted 26 notebooks in 241.5 s on 2 processes\nbuild succeeded"
            if target == "book"
            else "ok"
        )
        return (0 if target == "book" else 2), log

    res = bench.bench_build(runner=fake_make, clock=lambda: next(ticks))
    assert calls == ["book", "test"]
    assert res["book"] == {"wall": 100.0, "ok": True, "execution": 241.5, "notebooks": 26, "jobs": 2}
    assert res["test"] == {"wall": 100.0, "ok": False}
    rows = bench.build_rows(res)
    assert (
        "26 chapters executed cold, 2 processes" in rows[0]
        and "| 242 s (whole build 100 s) | ≤ 300 s |" in rows[0]
    )
    assert "| 100 s (FAILED) | ≤ 720 s |" in rows[1]
    table = bench.summary_table(*bench.with_last_measured({"build": res}, {"icl": None}))
    assert rows[0] in table and rows[1] in table
    report = bench.render(None, None, None, None, quick=False, wall=1.0, build_res=res, carried=["icl"])
    assert "--build`" in report and "kept from the last run that measured them: icl." in report
    carried = bench.render(None, None, None, None, quick=False, wall=1.0, build_res=res, carried=["build"])
    assert "--build`" not in carried and rows[0] in carried
    with pytest.raises(RuntimeError, match="did not log its execution time"):
        bench.bench_build(runner=lambda target: (0, "no summary"), clock=lambda: 0.0)


def test_mutate_reports_its_time_and_what_it_caught():
    """``--only mutate``'s code path with a fake record of ``make mutate``: the row comes from it."""
    report = {"wall_s": 1234.4, "jobs": 2, "total": 3, "caught": 2,
              "results": [{"id": "a", "outcome": "caught"}, {"id": "b", "outcome": "survived"},
                          {"id": "c", "outcome": "caught"}]}  # fmt: skip
    res = bench.bench_mutate(runner=lambda: (1, report))
    assert res == {"wall": 1234.4, "jobs": 2, "total": 3, "caught": 2, "ok": False, "not_caught": ["b"],
                   "finished": ""}  # fmt: skip
    row = bench.mutate_rows(res)[0]
    assert "3 plausible bugs" in row and "| 1234 s, 2 of 3 caught |" in row
    table = bench.summary_table(*bench.with_last_measured({"mutate": res}, {}))
    assert row in table
    report_text = bench.render(None, None, None, None, quick=False, wall=1.0, mutate_res=res)
    assert "## `make mutate`" in report_text and "not caught: b." in report_text
