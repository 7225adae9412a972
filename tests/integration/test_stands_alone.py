"""The repository stands alone: a clone with nothing beside it collects every test and passes the
unit tier.

A user's clone has no ``shared/`` folder next to it and no path of this machine, so everything the
suite reads must be inside the repository. This clones HEAD into an empty temporary folder, checks
that no folder above the clone holds anything the suite could lean on, then runs there what a new
user runs: the whole suite's collection (every test the working tree collects must be collected
there too, faults tier included) and the unit tier.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

COLLECTED = re.compile(r"^(\d+) tests? collected", re.MULTILINE)


def _pytest(cwd: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _collected(proc: subprocess.Popen[str], where: str) -> set[str]:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"collection failed in {where}:\n{out[-4000:]}"
    assert COLLECTED.search(out), out[-2000:]
    return {line for line in out.splitlines() if "::" in line}


def test_a_bare_clone_collects_every_test_and_passes_the_unit_tier(tmp_path: Path) -> None:
    clone = tmp_path / "elicitbot"
    subprocess.run(
        ["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for above in clone.parents:
        assert not (above / "shared").exists(), f"{above / 'shared'} sits above the clone"

    # The whole suite, every marker: the clone must find what the working tree finds.
    everything = ("--collect-only", "-q", "-m", "")
    in_clone = _pytest(clone, *everything)
    in_repo = _pytest(REPO, *everything)
    found, expected = _collected(in_clone, "the clone"), _collected(in_repo, "the repository")
    assert len(found) > 2000
    assert found == expected, sorted(expected ^ found)[:20]

    # The unit tier. tests/unit/test_tooling.py runs ruff, mypy and import-linter over the same
    # files; the outer suite runs it, so the clone spares its half minute.
    unit = _pytest(clone, "tests/unit", "-q", "-x", "--ignore=tests/unit/test_tooling.py")
    out, _ = unit.communicate(timeout=600)
    assert unit.returncode == 0, out[-6000:]
    assert re.search(r"^\d+ passed", out.splitlines()[-1].strip("= ")), out[-2000:]
