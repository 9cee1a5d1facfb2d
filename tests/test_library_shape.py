"""Issue 35: the library stays in modules a reader can take in, none over 500 lines."""

from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "attnlab"


def test_no_library_module_is_over_500_lines():
    modules = sorted(LIB.rglob("*.py"))
    assert len(modules) > 30
    long = {str(p.relative_to(LIB)): n for p in modules if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}, f"split these modules by concern: {long}"
