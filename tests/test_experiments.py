import json
import math
import subprocess
import sys

import numpy as np
import pytest

from attnlab import experiments as ex
from attnlab.experiments import _core

CALLS = []


@ex.experiment(
    "toy_square", book={"n": 3, "scale": 1.0}, paper={"n": 10, "scale": 1.0}, description="squares"
)
def toy_square(config, device):
    CALLS.append(dict(config))
    return [{"i": i, "value": config["scale"] * i**2} for i in range(config["n"])]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    CALLS.clear()


def test_registry_and_configs():
    assert "toy_square" in ex.names()
    exp = ex.get("toy_square")
    assert exp.config("book") == {"n": 3, "scale": 1.0}
    assert exp.config("paper", {"n": 4})["n"] == 4


def test_run_caches_by_config():
    r1 = ex.run("toy_square")
    r2 = ex.run("toy_square")
    assert len(CALLS) == 1, "the second run must load from the cache"
    assert np.array_equal(r1.column("value"), [0.0, 1.0, 4.0])
    assert r2.rows == r1.rows
    ex.run("toy_square", overrides={"scale": 2.0})
    assert len(CALLS) == 2, "a new configuration must recompute"
    ex.run("toy_square", cache=False)
    assert len(CALLS) == 3


def test_cache_key_includes_the_library_source(monkeypatch):
    ex.run("toy_square")
    assert len(CALLS) == 1
    monkeypatch.setattr(_core, "library_fingerprint", lambda: "changed-code")
    ex.run("toy_square")
    assert len(CALLS) == 2, "a change of the library's code must recompute"


def test_library_fingerprint_is_stable():
    first = _core.library_fingerprint()
    assert first == _core.library_fingerprint()
    assert len(first) == 16 and all(c in "0123456789abcdef" for c in first)


def test_result_column_filters():
    r = ex.run("toy_square", "paper")
    assert r.column("value", i=3).tolist() == [9.0]
    with pytest.raises(ValueError, match="name must be one of the columns"):
        r.column("nope")


def test_write_and_load_roundtrip(tmp_path):
    r = ex.run("toy_square")
    path = ex.write_result(r, tmp_path, command="python -m attnlab.experiments run toy_square")
    assert path.name == "toy_square-book.csv"
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["config"] == {"n": 3, "scale": 1.0}
    assert meta["attnlab_version"]
    assert meta["command"].startswith("python -m attnlab.experiments")
    loaded = ex.load_result("toy_square", "book", directory=tmp_path)
    assert loaded.rows == r.rows and loaded.config == r.config


def test_load_result_reads_each_cell_back_as_written_and_rereads_a_changed_file(tmp_path):
    """Every kind of cell comes back as its type (an empty cell as ""); rows are the caller's own
    (the file is parsed once per process), and a file written again is read again."""
    cells = {"i": -2, "x": 1.5, "e": 1e-30, "big": 3e20, "flag": True, "no": False, "s": "uniform:3",
             "dotted": "a.b", "nan": float("nan"), "inf": float("-inf"), "blank": ""}  # fmt: skip
    ex.write_result(ex.Result("mixed", "book", {}, [cells, {"i": 7}]), tmp_path)
    first = ex.load_result("mixed", "book", directory=tmp_path)
    got = first.rows[0]
    types = [int, float, float, float, bool, bool, str, str, float, float, str]
    assert [type(got[k]) for k in cells] == types
    assert {k: v for k, v in got.items() if k != "nan"} == {k: v for k, v in cells.items() if k != "nan"}
    assert math.isnan(got["nan"]) and first.rows[1] == {**dict.fromkeys(cells, ""), "i": 7}
    first.rows[0]["i"] = 99
    assert ex.load_result("mixed", "book", directory=tmp_path).rows[0]["i"] == -2
    ex.write_result(ex.Result("mixed", "book", {}, [{"i": 5}]), tmp_path)
    assert ex.load_result("mixed", "book", directory=tmp_path).rows == [{"i": 5}]


def _square(x):
    return x * x


def test_sweep_parallel_keeps_order():
    configs = [{"x": x} for x in range(6)]
    assert ex.sweep(_square, configs, n_jobs=2) == [x * x for x in range(6)]
    assert ex.sweep(_square, configs, n_jobs=1) == [x * x for x in range(6)]


def test_sweep_on_a_dask_local_cluster():
    distributed = pytest.importorskip("distributed")
    configs = [{"x": x} for x in range(5)]
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None
    ) as cluster:
        # By address, as a user with a cluster would pass it, and through a client.
        assert ex.sweep(_square, configs, scheduler=cluster.scheduler_address) == [x * x for x in range(5)]
        with distributed.Client(cluster) as client:
            assert ex.sweep(_square, configs, scheduler=client) == [x * x for x in range(5)]
    with pytest.raises(ValueError, match="scheduler must be a 'tcp://host:port' address"):
        ex.sweep(_square, configs, scheduler="localhost")


