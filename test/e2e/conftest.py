"""Shared fixtures of the end-to-end tests.

Tools come from $ZTRAIN_BIN_DIR, default <repo>/build/bin. A missing tool is
a failure, not a skip: CI always builds them, so their absence means the build
is broken.
"""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import e2e_util  # noqa: E402

# Every model the tests compile is verified after every pass (ztrain-compile
# verifies once, at the end, by default).
os.environ.setdefault("ZTRAIN_VERIFY_EACH", "1")


@pytest.fixture(scope="session")
def compiler():
    """Path of ztrain-compile (fails the test when it is not built)."""
    return e2e_util.require_tool("ztrain-compile")


@pytest.fixture(scope="session")
def small_mlp(tmp_path_factory, compiler):
    """A small MLP compiled once (Adam), with a data file: (spec, exe, data path, dir)."""
    from ztrain import models, parity, safetensors

    d = tmp_path_factory.mktemp("small_mlp")
    spec = models.mlp(batch=8, in_features=12, hidden=[16], classes=5)
    exe = e2e_util.compile_spec(spec, str(d), parity.OptimizerConfig("adam", lr=1e-2))
    data = str(d / "data.safetensors")
    safetensors.save(data, parity.make_data(spec, samples=24, seed=5))
    return spec, exe, data, d


def pytest_collection_modifyitems(config, items):
    """ZTRAIN_E2E_SHARD=i/n keeps the i-th of n shards (CTest runs the shards
    side by side: most tests leave a core idle while one process compiles or
    a rank waits). Tests go round-robin in collection order, so the
    parametrized cases of one expensive test spread over the shards; a module
    that sets E2E_SERIAL = True (it owns a machine-wide resource: network
    namespaces, a Slurm daemon) stays whole in shard 0, so no two of them
    run at once."""
    shard = os.environ.get("ZTRAIN_E2E_SHARD")
    if not shard:
        return
    index, count = (int(x) for x in shard.split("/"))
    kept, deselected, position = [], [], 0
    for item in items:
        if getattr(item.module, "E2E_SERIAL", False):
            mine = index == 0
        else:
            mine = position % count == index
            position += 1
        (kept if mine else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = kept
