"""The chapters run in Jupyter, as ``make lab`` serves them, and their notebooks stay paired.

``test_lab_runs_a_chapter`` starts a headless Jupyter server (JupyterLab's, as ``make lab`` does)
on 127.0.0.1 with a throw-away token and runtime dir, as a subprocess of the test, serving a
scratch copy of ``book/intro.md`` and ``jupytext.toml``. Through the REST API it opens the ``.md``
as a notebook (jupytext's contents manager), starts its kernel, executes the chapter's first code
cells over the kernel's websocket channel (they import ``attnlab``), checks their outputs and that
the kernel runs in this environment, saves the notebook (which writes the paired ``.ipynb``),
saves an edit made in the ``.ipynb`` (which reaches the ``.md``), and shuts everything down:
nothing is left running and the port is closed.

``test_saving_an_unchanged_chapter_leaves_no_diff`` opens every chapter through the server, as
JupyterLab does, saves it unchanged and checks that its ``.md`` is byte for byte the same. It is
skipped until the chapters are normalised: run ``make normalize`` and set
``CHAPTERS_NORMALISED = True`` in ``tests/normalize_chapters.py`` (in the same commit).

``test_lab_ui_saves_a_chapter_unchanged`` does the same in JupyterLab itself, driven in Debian's
Chromium: it opens one chapter per part (jupyterlab-myst renders it), presses Ctrl+S, and checks
that the ``.md`` is unchanged (the frontend rewrites the kernelspec, which ``make normalize``
writes as JupyterLab does). Same switch; it also needs chromium.

``test_make_notebooks_keeps_outputs_and_cell_ids`` runs the command of ``make notebooks``.

Without JupyterLab installed (the ``lab`` extra) the tests skip, except under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import jupytext
import nbformat
import pytest
from jupytext.cli import jupytext as jupytext_cli

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "book/intro.md"
# generous: JupyterLab in Chromium on a loaded 2-core machine once took > 60 s; a healthy start takes seconds
STARTUP_S = 180
CELL_S = 120

# The arguments of jupytext in `make notebooks` (keep in step with the Makefile).
NOTEBOOKS_ARGS = ["--to", "ipynb", "--update", "--use-source-timestamp"]


def _require_lab():
    missing = [m for m in ("jupyterlab", "jupyter_server", "psutil") if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (pip install -e '.[lab]', or make install)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"lab check cannot run under CI=true: {reason}")
        pytest.skip(f"lab check skipped: {reason}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _scratch_project(tmp_path: Path) -> Path:
    """A copy of what the server needs to open the chapter: the pairing config, the table of contents
    and the chapters' sources (the chapter counts the book's words to give its reading time)."""
    root = tmp_path / "project"
    shutil.copytree(ROOT / "book", root / "book", ignore=shutil.ignore_patterns("*.ipynb", ".*"))
    for name in ("jupytext.toml", "_toc.yml"):
        shutil.copy(ROOT / name, root / name)
    return root


def _isolated_env(tmp_path: Path) -> dict[str, str]:
    """No user config, kernelspec or IPython profile leaks in; runtime files go to a temp dir."""
    env = dict(os.environ)
    for name in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "JUPYTERLAB_DIR", "JUPYTERLAB_SETTINGS_DIR"):
        env.pop(name, None)
    for name, sub in [
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("IPYTHONDIR", "ipython"),
        ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
    ]:
        (tmp_path / sub).mkdir(parents=True)
        env[name] = str(tmp_path / sub)
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    return env


class Server:
    """A JupyterLab server in its own process group; ``close`` leaves nothing running."""

    def __init__(self, root: Path, tmp_path: Path):
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        tmp_path.mkdir(parents=True)
        self.log_path = tmp_path / "server.log"
        self.kernels: list = []  # psutil.Process of each kernel, as soon as it is known
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root}",
            f"--IdentityProvider.token={self.token}",
        ]
        if os.geteuid() == 0:  # containers and CI often run as root; Jupyter refuses it unless told
            cmd.append("--allow-root")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=root,
                env=_isolated_env(tmp_path),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def api(self, method: str, path: str, body=None, timeout: float = 30):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            return response.status, (json.loads(raw) if raw else None)

    def wait_ready(self) -> bool:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if "already in use" in self.log():
                    return False  # another process took the free port meanwhile
                pytest.fail(f"the Jupyter server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status, _ = self.api("GET", "/api/status", timeout=5)
                if status == 200:
                    return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)
        pytest.fail(f"the Jupyter server did not answer within {STARTUP_S} s:\n{self.log()}")

    def close(self) -> list:
        """Ask politely (REST shutdown), then kill the whole process group and any kernel.

        Returns the server's child processes (``psutil.Process``), for checking that none is left.
        """
        import psutil

        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
        family += [k for k in self.kernels if k.pid not in {p.pid for p in family}]
        if self.proc.poll() is None:
            try:
                self.api("POST", "/api/shutdown", timeout=10)
                self.proc.wait(timeout=20)
            except (urllib.error.URLError, ConnectionError, TimeoutError, subprocess.TimeoutExpired):
                pass
        # Kernels run in sessions of their own: kill each (psutil checks that its pid was not
        # reused meanwhile), then the server's process group.
        for process in family:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=15)
        psutil.wait_procs(family, timeout=10)
        return family


def _start_server(root: Path, tmp_path: Path) -> Server:
    for attempt in range(3):
        server = Server(root, tmp_path / f"jupyter-{attempt}")
        try:
            ready = server.wait_ready()
        except BaseException:
            server.close()
            raise
        if ready:
            return server
        server.close()
    pytest.fail("the Jupyter server found no free port in 3 tries")


OUTPUT_TYPES = {"stream", "display_data", "execute_result", "error"}


def _message(msg_type: str, content: dict, session: str) -> dict:
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": msg_type,
            "session": session,
            "username": "test",
            "version": "5.3",
            "date": "",
        },
        "parent_header": {},
        "metadata": {},
        "content": content,
        "channel": "shell",
        "buffers": [],
    }


async def _run_cells(server: Server, kernel_id: str, sources: list[str]) -> list[dict]:
    """Execute each source on the kernel; return per cell its reply status and its outputs."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    session = uuid.uuid4().hex
    url = f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels?session_id={session}"
    headers = {"Authorization": f"token {server.token}"}
    ws = await websocket_connect(HTTPRequest(url, headers=headers, connect_timeout=CELL_S))

    async def request_reply(msg: dict) -> tuple[dict, list[dict]]:
        """Send one shell request; collect its iopub messages until idle and its shell reply."""
        ws.write_message(json.dumps(msg))
        msg_id = msg["header"]["msg_id"]
        reply, iopub, idle = None, [], False
        deadline = time.monotonic() + CELL_S
        while reply is None or not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply to {msg['header']['msg_type']} within {CELL_S} s")
            raw = await asyncio.wait_for(ws.read_message(), timeout=left)
            if raw is None:
                raise ConnectionError("the kernel's websocket closed")
            if isinstance(raw, bytes):
                continue  # binary frames carry buffers, which these cells never produce
            answer = json.loads(raw)
            if answer.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if answer["channel"] == "shell":
                reply = answer
            elif answer["channel"] == "iopub":
                if answer["msg_type"] == "status":
                    idle = answer["content"]["execution_state"] == "idle"
                else:
                    iopub.append(answer)
        return reply, iopub

    try:
        await request_reply(_message("kernel_info_request", {}, session))
        results = []
        for code in sources:
            content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}}
            content |= {"allow_stdin": False, "stop_on_error": True}
            reply, iopub = await request_reply(_message("execute_request", content, session))
            outputs = [m for m in iopub if m["msg_type"] in OUTPUT_TYPES]
            status = reply["content"]["status"]
            results.append({"status": status, "reply": reply["content"], "outputs": outputs})
            if status != "ok":
                break
        return results
    finally:
        ws.close()


