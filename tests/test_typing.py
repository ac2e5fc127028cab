"""Run mypy and pyright over tests/types/: files that pin inferred types and expected errors."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent
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


def test_pyright():
    """pyright (pyproject.toml's [tool.pyright]: basic mode, the `# pyright: ignore`
    pins checked) reports no error on tests/types/, the mypy plugin's corpus included:
    the errors it is expected to report are pinned where they are."""
    result = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, TYPES],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright did not run:\n{result.stdout}{result.stderr}")
    errors = [
        f"{d['file']}:{d['range']['start']['line'] + 1}: {d['message']} ({d.get('rule')})"
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    ]
    assert not errors, "\n".join(errors)
    assert report["summary"]["filesAnalyzed"] >= len(list(TYPES.rglob("*.py")))
