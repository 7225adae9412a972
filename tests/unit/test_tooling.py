"""The tree stays lint-, type- and layer-clean; the README's test command is the one CI runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, check=False, timeout=600)


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"```sh\n(python3 -m venv .*?)\n```", readme)
    assert len(commands) == 2, "README gives exactly two set-up commands"
    run_command, test_command = commands
    assert run_command.endswith("elicitbot serve")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci.splitlines()


def test_ruff_check_is_clean() -> None:
    result = _run(str(BIN / "ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _run(str(BIN / "ruff"), "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = _run(str(BIN / "mypy"), ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts_hold() -> None:
    """bot.domain imports no chat, SQL, scheduler or web library; edges see only the domain."""
    result = _run(str(BIN / "lint-imports"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.lower().replace("0 broken", "")
