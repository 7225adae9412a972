"""Slack and Matrix keep the same file set (docs/layout.md): the seven modules at the top,
everything else in sub-packages."""

from pathlib import Path

import pytest

ADAPTERS = Path(__file__).resolve().parents[2] / "adapters"
SEVEN = {"listener", "translate", "chat", "render", "wording", "errors", "config"}


@pytest.mark.parametrize("connector", ["slack", "matrix"])
def test_the_top_holds_the_seven_and_init(connector: str) -> None:
    top = {p.stem for p in (ADAPTERS / connector).glob("*.py")}
    assert top == SEVEN | {"__init__"}, sorted(top ^ (SEVEN | {"__init__"}))


@pytest.mark.parametrize("connector", ["slack", "matrix"])
def test_every_sub_package_is_a_package(connector: str) -> None:
    subs = [p for p in (ADAPTERS / connector).iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert subs
    assert [p.name for p in subs if not (p / "__init__.py").is_file()] == []


def test_both_have_the_shared_sub_packages() -> None:
    def subs(connector: str) -> set[str]:
        return {p.parent.name for p in (ADAPTERS / connector).glob("*/__init__.py")}

    assert {"intake", "markup", "api"} <= subs("slack") & subs("matrix")
    assert "e2ee" in subs("matrix")
    assert {"review", "modals"} <= subs("slack")
