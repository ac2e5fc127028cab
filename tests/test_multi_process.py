"""effax under ``jax.distributed``: 2 processes x 4 CPU devices (gloo collectives)
compute what 1 process x 8 devices computes (tests/two_processes.py)."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from tests import two_processes

WORKER = pathlib.Path(__file__).with_name("two_processes.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def launched():
    """The worker's results, one per process (one launch for the module)."""
    port = _free_port()
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join(
            [str(WORKER.parent.parent), os.environ.get("PYTHONPATH", "")]
        ),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(i), str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    results = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung collective
            for p in procs:
                p.kill()
            raise
        assert proc.returncode == 0, out[-3000:]
        line = next(line for line in out.splitlines() if line.startswith("RESULT "))
        results.append(json.loads(line.removeprefix("RESULT ")))
    return results


def test_import_before_initialize_and_every_process_sees_all_devices(launched):
    assert [r["process"] for r in launched] == [0, 1]
    assert [r["devices"] for r in launched] == [8, 8]


def test_processes_agree_with_each_other_and_with_one_process(launched):
    first, second = launched
    shared = ("weights", "weights_sharding", "steps", "keys", "counter")
    assert {k: first[k] for k in shared} == {k: second[k] for k in shared}
    alone = two_processes.run(Mesh(np.array(jax.devices()[:8]), ("d",)))
    np.testing.assert_allclose(first["weights"], alone["weights"], rtol=1e-6)
    assert first["keys"] == alone["keys"]  # bit for bit: the same stream, split per device
    assert (first["steps"], first["counter"]) == (alone["steps"], alone["counter"]) == (3, 3)
    assert first["weights_sharding"] == alone["weights_sharding"] == "P()"


def test_every_device_draws_its_own_keys(launched):
    keys = [tuple(k) for step in launched[0]["keys"] for k in step]
    assert len(keys) == 3 * 8 and len(set(keys)) == len(keys)


def test_a_stream_seeded_per_process_and_a_missing_handler_are_named(launched):
    for result in launched:
        assert "'rng'" in result["disagree"] and "same handlers" in result["disagree"]
        assert "State('steps')" in result["unhandled"]
        assert "2 processes" in result["unhandled"] and "blocked" in result["unhandled"]
