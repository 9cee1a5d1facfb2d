"""Compile a C source of the library with the system's C compiler and load it with ctypes.

The compiled kernels (the Gram form of Part III, the prox of Part II) are built at first use with
``cc`` (or ``$CC``) into a cache directory (``$ATTNLAB_CACHE`` or ``~/.cache/attnlab``), keyed
by the source, the compiler, its flags and this CPU's flags (``-march=native`` builds for this
CPU). Where that fails (no compiler, no writable cache) :func:`load` returns ``None``, the
caller uses its numpy or torch code, and :func:`warn_fallback` says so once per kernel, with the
reason (:data:`FAILURES`) and what the fallback costs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

#: Why a kernel could not be built, by kernel name (the last failure of :func:`load`).
FAILURES: dict[str, str] = {}
_WARNED: set[str] = set()


def _cpu_flags() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return next((line for line in info.splitlines() if line.startswith("flags")), "")


def cache_dir(kernel: str) -> Path:
    """The directory of the compiled libraries of ``kernel``."""
    return Path(os.environ.get("ATTNLAB_CACHE") or Path.home() / ".cache" / "attnlab") / kernel


def load(source: Path, kernel: str, flags: tuple, defines: tuple = ()) -> ctypes.CDLL | None:
    """``source`` compiled with ``flags`` and ``defines`` and loaded, or ``None`` if it cannot be."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        FAILURES[kernel] = f"no C compiler ({os.environ.get('CC', 'cc')!r} is not on the PATH)"
        return None
    key = hashlib.sha256(source.read_bytes() + " ".join((cc, *flags, *defines, _cpu_flags())).encode())
    tag = "_".join(d.partition("=")[2] for d in defines)
    path = cache_dir(kernel) / f"{source.stem}_{tag}_{key.hexdigest()[:16]}.so"
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=path.parent) as tmp:  # atomic: parallel test workers
                out = Path(tmp) / path.name
                cmd = [cc, *defines, str(source), *flags, "-o", str(out)]  # flags last: -l options
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    first = (done.stderr.strip().splitlines() or ["no message"])[0]
                    FAILURES[kernel] = f"{Path(cc).name} failed on {source.name}: {first}"
                    return None
                os.replace(out, path)
        return ctypes.CDLL(str(path))
    except OSError as err:  # no writable cache, or a library that does not load
        FAILURES[kernel] = f"{type(err).__name__}: {err}"
        return None


def warn_fallback(kernel: str, cost: str) -> None:
    """Warn, once per ``kernel``, that it could not be built (the reason from :data:`FAILURES`) and
    what its fallback costs (``cost``, e.g. "training runs about 3 times slower")."""
    if kernel in _WARNED:
        return
    _WARNED.add(kernel)
    reason = FAILURES.get(kernel, "unknown reason")
    warnings.warn(
        f"the compiled {kernel} could not be built ({reason}); using the slower fallback: {cost}",
        RuntimeWarning,
        stacklevel=3,
    )
