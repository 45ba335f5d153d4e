"""A bounded, fixed-seed campaign of the mutation fuzzer (test/fuzz/fuzz.py)
over the compiler's IR, valid models through random pipeline options, and
the executable's flags, safetensors inputs and checkpoint index: every
mutant must end with exit status 0, 1 or 2 (one `ztrain: error:` line for
the executable), never a signal or a hang. Longer campaigns are run by hand
(docs/fuzzing.md); what they find becomes a case here.
"""

import os
import random
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))

import fuzz  # noqa: E402

# About 40 s together on the 2-core CI machine.
CAMPAIGNS = [("ir", 600, 101), ("pipeline", 300, 102), ("exe", 1500, 103)]


@pytest.mark.parametrize("target,count,seed", CAMPAIGNS)
def test_no_mutant_breaks_the_contract(target, count, seed, tmp_path):
    run = {"ir": fuzz.fuzz_ir, "pipeline": fuzz.fuzz_pipeline, "exe": fuzz.fuzz_exe}[target]
    found = run(count, random.Random(seed), str(tmp_path / "findings"), 60.0)
    assert not found, "\n".join(found)


def test_the_fuzzer_sees_a_crash():
    """classify() is what makes the campaign able to fail: a signal, an
    unexpected status, a hang and a second error line are findings."""
    import subprocess
    ok = subprocess.CompletedProcess(["ztrain-opt"], 1, "", "x.mlir:1:1: error: bad\n")
    assert fuzz.classify(ok, False) is None
    assert fuzz.classify(subprocess.CompletedProcess(["x"], -11, "", ""), False) == "signal 11"
    assert fuzz.classify(subprocess.CompletedProcess(["x"], 134, "", ""), False) == \
        "exit status 134"
    assert fuzz.classify(ok, True) == "hang (timeout)"
    two = subprocess.CompletedProcess(["model"], 1, "",
                                      "ztrain: error: a\nztrain: error: b\n")
    assert fuzz.classify(two, False, runtime=True) == "2 error lines"
