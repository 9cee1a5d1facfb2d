"""The library's shape (ARCHITECTURE.md): short modules, layers that import only downwards, one
experiments package per part, pages apart from computation, and a Part III run that reads top to
bottom."""

import ast
import sys
from pathlib import Path

from attnlab import experiments as ex

LIB = Path(__file__).resolve().parents[1] / "lib" / "attnlab"

# The layers, lowest first (ARCHITECTURE.md): a module imports only from its own layer and below.
LAYERS = [
    ("attnlab.validation", "attnlab.ccompile"),
    ("attnlab.tasks",),
    ("attnlab.models",),
    ("attnlab.theory",),
    ("attnlab.optim", "attnlab.train", "attnlab.icl_training", "attnlab.ablation"),
    ("attnlab.spectral", "attnlab.token_noise", "attnlab.baselines"),
    ("attnlab.experiments",),
    ("attnlab.plotting", "attnlab.tables", "attnlab.reading", "attnlab.pages"),
]


def _layer(module: str) -> int | None:
    if module == "attnlab":
        return 0  # the package itself: its version
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def _modules():
    """``(module name, path)`` of every library module."""
    for path in sorted(LIB.rglob("*.py")):
        parts = path.relative_to(LIB).with_suffix("").parts
        yield ".".join(("attnlab", *parts)).removesuffix(".__init__"), path


def _imports(path: Path) -> set[str]:
    """The ``attnlab`` modules (or names in them) that ``path`` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attnlab"):
            found |= {
                f"{node.module}.{a.name}" if node.module == "attnlab" else node.module for a in node.names
            }
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("attnlab")}
    return found


def test_no_library_module_is_over_500_lines():
    modules = sorted(LIB.rglob("*.py"))
    assert len(modules) > 30
    long = {str(p.relative_to(LIB)): n for p in modules if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}, f"split these modules by concern: {long}"


def test_every_module_imports_only_from_its_layer_and_below():
    up, unplaced = [], []
    for module, path in _modules():
        if module == "attnlab":
            continue
        me = _layer(module)
        if me is None:
            unplaced.append(module)
            continue
        for target in _imports(path):
            rank = _layer(target)
            if rank is None:
                unplaced.append(target)
            elif rank > me:
                up.append(f"{module} -> {target}")
    assert unplaced == [], "place these modules in a layer of ARCHITECTURE.md"
    assert up == [], "imports that run back up a layer"


def test_pages_are_apart_from_computation():
    """Presentation (``attnlab.pages``) reads results; nothing computes with it, and it trains nothing."""
    importers = [m for m, p in _modules() if not m.startswith("attnlab.pages") and any(
        t.startswith("attnlab.pages") for t in _imports(p)
    )]  # fmt: skip
    assert importers == []
    trainers = ("attnlab.train", "attnlab.optim", "attnlab.icl_training")
    training_pages = [
        m
        for m, p in _modules()
        if m.startswith("attnlab.pages") and any(t.startswith(trainers) for t in _imports(p))
    ]
    assert training_pages == []


def test_experiments_are_one_package_per_part():
    """``experiments/`` holds the shared machinery and one package per part of the book; every
    registered experiment lives in the package of its part, named by its prefix."""
    root = LIB / "experiments"
    entries = {p.name for p in root.iterdir() if p.name != "__pycache__"}
    assert entries == {
        "__init__.py",
        "__main__.py",
        "_core.py",
        "histogram",
        "phase_transition",
        "in_context",
    }
    part = {"hist": "histogram", "pt": "phase_transition", "icl": "in_context"}
    misplaced = {
        name: ex.get(name).fn.__module__
        for name in ex.names()
        if ex.get(name).fn.__module__.startswith("attnlab.")  # not the toy experiments of other tests
        and not ex.get(name).fn.__module__.startswith(f"attnlab.experiments.{part[name.split('_')[0]]}")
    }
    assert misplaced == {}


# The modules a Part III run goes through, lowest first: a call from a lower module to a higher
# one is a move back up.
_RUN_ORDER = [
    "attnlab.optim",
    "attnlab.train",
    "attnlab.icl_training",
    "attnlab.experiments.in_context.table1",
    "attnlab.experiments.in_context.recipe",
    "attnlab.experiments.in_context.evaluate",
    "attnlab.experiments.in_context.table",
]


def _rank(module: str) -> int:
    return _RUN_ORDER.index(module) if module in _RUN_ORDER else len(_RUN_ORDER)


def test_a_part_iii_run_reads_top_to_bottom():
    """The configuration of ``icl_mixed_noise``, from its registration to its scored rows, passes
    through six modules (the experiment, the recipe, evaluation and scoring; the trainer, the
    training loop and the optimiser), and moves back up only where the training loop calls the
    sampler and the loss its caller handed it."""
    calls = []

    def profile(frame, event, arg):
        if event != "call" or not frame.f_globals.get("__name__", "").startswith("attnlab"):
            return
        caller = frame.f_back
        while caller is not None and not caller.f_globals.get("__name__", "").startswith("attnlab"):
            caller = caller.f_back  # through torch and functools: a callback is a call of its caller
        if caller is not None:
            calls.append(
                (
                    caller.f_globals["__name__"],
                    caller.f_code.co_name,
                    frame.f_globals["__name__"],
                    frame.f_code.co_name,
                )
            )

    tiny = {"noise": ["uniform:1"], "steps": 4, "n_eval": 200, "n_val": 100, "profile_n": 50, "n_seeds": 2}
    tiny |= {"reruns": 1, "fail_ratio": 1e-9, "record_every": 2}  # every deeper model is re-run
    ex.names()  # import every experiment first: module-level code is not part of the run
    sys.setprofile(profile)
    try:
        res = ex.run("icl_mixed_noise", "book", overrides=tiny, cache=False)
    finally:
        sys.setprofile(None)
    assert res.meta["reruns"]
    run_layers = ("attnlab.experiments.in_context", "attnlab.icl_training", "attnlab.train", "attnlab.optim")
    path = {m for call in calls for m in (call[0], call[2]) if m.startswith(run_layers)}
    assert path == {
        "attnlab.experiments.in_context.table",
        "attnlab.experiments.in_context.recipe",
        "attnlab.experiments.in_context.evaluate",
        "attnlab.icl_training",
        "attnlab.train",
        "attnlab.optim",
    }
    steps = [
        (callee, fn)
        for caller, caller_fn, callee, fn in calls
        if caller_fn == "table_rows" and callee != caller
    ]
    assert steps == [
        ("attnlab.experiments.in_context.recipe", "from_config"),
        ("attnlab.experiments.in_context.recipe", "validation"),
        ("attnlab.icl_training", "train_plan"),
        ("attnlab.experiments.in_context.evaluate", "evaluate"),
        ("attnlab.experiments.in_context.evaluate", "score"),
    ]
    back_up = {
        (caller, caller_fn, callee, fn)
        for caller, caller_fn, callee, fn in calls
        if caller != callee and caller.startswith(run_layers) and callee.startswith(run_layers)
        and _rank(callee) > _rank(caller)
    }  # fmt: skip
    assert back_up == {
        ("attnlab.train", "next_batch", "attnlab.icl_training", "sample"),
        ("attnlab.train", "train", "attnlab.icl_training", "_group_losses"),
    }
    training = ("attnlab.icl_training", "attnlab.train", "attnlab.optim")
    assert {c for c in calls if c[0].startswith(training) and c[2].startswith("attnlab.experiments")} == set()
