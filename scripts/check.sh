#!/usr/bin/env bash
# Every check effax has, on both supported JAX lines, from a fresh clone:
#   ruff (lint + format), mypy --strict over effax/, the test suite (docstring
#   examples included) on the default python3 (jax 0.10.x on 3.11) and on a
#   Python 3.12 (jax 0.12.x); then the documentation site (docs/), every page
#   executed, warnings as errors.
# Environments are created under .venvs/ on first use and reused afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh

find_py312() {
  local candidate
  for candidate in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 python3.12; do
    # a pyenv shim can exist without a runnable 3.12 behind it: ask the interpreter
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
      command -v "$candidate"; return 0
    fi
  done
  return 1
}

run_suite() {  # run_suite NAME HYPOTHESIS_PROFILE
  local env=".venvs/$1"
  echo "==> $1: $("$env/bin/python" -c 'import sys, jax; print(f"python {sys.version.split()[0]}, jax {jax.__version__}")')"
  # one pytest worker per core (pytest-xdist); PYTEST_WORKERS=0 runs in one process
  HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-$2}" "$env/bin/python" -m pytest \
    -n "${PYTEST_WORKERS:-auto}" "${PYTEST_ARGS[@]}"
}

PYTEST_ARGS=("$@")
export XLA_FLAGS="${XLA_FLAGS:---xla_force_host_platform_device_count=8}"

PY_DEFAULT="$(command -v python3)"
if ! PY312="$(find_py312)"; then
  echo "ERROR: no Python 3.12 found (looked for python3.12 on PATH and under ~/.pyenv)." >&2
  echo "ERROR: effax must be tested on jax 0.12.x, which needs Python >= 3.12." >&2
  echo "ERROR: install one (e.g. 'pyenv install 3.12') and re-run." >&2
  exit 3
fi

make_env default "$PY_DEFAULT" "[dev,docs]"
make_env py312 "$PY312" "[dev,docs]"

echo "==> ruff"
.venvs/default/bin/ruff check .
.venvs/default/bin/ruff format --check .
echo "==> mypy --strict effax/ effax_stubs/"
.venvs/default/bin/mypy --strict effax effax_stubs
.venvs/py312/bin/mypy --strict effax effax_stubs

# 500 generated programs on the default JAX, 100 more on the second one
run_suite default ci
run_suite py312 ci-small
echo "==> docs: every page executed, warnings as errors"
.venvs/default/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html
echo "==> all checks passed"
