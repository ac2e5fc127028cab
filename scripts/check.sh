#!/usr/bin/env bash
# Every check effax has, on the JAX lines it supports, from a fresh clone:
#   ruff (lint + format), mypy --strict over effax/, pyright over what users write
#   (the examples, tests/types/, the docs' code cells); the wheel, installed into a
#   fresh environment and smoke-tested outside the checkout (scripts/wheel_smoke.sh);
#   the test suite (docstring examples included) on the default python3 (jax 0.10.x
#   on 3.11) and on a Python 3.12 (jax 0.12.x; all but JAX_INDEPENDENT below, which
#   tests no JAX behaviour); the core transparency suite
#   (CORE_SUITE below) on Python 3.12 with jax 0.11.x; then the documentation site
#   (docs/), every page executed, warnings as errors. Each environment's jax and
#   jaxlib are pinned (JAX_* below), so every run tests the same versions.
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

run_suite() {  # run_suite NAME HYPOTHESIS_PROFILE [TEST PATH...]
  local name="$1" env=".venvs/$1" profile="$2"
  shift 2
  echo "==> $name: $("$env/bin/python" -c 'import sys, jax; print(f"python {sys.version.split()[0]}, jax {jax.__version__}")')"
  # one pytest worker per core (pytest-xdist); PYTEST_WORKERS=0 runs in one process
  HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-$profile}" "$env/bin/python" -m pytest \
    -n "${PYTEST_WORKERS:-auto}" "$@" "${PYTEST_ARGS[@]}"
}

# Each stage's wall time and how busy the machine's cores were during it (from
# /proc/stat, where there is one: idle cores are time a stage could give back), listed
# at the end (where the time goes); a stage's start shows the time since the start.
STAGES=()
stage_name="" stage_start=$SECONDS
cpu_ticks() {  # "BUSY IDLE", the machine's CPU time so far, in clock ticks
  if [ -r /proc/stat ]; then awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; else echo "0 0"; fi
}
read -r busy_start idle_start < <(cpu_ticks)
stage() {  # stage NAME: end the stage running (if any), start NAME
  local busy idle
  read -r busy idle < <(cpu_ticks)
  if [ -n "$stage_name" ]; then
    local total=$((busy - busy_start + idle - idle_start))
    STAGES+=("$(printf '%4ds  %3d%% busy  %s' $((SECONDS - stage_start)) \
      $((total > 0 ? 100 * (busy - busy_start) / total : 0)) "$stage_name")")
  fi
  stage_name="$1" stage_start=$SECONDS busy_start=$busy idle_start=$idle
  if [ -n "$1" ]; then echo "==> $1 (at $((SECONDS / 60))m$((SECONDS % 60))s)"; fi
}

PYTEST_ARGS=("$@")
# The JAX each environment tests, jax and jaxlib alike (pyproject.toml allows
# >=0.10,<0.13; these are the newest patches of each line on the index).
JAX_DEFAULT=0.10.2   # .venvs/default, python3 (3.11)
JAX_PY312=0.12.0.1   # .venvs/py312, Python 3.12
JAX_MIDDLE=0.11.2    # .venvs/py312-jax011, Python 3.12, core suite only
# The core transparency suite, the one run on the middle JAX line: effax's promise
# that handled code computes under jit/scan/cond/vmap exactly what it does eagerly,
# per feature (handle and its transforms, control flow, key streams, the effect
# kinds, context variables, shard_map and sharded jit on 8 host devices) and over
# 100 random programs of each generator (test_properties and test_compositions
# under ci-small): what leans on the JAX internals that change between releases,
# in about three minutes on two cores. The rest
# (typing, plugins, peer-library ports, docs, examples) is JAX-independent or is
# already covered on 0.10 and 0.12. Its files are the ones marked `core`
# (`pytestmark = pytest.mark.core`), which tests/conftest.py also leak-checks on 0.10.
mapfile -t CORE_SUITE < <(grep -l '^pytestmark = pytest.mark.core$' tests/test_*.py)
if [ "${#CORE_SUITE[@]}" -lt 9 ]; then
  echo "ERROR: found ${#CORE_SUITE[@]} test files marked core (pytestmark = pytest.mark.core), expected 9 or more." >&2
  exit 1
fi
# What tests no JAX behaviour, run once, on the default environment only: the mypy
# plugin's corpus (mypy's own checks of effax under jax 0.12 run above it), its
# tables of the API, the package's layout and its version.
JAX_INDEPENDENT=(
  tests/test_mypy_plugin.py tests/test_plugin_tables.py tests/test_layout.py tests/test_version.py
)
# What the static lanes below already check, deselected from the suites here (pytest
# alone still runs it): pyright over tests/types/, which each lane's pyright covers.
CHECKED_ABOVE=(--deselect tests/test_typing.py::test_pyright)
export XLA_FLAGS="${XLA_FLAGS:---xla_force_host_platform_device_count=8}"

