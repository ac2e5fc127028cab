#!/usr/bin/env bash
# Create the environment (once) and run the main demo, effax's job end to end:
# JAX's counter, fixed; then a short training run (dropout keys, optimizer state and
# hyperparameters as effects, one compiled step) that prints its progress and saves
# its loss curve (the path is printed; pass --png PATH to choose it).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh
make_env default "$(command -v python3)" "[demo]"
echo "==> 1. the counter: state that jax.jit would bake in as a constant"
.venvs/default/bin/python examples/counter.py
echo
echo "==> 2. a short training run: keys, state and configuration handled outside one compiled step"
.venvs/default/bin/python examples/mlp_regression.py --steps 600 "$@"
