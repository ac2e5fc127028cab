"""Run mypy over tests/types/: files that pin inferred types and expected errors."""

import pathlib
import subprocess
import sys

import pytest

TYPES = pathlib.Path(__file__).parent / "types"


@pytest.mark.parametrize("path", sorted(TYPES.glob("*.py")), ids=lambda p: p.name)
def test_types(path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--warn-unused-ignores",
            "--no-incremental",
            "--cache-dir=/dev/null",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