PY_DEFAULT="$(command -v python3)"
if ! PY312="$(find_py312)"; then
  echo "ERROR: no Python 3.12 found (looked for python3.12 on PATH and under ~/.pyenv)." >&2
  echo "ERROR: effax must be tested on jax 0.12.x, which needs Python >= 3.12." >&2
  echo "ERROR: install one (e.g. 'pyenv install 3.12') and re-run." >&2
  exit 3
fi

# uv, taken once before the environments are made side by side (scripts/_env.sh)
uv_bin >/dev/null || echo "==> uv could not be had: pip makes the environments"
# The Python 3.12 environments are made in the background while the default one is
# made and checked (pip waits mostly on the network and the disk); each is waited for
# where it is first used (from any lane: its exit status is written to a file), and
# its log shown if it failed.
logs="$(mktemp -d)"
make_env_in_background() {  # make_env_in_background NAME ARGS...: make_env NAME ARGS... &
  (set +e; make_env "$@" >"$logs/$1" 2>&1; echo $? >"$logs/$1.status") &
}
make_env_in_background py312 "$PY312" "[dev,docs]" "jax==$JAX_PY312" "jaxlib==$JAX_PY312"
make_env_in_background py312-jax011 "$PY312" "[test]" "jax==$JAX_MIDDLE" "jaxlib==$JAX_MIDDLE"
await_env() {  # await_env NAME
  while [ ! -s "$logs/$1.status" ]; do sleep 0.5; done
  if [ "$(cat "$logs/$1.status")" != 0 ]; then
    cat "$logs/$1" >&2
    echo "ERROR: making .venvs/$1 failed (its output is above)." >&2
    exit 1
  fi
  cat "$logs/$1"
}
stage "environment: default"
make_env default "$PY_DEFAULT" "[dev,docs]" "jax==$JAX_DEFAULT" "jaxlib==$JAX_DEFAULT"

# The static checks run in two lanes, one per core (each is one process): the linters
# and type checkers with jax $JAX_DEFAULT here, the wheel and the type checkers with
# jax $JAX_PY312 beside them. A lane's output is shown whole when it ends.
checks_default() {
  echo "--> ruff"
  .venvs/default/bin/ruff check .
  .venvs/default/bin/ruff format --check .
  echo "--> mypy --strict effax/ effax_stubs/ (jax $JAX_DEFAULT)"
  .venvs/default/bin/mypy --strict effax effax_stubs
  echo "--> pyright: examples/, tests/types/, the docs' code cells (jax $JAX_DEFAULT's annotations)"
  .venvs/default/bin/pyright --pythonpath .venvs/default/bin/python
  .venvs/default/bin/python scripts/pyright_docs.py
}
checks_wheel_and_py312() {
  # the wheel a user installs, in a fresh environment without the checkout
  bash scripts/wheel_smoke.sh "$JAX_DEFAULT"
  await_env py312
  echo "--> mypy --strict and pyright with jax $JAX_PY312"
  .venvs/py312/bin/mypy --strict effax effax_stubs
  .venvs/py312/bin/pyright --pythonpath .venvs/py312/bin/python
  .venvs/py312/bin/python scripts/pyright_docs.py
}
stage "static checks: ruff, mypy --strict, pyright (jax $JAX_DEFAULT and $JAX_PY312), the wheel"
checks_wheel_and_py312 >"$logs/lane" 2>&1 &
pid_lane=$!
checks_default
if ! wait "$pid_lane"; then
  cat "$logs/lane" >&2
  echo "ERROR: the wheel or the checks with jax $JAX_PY312 failed (output above)." >&2
  exit 1
fi
cat "$logs/lane"

# 500 generated programs per generator on the default JAX, 100 on each of the others
stage "tests: default"
run_suite default ci "${CHECKED_ABOVE[@]}"

stage "tests: py312"
run_suite py312 ci-small "${JAX_INDEPENDENT[@]/#/--ignore=}" "${CHECKED_ABOVE[@]}"

stage "environment: py312-jax011 (the rest of its making)"
await_env py312-jax011
stage "tests: py312-jax011 (core suite)"
run_suite py312-jax011 ci-small "${CORE_SUITE[@]}"
# (run beside the default suite at low priority, these two made it slower by as much
# as they took: its idle share, 17%, is not spare capacity on this machine)
stage "docs: every page executed (one page per core at a time), warnings as errors"
.venvs/default/bin/sphinx-build -j auto -W --keep-going -q -b html docs docs/_build/html
stage ""
echo "==> all checks passed in $((SECONDS / 60))m$((SECONDS % 60))s:"
printf '%s\n' "${STAGES[@]}"
