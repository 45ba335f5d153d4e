"""The runtime's counter-based random numbers, in Python (docs/runtime.md).

The same functions as runtime/base/Rng.h and runtime/step/Init.cpp, bit for
bit: splitmix64's finalizer over `key + (counter + 1) * golden`, stream keys
from FNV-1a of a tag. The PyTorch references use it to drop exactly the
elements a compiled `train.dropout` drops. Scalars are Python ints; counters
are numpy uint64 arrays (whose arithmetic wraps modulo 2^64, as C's does).
"""

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    """splitmix64's finalizer of a Python int (mod 2^64)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for c in data.encode() if isinstance(data, str) else data:
        h = ((h ^ c) * 0x100000001B3) & MASK64
    return h


def stream_key(seed, tag):
    return mix64(fnv1a64(tag) ^ mix64(seed + GOLDEN))


def draw(key, counter):
    return mix64(key + (counter + 1) * GOLDEN)


def draws(key, counters):
    """draw(key, c) for a uint64 array of counters."""
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (counters.astype(np.uint64) + np.uint64(1)) * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def bits24(key, counters):
    """The top 24 bits of draw(key, c) for a uint64 array of counters."""
    return (draws(key, counters) >> np.uint64(40)).astype(np.uint32)


def normal(key, indices):
    """N(0, 1) by Box-Muller (cosine branch) from draws 2i and 2i+1, in
    double, as the runtime's rng::normal (libm's log / cos: the last ulp
    may differ from C's, which the rounding to float hides)."""
    i = indices.astype(np.uint64)
    u1 = ((draws(key, 2 * i) >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0 ** -53
    u2 = (draws(key, 2 * i + np.uint64(1)) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def dropout_key(seed, stream, step):
    """The key of train.dropout's stream `stream` at step `step` (1-based)."""
    return draw(stream_key(seed, f"dropout/{stream}"), step)


def dropout_keep(shape, p, seed, stream, step, first=0):
    """Boolean keep-mask of a dropout over a tensor of `shape` whose first
    element has global index `first` (0 for one process holding the whole
    global batch)."""
    n = 1
    for d in shape:
        n *= int(d)
    threshold = int(np.ceil(p * 2.0 ** 24))
    bits = bits24(dropout_key(seed, stream, step),
                  np.arange(first, first + n, dtype=np.uint64))
    return (bits >= threshold).reshape(shape)


def dropout_scale(p):
    """The factor kept elements are multiplied by (rounded to float32)."""
    return np.float32(1.0 / (1.0 - p)) if p < 1.0 else np.float32(0.0)