def _nbformat_output(msg: dict) -> dict:
    """A kernel message as an nbformat output, as JupyterLab stores it."""
    content, kind = msg["content"], msg["msg_type"]
    if kind == "stream":
        return {"output_type": "stream", "name": content["name"], "text": content["text"]}
    if kind == "error":
        return {"output_type": "error", **{k: content[k] for k in ("ename", "evalue", "traceback")}}
    out = {"output_type": kind, "data": content["data"], "metadata": content.get("metadata", {})}
    if kind == "execute_result":
        out["execution_count"] = content["execution_count"]
    return out


def _cells(nb) -> list[tuple]:
    return [(c.cell_type, c.source, dict(c.metadata)) for c in nb.cells]


def _text(result: dict) -> str:
    return "".join(m["content"]["text"] for m in result["outputs"] if m["msg_type"] == "stream")


# Run before the chapter's cells (which do the importing), then after them.
PROBE_KERNEL = """\
import json as _json, os as _os, sys as _sys
print(_json.dumps({"pid": _os.getpid(), "prefix": _sys.prefix, "cwd": _os.getcwd()}))
"""
PROBE_ATTNLAB = """\
print(_json.dumps({"file": _sys.modules["attnlab"].__file__, "version": _sys.modules["attnlab"].__version__}))
"""


