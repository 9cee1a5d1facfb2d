"""``make mutate``: put each plausible bug of ``tests/mutations.toml`` into a scratch copy of the
library, one at a time, and check that the tests catch it.

For every mutation (a file, an exact snippet of it and its replacement) the library and the tests
are copied to ``_build/mutate/<id>/`` (the committed results, the chapters and the rest are linked,
not copied), the snippet is replaced, and the tests of the mutated module (``[modules]`` in the
list: a module's own test files, as pytest arguments) run there with ``PYTHONPATH`` on the copy. A
mutation is *caught* when they fail, *survives* when they pass; with ``--suite`` a survivor is tried
again against the whole unit suite. A snippet that is not in its file exactly once *does not apply*
(an error: the list is stale). Mutations run side by side on ``--jobs`` processes (2).

The report is a table on stdout and ``_build/mutate/report.json`` (``report-only.json`` for a run
of some of them: ``make bench`` reads the last whole run's); the exit status is non-zero if any
mutation survives or does not apply.

    python tests/mutate.py [--jobs 2] [--suite] [--only ID ...] [--list]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "mutations.toml"
SCRATCH = ROOT / "_build" / "mutate"
COPIED = ("lib", "tests")  # copied into the scratch folder; every other top-level entry is linked
NOT_COPIED = ("results", "__pycache__", ".pytest_cache")  # linked (results) or left out
UNIT = "tests -p no:xdist --ignore=tests/test_browser.py"


def load(path: Path = LIST) -> tuple[list[dict], dict]:
    """The mutations and the ``{module file: [pytest arguments, ...]}`` map of ``path``."""
    data = tomllib.loads(path.read_text())
    mutations, modules = data["mutation"], data["modules"]
    ids = [m["id"] for m in mutations]
    if len(set(ids)) != len(ids):
        raise ValueError(f"mutation ids must be unique in {path}")
    for m in mutations:
        missing = {"id", "file", "find", "replace", "why"} - set(m)
        if missing:
            raise ValueError(f"mutation {m.get('id')!r} lacks {sorted(missing)}")
        if m["file"] not in modules and "tests" not in m:
            raise ValueError(f"mutation {m['id']!r}: {m['file']} has no tests in [modules]")
    return mutations, modules


def scratch_copy(dest: Path) -> None:
    """A copy of the repository's library and tests at ``dest``, the rest linked."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name in COPIED:
            shutil.copytree(entry, dest / entry.name, ignore=shutil.ignore_patterns(*NOT_COPIED))
        elif entry.name not in ("_build", ".git") and not entry.name.startswith(".pytest"):
            (dest / entry.name).symlink_to(entry)
    results = ROOT / "lib" / "attnlab" / "results"
    (dest / "lib" / "attnlab" / "results").symlink_to(results)


def apply(mutation: dict, dest: Path) -> str | None:
    """Replace the mutation's snippet in the copy at ``dest``; the reason it does not apply, or None."""
    path = dest / mutation["file"]
    if not path.is_file():
        return f"{mutation['file']} does not exist"
    text = path.read_text()
    count = text.count(mutation["find"])
    if count != 1:
        return f"the snippet occurs {count} times in {mutation['file']}, not once"
    path.write_text(text.replace(mutation["find"], mutation["replace"]))
    return None


def _pytest(args: str, dest: Path, timeout: float) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(dest / "lib"), ATTNLAB_CACHE=str(SCRATCH / "cache"))
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *shlex.split(args)]
    try:
        done = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout:.0f} s"
    return done.returncode, (done.stdout + done.stderr)[-3000:]


def run_one(mutation: dict, modules: dict, suite: bool, timeout: float) -> dict:
    """Apply one mutation to a fresh scratch copy and run its tests; the outcome as a dict."""
    started = time.monotonic()
    dest = SCRATCH / mutation["id"]
    scratch_copy(dest)
    out = {"id": mutation["id"], "file": mutation["file"]}
    reason = apply(mutation, dest)
    if reason is not None:
        shutil.rmtree(dest, ignore_errors=True)
        return out | {"outcome": "does not apply", "detail": reason, "seconds": time.monotonic() - started}
    outcome, detail = "survived", ""
    for args in mutation.get("tests", modules.get(mutation["file"], [])):
        status, log = _pytest(args, dest, timeout)
        if status == 1:
            outcome, detail = "caught", _first_failure(log)
            break
        if status != 0:
            outcome, detail = "error", f"{args}: exit {status}: {log[-800:]}"
            break
    if outcome == "survived" and suite:
        status, log = _pytest(UNIT, dest, 4 * timeout)
        if status == 1:
            outcome, detail = "caught by the suite only", _first_failure(log)
    shutil.rmtree(dest, ignore_errors=True)
    return out | {"outcome": outcome, "detail": detail, "seconds": time.monotonic() - started}


def _first_failure(log: str) -> str:
    """The first failed test's id (``tests/...::name[...]``), or the log's last line."""
    failed = [line for line in log.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return failed[0].split()[1] if failed else log.strip().splitlines()[-1][:200]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/mutate.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("-j", "--jobs", type=int, default=2, help="mutations run side by side (default 2)")
    parser.add_argument("--suite", action="store_true", help="try a survivor against the whole unit suite")
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these mutations")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per test run (default 1200)")
    args = parser.parse_args(argv)
    mutations, modules = load()
    if args.only:
        unknown = set(args.only) - {m["id"] for m in mutations}
        if unknown:
            parser.error(f"unknown mutation ids: {sorted(unknown)}")
        mutations = [m for m in mutations if m["id"] in args.only]
    if args.list:
        for m in mutations:
            print(f"{m['id']:40s} {m['file']}: {m['why']}")
        return 0
    SCRATCH.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, m, modules, args.suite, args.timeout) for m in mutations]
        results = []
        for f in futures:
            r = f.result()
            results.append(r)
            print(f"{r['outcome']:>24s}  {r['seconds']:6.0f} s  {r['id']}  {r['detail'][-160:]}", flush=True)
    wall = time.monotonic() - started
    caught = sum(r["outcome"] == "caught" for r in results)
    finished = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report = {"wall_s": wall, "jobs": args.jobs, "total": len(results), "caught": caught,
              "finished": finished, "results": results}  # fmt: skip
    # the benchmark reads the record of the last whole run; a run of some mutations has its own
    path = SCRATCH / ("report-only.json" if args.only else "report.json")
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\n{caught} of {len(results)} mutations caught by their module's tests in {wall:.0f} s "
          f"({args.jobs} processes); report: {path}")  # fmt: skip
    bad = [r for r in results if r["outcome"] != "caught"]
    for r in bad:
        print(f"NOT CAUGHT ({r['outcome']}): {r['id']} in {r['file']}: {r['detail'][:300]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
