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
