"""The packages that export their parts lazily (:mod:`adapters.shared.exports`): each name is
written once, in the package's ``if TYPE_CHECKING:`` imports, and is still exported, typed and
imported only on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from adapters.shared.exports import exported

REPO = Path(__file__).resolve().parents[2]
LAZY = sorted(
    ".".join(init.relative_to(REPO).parent.parts)
    for init in (REPO / "adapters").rglob("__init__.py")
    if "lazy_exports(__name__, __file__)" in init.read_text(encoding="utf-8")
)


def test_the_lazy_packages_are_found() -> None:
    assert "adapters.matrix" in LAZY
    assert "adapters.sources.pinework" in LAZY
    assert len(LAZY) == 8, LAZY


@pytest.mark.parametrize("package", LAZY)
def test_every_name_of_the_type_checking_block_is_exported(package: str) -> None:
    module = importlib.import_module(package)
    source = Path(str(module.__file__)).read_text(encoding="utf-8")
    where = exported(package, source)

    assert where, f"{package} exports nothing"
    assert module.__all__ == sorted(where)
    for name, defined_in in where.items():
        assert getattr(module, name) is getattr(importlib.import_module(defined_in), name)
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nothing'"):
        _ = module.nothing


def test_importing_the_packages_imports_none_of_their_modules() -> None:
    """The point of the laziness: ``check-config`` reads a config model without nio, slack_sdk
    or the MCP SDK."""
    script = (
        "import sys\n"
        f"for p in {LAZY!r}:\n"
        "    __import__(p)\n"
        f"print(sorted(m for m in sys.modules if m.startswith(tuple(p + '.' for p in {LAZY!r}))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout


def test_mypy_takes_each_lazy_package_s_imports_as_its_exports() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    reexporting = {
        module
        for override in config["tool"]["mypy"]["overrides"]
        if override.get("implicit_reexport")
        for module in override["module"]
    }
    assert reexporting == set(LAZY)


def test_only_imports_from_the_package_s_own_modules_inside_type_checking_are_read() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from pkg.outside import NotExported\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.one import A, B as C\n"
        "    from other.module import D\n"
        "    from .relative import E\n"
    )
    assert exported("pkg", source) == {"A": "pkg.one", "C": "pkg.one"}
