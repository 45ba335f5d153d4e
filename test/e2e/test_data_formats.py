"""--data token files (issue 15): nanoGPT's uint16 train.bin, .npy arrays,
bytes of text, told apart by --data-format or the extension, never guessed.

- the same token ids as bytes of text, as nanoGPT's uint16 train.bin, as a
  uint32 file and as a .npy array train the same weights, bit for bit;
- a file whose name says nothing is refused in one line, and a wrong width
  is caught against the vocabulary before step 1;
- a resumed run refuses a missing or another data file.
"""

import numpy as np

import e2e_util
from ztrain import models, parity

VOCAB = 64


def text_tokens(n=4000):
    # Bytes below VOCAB: the same ids whatever the width they are stored in.
    rng = np.random.default_rng(5)
    return rng.integers(0, VOCAB, size=n, dtype=np.uint8)


def gpt_exe(tmp_path):
    spec = models.gpt(batch=2, seq=16, vocab=VOCAB, layers=1, width=16, heads=2)
    return e2e_util.compile_text(spec.to_mlir(), str(tmp_path),
                                 parity.OptimizerConfig("adam", lr=1e-2), name="gpt")


def one_error(p):
    assert p.returncode != 0
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_every_format_of_the_same_ids_trains_the_same(tmp_path):
    exe = gpt_exe(tmp_path)
    ids = text_tokens()
    files = {
        "corpus.txt": ([], ids.tobytes()),
        "train.bin": ([], ids.astype("<u2").tobytes()),
        "ids.u32": (["--data-format", "u32"], ids.astype("<u4").tobytes()),
    }
    for name, (_, payload) in files.items():
        (tmp_path / name).write_bytes(payload)
    np.save(tmp_path / "ids.npy", ids.astype(np.uint16))
    files["ids.npy"] = ([], None)
    saved = {}
    for name, (flags, _) in files.items():
        out = tmp_path / (name + ".safetensors")
        parity.run_exe(exe, 5, data=str(tmp_path / name), save=str(out), seed=3,
                       threads=1, extra=flags)
        saved[name] = out.read_bytes()
    for name in files:
        assert saved[name] == saved["corpus.txt"], name


def test_unknown_names_and_wrong_widths_are_refused(tmp_path):
    exe = gpt_exe(tmp_path)
    ids = text_tokens()
    (tmp_path / "corpus.dat").write_bytes(ids.tobytes())
    line = one_error(e2e_util.run([exe, "--steps", 1, "--data", tmp_path / "corpus.dat"]))
    assert "cannot tell the format from the name; give --data-format=" in line, line
    # Bytes read as nanoGPT's uint16: two bytes make one id, far past 64.
    (tmp_path / "bytes.bin").write_bytes(ids.tobytes())
    line = one_error(e2e_util.run([exe, "--steps", 1, "--data", tmp_path / "bytes.bin"]))
    assert "out of range [0, 64) (token 0); is the token width right (--data-format)?" in line
    line = one_error(e2e_util.run([exe, "--steps", 1, "--data", tmp_path / "corpus.dat",
                                   "--data-format", "u12"]))
    assert "--data-format: 'u12' is not a format" in line, line
    # The same bytes, named for what they are: accepted.
    p = e2e_util.run([exe, "--steps", 1, "--data", tmp_path / "corpus.dat",
                      "--data-format", "text"])
    assert p.returncode == 0, p.stderr


def test_uint32_ids_named_bin_are_refused(tmp_path):
    """A .bin of uint32 ids (every second uint16 is 0) is not read as
    nanoGPT's uint16 by accident; the flags say which it is."""
    exe = gpt_exe(tmp_path)
    path = tmp_path / "t32.bin"
    path.write_bytes(text_tokens().astype("<u4").tobytes())
    line = one_error(e2e_util.run([exe, "--steps", 1, "--data", path]))
    assert line == (f"ztrain: error: --data '{path}': every second uint16 token is 0, as in "
                    "uint32 token ids read as uint16 (.bin is nanoGPT's uint16); give "
                    "--data-format=u32, or --data-format=u16 if these are uint16"), line
    for fmt in ("u32", "u16"):
        p = e2e_util.run([exe, "--steps", 1, "--data", path, "--data-format", fmt])
        assert p.returncode == 0, p.stderr


