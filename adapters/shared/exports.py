"""A package's names, each imported from its module on first use (PEP 562), e.g. when only its
config model is wanted (``check-config``). The package names each export once, in an
``if TYPE_CHECKING:`` block: mypy reads them there, and :func:`lazy_exports` reads that block."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def lazy_exports(package: str, init: str) -> tuple[list[str], Callable[[str], Any]]:
    """``(__all__, __getattr__)`` for ``package``, whose ``__init__`` is at ``init``."""
    where = exported(package, Path(init).read_text(encoding="utf-8"))

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module hook's own name
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return sorted(where), __getattr__


def exported(package: str, source: str) -> dict[str, str]:
    """Each name the ``if TYPE_CHECKING:`` blocks of ``source`` import from a module of
    ``package``, mapped to that module."""
    where: dict[str, str] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for imported in node.body:
            if isinstance(imported, ast.ImportFrom) and imported.level == 0:
                module = imported.module or ""
                if module.startswith(f"{package}."):
                    where.update((a.asname or a.name, module) for a in imported.names)
    return where
