"""A package's names, each imported from its module on first use (PEP 562).

A surface's package re-exports its parts (``from adapters.matrix import MatrixChat``) without
importing them all when only one small module of it is wanted: its config model, which the root
reads for ``check-config`` long before (or without ever) starting the surface.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, modules: Mapping[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``modules`` maps each submodule (relative name)
    to the names it exports."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module hook's own name
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