def test_resume_refuses_missing_or_other_data(tmp_path):
    exe = gpt_exe(tmp_path)
    ids = text_tokens()
    data, other = tmp_path / "a.txt", tmp_path / "b.txt"
    data.write_bytes(ids.tobytes())
    other.write_bytes(ids[::-1].tobytes())
    ck = tmp_path / "ck"
    p = e2e_util.run([exe, "--steps", 2, "--data", data, "--save-checkpoint", ck])
    assert p.returncode == 0, p.stderr
    line = one_error(e2e_util.run([exe, "--steps", 1, "--resume", ck]))
    assert "was trained on --data" in line and "give --data" in line, line
    line = one_error(e2e_util.run([exe, "--steps", 1, "--resume", ck, "--data", other]))
    assert "is not the file the checkpoint was trained on" in line, line
    # The same file under another name is the same data.
    moved = tmp_path / "moved.txt"
    moved.write_bytes(data.read_bytes())
    p = e2e_util.run([exe, "--steps", 1, "--resume", ck, "--data", moved])
    assert p.returncode == 0, p.stderr
    # The same file read another way is other data: refused, naming the
    # flag that continues it.
    line = one_error(e2e_util.run([exe, "--steps", 1, "--resume", ck, "--data", data,
                                   "--data-format", "u16"]))
    assert line.endswith("the checkpoint read its data as text, this run reads "
                         f"'{data}' as u16 (--data-format=text continues it)"), line
    line = one_error(e2e_util.run([exe, "--steps", 1, "--resume", ck, "--data", data,
                                   "--data-order", "sequential"]))
    assert line.endswith("the checkpoint drew its data windows in random order, this run in "
                         "sequential (--data-order=random continues it)"), line


def test_sequential_order_reads_the_file_in_order(tmp_path):
    """--data-order=sequential: sample s is the window at token s*T (a
    model that only sees its input cannot show that, but the evaluation
    loss of two files that differ only after the windows it reads can:
    equal; and random windows from the seed differ from in-order ones)."""
    exe = gpt_exe(tmp_path)
    ids = text_tokens()
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(ids.tobytes())
    # The same first 2 x 16 + 1 tokens (two windows of T=16 and a target);
    # everything after them differs.
    tail = (ids[33:] + 1) % 64
    b.write_bytes(np.concatenate([ids[:33], tail.astype(np.uint8)]).tobytes())
    losses = {}
    for name, path in (("a", a), ("b", b)):
        for order in ("sequential", "random"):
            report = tmp_path / f"{name}-{order}.json"
            # --eval-steps 1: the 2 windows of one batch (B = 2).
            p = e2e_util.run([exe, "--steps", 0, "--data", a, "--eval-data", path,
                              "--eval-steps", 1, "--data-order", order, "--report", report])
            assert p.returncode == 0, p.stderr
            losses[name, order] = parity.read_report(str(report))["eval"][-1]["loss"]
    assert losses["a", "sequential"] == losses["b", "sequential"]
    assert losses["a", "random"] != losses["b", "random"]
    p = e2e_util.run([exe, "--steps", 1, "--data", a, "--data-order", "shuffled"])
    assert p.returncode == 2 and "'shuffled' is not an order" in p.stderr


def test_data_thinner_than_a_global_batch_is_a_warning(tmp_path):
    """17 tokens for windows of 16 are one window: every row of every step
    is that window. The run says so once (issue 49: it trained silently on
    one window repeated); a file with enough windows says nothing."""
    exe = gpt_exe(tmp_path)
    thin, thick = tmp_path / "thin.txt", tmp_path / "thick.txt"
    thin.write_bytes(text_tokens(17).tobytes())
    thick.write_bytes(text_tokens(400).tobytes())
    p = e2e_util.run([exe, "--steps", 1, "--data", thin, "--log-every", 0])
    assert p.returncode == 0, p.stderr
    warnings = [l for l in p.stderr.splitlines() if l.startswith("ztrain: warning:")]
    assert warnings == [f"ztrain: warning: --data '{thin}': 17 bytes hold 1 distinct window "
                        "of 16 tokens plus a target, fewer than a global batch of 2 rows: "
                        "each step repeats windows"], p.stderr
    p = e2e_util.run([exe, "--steps", 1, "--data", thick, "--log-every", 0])
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