def test_lab_runs_a_chapter(tmp_path):
    _require_lab()
    import psutil

    started = time.monotonic()
    root = _scratch_project(tmp_path)
    chapter = jupytext.read(ROOT / CHAPTER)
    code = [c.source for c in chapter.cells if c.cell_type == "code"]
    # The first code cells up to and including the chapter's first Check (its first `assert`).
    first_check = next(i for i, s in enumerate(code) if "assert " in s)
    cells = code[: first_check + 1]
    assert any("attnlab" in s for s in cells[:2]), "the chapter's first code cells should import attnlab"

    server = _start_server(root, tmp_path)
    family = []
    try:
        # A chapter's .md opens as a notebook: jupytext's contents manager is active.
        status, model = server.api("GET", f"/api/contents/{CHAPTER}?type=notebook&content=1")
        assert status == 200 and model["type"] == "notebook", model
        nb = model["content"]
        assert [c["source"] for c in nb["cells"] if c["cell_type"] == "code"] == code
        kernel_name = nb["metadata"]["kernelspec"]["name"]

        # ... and JupyterLab opens .md files with the Jupytext Notebook viewer by default.
        status, settings = server.api("GET", "/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
        viewers = settings["schema"]["properties"]["defaultViewers"]["default"]
        assert viewers.get("markdown") == "Jupytext Notebook", (
            f"default viewers {viewers}: the Makefile's install step writes them into "
            "$(VENV)/share/jupyter/lab/settings/overrides.d/"
        )

        # Start the chapter's kernel in the chapter's folder and run its first cells.
        status, kernel = server.api("POST", "/api/kernels", {"name": kernel_name, "path": CHAPTER})
        assert status == 201, kernel
        sources = [PROBE_KERNEL, *cells, PROBE_ATTNLAB]
        results = asyncio.run(_run_cells(server, kernel["id"], sources))
        if results[0]["status"] == "ok":  # its process, so that close() can make sure it is gone
            server.kernels.append(psutil.Process(json.loads(_text(results[0]))["pid"]))
        names = ["probe", *(f"code cell {i}" for i in range(len(cells))), "probe"]
        for name, source, result in zip(names, sources, results, strict=False):
            errors = [m["content"] for m in result["outputs"] if m["msg_type"] == "error"]
            if result["status"] != "ok" or errors:
                why = "; ".join(f"{e.get('ename')}: {e.get('evalue')}" for e in [result["reply"], *errors])
                pytest.fail(f"{name} failed with {why}:\n{source[:500]}")
            stderr = [m for m in result["outputs"] if m["content"].get("name") == "stderr"]
            assert not stderr, f"{name} wrote to stderr: {stderr}"
        assert len(results) == len(names)
        probe, ran, last = json.loads(_text(results[0])), results[1:-1], results[-1]
        # The Check cell printed its measured value, and a figure cell drew a PNG.
        assert _text(ran[-1]).strip(), "the Check cell printed nothing"
        for source, result in zip(cells, ran, strict=True):
            if "mystnb:" in source and "figure:" in source:
                pngs = [m for m in result["outputs"] if "image/png" in m["content"].get("data", {})]
                assert pngs, f"the figure cell drew no PNG: {source[:200]}"

        # The kernel runs in this environment, in the chapter's folder, with this attnlab.
        import attnlab

        assert Path(probe["prefix"]).resolve() == Path(sys.prefix).resolve()
        assert Path(probe["cwd"]).resolve() == (root / "book").resolve()
        imported = json.loads(_text(last))
        assert Path(imported["file"]).resolve() == Path(attnlab.__file__).resolve()
        assert imported["version"] == attnlab.__version__

        # Saving from Jupyter writes the paired .ipynb (jupytext.toml) with the outputs, and
        # leaves the .md's content as it was: the same cells, sources and cell options. (Its
        # text may differ: jupytext re-emits block-style YAML, e.g. `caption: |`, in its own style.)
        code_cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
        for cell, result in zip(code_cells, ran, strict=False):
            cell["outputs"] = [_nbformat_output(m) for m in result["outputs"]]
            cell["execution_count"] = result["reply"].get("execution_count")
        status, _ = server.api("PUT", f"/api/contents/{CHAPTER}", {"type": "notebook", "content": nb})
        assert status == 200
        assert _cells(jupytext.read(root / CHAPTER)) == _cells(chapter), "saving changed the chapter"
        paired = jupytext.read(root / "book" / "intro.ipynb")
        saved = [c for c in paired.cells if c.cell_type == "code"]
        assert [c.source for c in saved] == code
        assert _text(ran[-1]) in "".join(o.get("text", "") for o in saved[first_check].outputs)

        # The other way round: opening the .ipynb shows the outputs, and an edit saved there
        # reaches the .md.
        ipynb = CHAPTER.removesuffix(".md") + ".ipynb"
        status, model = server.api("GET", f"/api/contents/{ipynb}?type=notebook&content=1")
        other = model["content"]
        assert [c["source"] for c in other["cells"] if c["cell_type"] == "code"] == code
        assert any(c.get("outputs") for c in other["cells"] if c["cell_type"] == "code")
        edit = "An edit made in the paired notebook."
        other["cells"].append({"cell_type": "markdown", "id": "edit", "metadata": {}, "source": edit})
        status, _ = server.api("PUT", f"/api/contents/{ipynb}", {"type": "notebook", "content": other})
        assert status == 200
        assert (root / CHAPTER).read_text().rstrip().endswith(edit), "the .md missed the edit"

        status, _ = server.api("DELETE", f"/api/kernels/{kernel['id']}")
        assert status == 204
    finally:
        family = server.close()

    assert not _port_open(server.port), f"port {server.port} is still open"
    assert server.proc.returncode is not None
    assert server.kernels, "the kernel's process was never seen"
    alive = [p for p in family if _alive(p)]
    assert not alive, f"processes left running: {alive}"
    elapsed = time.monotonic() - started
    print(f"lab round trip: {elapsed:.1f} s")


def saved_unchanged(source: Path, tmp_path: Path) -> dict[str, str]:
    """Open every chapter under ``source/book`` through a Jupyter server and save it unchanged.

    Returns, for each chapter whose ``.md`` changed, a unified diff of the change.
    """
    import difflib

    root = tmp_path / "project"
    shutil.copytree(source / "book", root / "book", ignore=shutil.ignore_patterns("*.ipynb", ".*"))
    shutil.copy(source / "jupytext.toml", root / "jupytext.toml")
    chapters = sorted(p.relative_to(root).as_posix() for p in (root / "book").rglob("*.md"))
    before = {name: (root / name).read_text() for name in chapters}
    server = _start_server(root, tmp_path)
    try:
        for name in chapters:
            status, model = server.api("GET", f"/api/contents/{name}?type=notebook&content=1")
            assert status == 200 and model["type"] == "notebook", (name, model)
            status, _ = server.api(
                "PUT", f"/api/contents/{name}", {"type": "notebook", "content": model["content"]}
            )
            assert status == 200, name
    finally:
        server.close()
    changed = {}
    for name in chapters:
        after = (root / name).read_text()
        if after != before[name]:
            diff = difflib.unified_diff(
                before[name].splitlines(), after.splitlines(), name, name, lineterm=""
            )
            changed[name] = "\n".join(diff)
    return changed


def test_saving_an_unchanged_chapter_leaves_no_diff(tmp_path):
    import normalize_chapters

    _require_lab()
    if not normalize_chapters.CHAPTERS_NORMALISED:
        pytest.skip("chapters not normalised yet: run `make normalize`, then set CHAPTERS_NORMALISED = True")
    changed = saved_unchanged(ROOT, tmp_path)
    assert not changed, "saving unchanged chapters changed them:\n" + "\n".join(changed.values())[:3000]


#: Chapters the UI test opens and saves: one per part, the one with the most figure captions.
UI_CHAPTERS = ["book/intro.md", "book/linear-nn/reduction.md", "book/phase-transition/04-phase-diagram.md",
               "book/in-context/04-mixed-noise.md"]  # fmt: skip


def ui_saved_unchanged(source: Path, tmp_path: Path, chapters=UI_CHAPTERS) -> dict[str, str]:
    """Open each chapter in JupyterLab (Chromium), save it with Ctrl+S; return the changed ones.

    Each chapter opens in a fresh workspace (``?reset``), so that the earlier chapters are not
    restored in background tabs. The extensions mark a chapter dirty a moment after it opens (on
    a loaded machine, after the first Ctrl+S), so a save counts only once the file on disk has been
    written and the page has stayed clean for a second; until then Ctrl+S is pressed again, as a
    reader would.
    """
    from playwright.sync_api import sync_playwright

    root = tmp_path / "project"
    shutil.copytree(source / "book", root / "book", ignore=shutil.ignore_patterns("*.ipynb", ".*"))
    shutil.copy(source / "jupytext.toml", root / "jupytext.toml")
    before = {name: (root / name).read_text() for name in chapters}
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    server = _start_server(root, tmp_path)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"], headless=True)
            try:
                for i, name in enumerate(chapters):
                    page = browser.new_page(viewport={"width": 1280, "height": 900})
                    page.goto(f"{server.base}/lab/workspaces/ui{i}/tree/{name}?reset&token={server.token}")
                    page.wait_for_selector(".jp-Notebook .jp-Cell >> visible=true", timeout=STARTUP_S * 1000)
                    page.wait_for_timeout(3000)  # let the extensions (jupytext, myst) settle
                    _save_with_ctrl_s(page, root / name, timeout=CELL_S)
                    page.close()
            finally:
                browser.close()
    finally:
        server.close()
    return {name: (root / name).read_text() for name in chapters if (root / name).read_text() != before[name]}


def _save_with_ctrl_s(page, path: Path, timeout: float) -> None:
    """Press Ctrl+S in the open notebook until ``path`` is written and the page stays clean."""
    written = path.stat().st_mtime_ns
    deadline = time.monotonic() + timeout
    presses = 0
    while time.monotonic() < deadline:
        page.locator(".jp-Notebook >> visible=true").first.click()
        page.keyboard.press("Control+s")
        presses += 1
        clean_since = None
        wait_until = min(deadline, time.monotonic() + 20)
        while time.monotonic() < wait_until:
            page.wait_for_timeout(250)
            clean = page.evaluate("document.querySelectorAll('.jp-mod-dirty').length === 0")
            if not clean or path.stat().st_mtime_ns == written:
                clean_since = None
                continue
            clean_since = clean_since or time.monotonic()
            if time.monotonic() - clean_since >= 1.0:
                return
    dialogs = page.evaluate("Array.from(document.querySelectorAll('.jp-Dialog')).map(e => e.innerText)")
    dirty = page.evaluate("Array.from(document.querySelectorAll('.jp-mod-dirty')).map(e => e.className)")
    raise AssertionError(
        f"{path.name}: not saved within {timeout} s after {presses} Ctrl+S; "
        f"written: {path.stat().st_mtime_ns != written}; dialogs: {dialogs}; dirty: {dirty}"
    )


def test_lab_ui_saves_a_chapter_unchanged(tmp_path):
    import normalize_chapters

    _require_lab()
    if not normalize_chapters.CHAPTERS_NORMALISED:
        pytest.skip("chapters not normalised yet: run `make normalize`, then set CHAPTERS_NORMALISED = True")
    if not Path(shutil.which("chromium") or "/usr/bin/chromium").exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the lab UI check needs Debian's chromium under CI=true")
        pytest.skip("the lab UI check needs Debian's chromium")
    changed = ui_saved_unchanged(ROOT, tmp_path)
    assert not changed, f"saving in JupyterLab changed {sorted(changed)}"


def _alive(process) -> bool:
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_make_notebooks_keeps_outputs_and_cell_ids(tmp_path):
    """`make notebooks` takes the inputs from the .md, keeps outputs and ids, and Jupyter opens
    the pair afterwards (jupytext refuses a pair whose .ipynb is newer than its .md when their
    texts differ, even only in the order or style of the cell options)."""
    _require_lab()
    from jupytext import TextFileContentsManager

    root = _scratch_project(tmp_path)
    md, ipynb = root / CHAPTER, root / "book" / "intro.ipynb"
    hour_ago = time.time() - 3600
    os.utime(md, (hour_ago, hour_ago))  # as after a clone or an edit some time ago
    run = [*NOTEBOOKS_ARGS, str(md)]
    assert jupytext_cli(run) in (None, 0)
    model = TextFileContentsManager(root_dir=str(root)).get(CHAPTER)
    assert model["type"] == "notebook"
    nb = jupytext.read(ipynb)
    first = next(c for c in nb.cells if c.cell_type == "code")
    first.outputs = [nbformat.v4.new_output("stream", name="stdout", text="kept\n")]
    jupytext.write(nb, ipynb)
    ids = [c.id for c in nb.cells]

    # An edit of the source: a new parameter value in the first code cell, a new markdown cell.
    text = md.read_text()
    edited = text.replace(first.source, first.source + "\nextra = 1", 1) + "\nA new paragraph.\n"
    assert edited != text
    md.write_text(edited)
    assert jupytext_cli(run) in (None, 0)

    updated = jupytext.read(ipynb)
    assert [c.source for c in updated.cells] == [c.source for c in jupytext.read(md).cells]
    assert [c.id for c in updated.cells][: len(ids)] == ids, "cell ids changed"
    kept = next(c for c in updated.cells if c.cell_type == "code")
    assert kept.source.endswith("extra = 1")
    assert [o["text"] for o in kept.outputs] == ["kept\n"], "outputs were lost"
    assert md.read_text() == edited, "the .md is the source: it must not be rewritten"
    assert TextFileContentsManager(root_dir=str(root)).get(CHAPTER)["type"] == "notebook"
