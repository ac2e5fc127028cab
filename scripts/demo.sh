#!/usr/bin/env bash
# Create the environment (once) and run the main demo: JAX's counter, fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh
make_env default "$(command -v python3)" ""
.venvs/default/bin/python examples/counter.py "$@"