def test_bad_input():
    with pytest.raises(ValueError, match="name must be a registered experiment"):
        ex.get("nope")
    with pytest.raises(ValueError, match="scale must be one of"):
        ex.run("toy_square", "huge")
    with pytest.raises(ValueError, match="overrides key 'm' is not a parameter"):
        ex.run("toy_square", overrides={"m": 1})
    with pytest.raises(ValueError, match="device must be"):
        ex.run("toy_square", device="tpu")
    with pytest.raises(ValueError, match="book and paper configs"):
        ex.experiment("bad", book={"a": 1}, paper={"b": 1})
    with pytest.raises(ValueError, match="name must be an identifier"):
        ex.experiment("bad name!", book={}, paper={})
    with pytest.raises(ValueError, match="n_jobs must be a positive integer"):
        ex.sweep(_square, [{"x": 1}], n_jobs=0)
    with pytest.raises(ValueError, match="fn must be callable"):
        ex.sweep(3, [])
    with pytest.raises(ValueError, match="has no result file"):
        ex.load_result("toy_square", "paper", directory=".")


def test_experiment_must_return_rows():
    @ex.experiment("toy_bad_rows", book={}, paper={})
    def bad(config, device):
        return {"not": "rows"}

    with pytest.raises(ValueError, match="must return a list of dict rows"):
        ex.run("toy_bad_rows", cache=False)
    _core._REGISTRY.pop("toy_bad_rows")


def test_cli_main_runs_and_writes(tmp_path, capsys):
    assert _core.main(["run", "toy_square", "--scale", "paper", "--set", "n=2", "--out", str(tmp_path)]) == 0
    assert "wrote" in capsys.readouterr().out
    loaded = ex.load_result("toy_square", "paper", directory=tmp_path)
    assert loaded.config["n"] == 2 and len(loaded.rows) == 2
    assert "--set n=2" in loaded.meta["command"]
    assert "--out" not in loaded.meta["command"] and str(tmp_path) not in loaded.meta["command"]
    assert _core.main(["list"]) == 0
    assert "toy_square" in capsys.readouterr().out


def test_cli_as_a_module():
    out = subprocess.run(
        [sys.executable, "-m", "attnlab.experiments", "list"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "attnlab.experiments", "run", "no_such_experiment"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode != 0 and "name must be a registered experiment" in bad.stderr


def test_optional_cpu_scale_with_meta(tmp_path):
    @ex.experiment("toy_cpu", book={"n": 1}, paper={"n": 3}, cpu={"n": 2})
    def toy_cpu(config, device):
        return [{"n": config["n"]}], {"note": "rows and meta"}

    try:
        assert ex.get("toy_cpu").scales == ("book", "paper", "cpu")
        result = ex.run("toy_cpu", "cpu")
        assert result.rows == [{"n": 2}] and result.meta["note"] == "rows and meta"
        timing = result.meta["timing"]
        assert set(timing) == {"wall_s", "cpu_s", "torch_threads", "machine", "library"}
        assert timing["library"] == _core.library_fingerprint()  # what the last bits depend on
        assert (
            set(timing["machine"]) == {"cpu", "cpu_flags", "torch"}
            and len(timing["machine"]["cpu_flags"]) == 16
        )
        assert ex.run("toy_cpu", "cpu").meta == result.meta, "a cached result keeps its timing"
        path = ex.write_result(result, tmp_path)
        meta = json.loads(path.with_suffix(".json").read_text())
        assert meta["note"] == "rows and meta" and meta["timing"]["wall_s"] >= 0
        assert ex.get("toy_square").scales == ("book", "paper")
        with pytest.raises(ValueError, match="scale must be one of"):
            ex.run("toy_square", "cpu")
        with pytest.raises(ValueError, match="cpu config of 'bad'"):
            ex.experiment("bad", book={"a": 1}, paper={"a": 1}, cpu={"b": 1})
    finally:
        _core._REGISTRY.pop("toy_cpu")


def test_every_experiment_and_committed_result_is_loaded_by_the_book():
    """Issue 35: no registered experiment or committed result that no page loads.

    A name counts as loaded where a chapter or the lab notes name it as a string (``run("x",
    ...)``, ``load_result("x", ...)``), or a library function that they call does (a list of runs
    to splice); its own ``@experiment("x", ...)`` registration does not count.
    """
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    lib = root / "lib" / "attnlab"
    registration = re.compile(r'@experiment\(\s*"\w+"')
    sources = "".join(p.read_text() for p in (root / "book").rglob("*.md"))
    sources += "".join(registration.sub("", p.read_text()) for p in lib.rglob("*.py"))
    ours = [n for n in ex.names() if ex.get(n).fn.__module__.startswith("attnlab.")]
    assert len(ours) > 20
    assert [n for n in ours if f'"{n}"' not in sources] == [], "registered but loaded by no page"
    committed = {p.stem.rsplit("-", 1)[0] for p in (lib / "results").glob("*.csv")}
    assert committed - set(ours) == set(), "committed results of no registered experiment"
