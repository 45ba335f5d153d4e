"""Read and write the safetensors format with numpy (no `safetensors` package).

Layout: an 8-byte little-endian unsigned header length N, N bytes of UTF-8
JSON mapping each tensor name to {"dtype", "shape", "data_offsets": [begin,
end]} (offsets relative to the byte buffer that follows the header) plus an
optional "__metadata__" map of string to string, then the byte buffer.
Tensors are little-endian, C order, and tile the buffer without gaps. Writers
pad the header with spaces so the buffer starts 8-byte aligned.
"""

import json
import os
import struct
import tempfile

import numpy as np

__all__ = ["load", "save", "load_bytes", "dumps", "SafetensorsError", "DTYPES"]

DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_NAMES = {v: k for k, v in DTYPES.items()}

# bfloat16, which numpy lacks: read as its bits and widened to float32
# (exact: a bf16 value is the upper half of a float32); written, for the
# names dumps() is asked to, as float32 rounded to nearest even.
_BF16_BITS = np.dtype("<u2")

# The reference implementation refuses headers above 100 MB.
MAX_HEADER = 100_000_000


class SafetensorsError(ValueError):
    pass


def _dtype_name(arr):
    for k, v in DTYPES.items():
        if v.kind == arr.dtype.kind and v.itemsize == arr.dtype.itemsize:
            return k
    raise SafetensorsError(f"unsupported dtype {arr.dtype}")


def bf16_bits(a):
    """float32 values rounded to nearest even bfloat16, as uint16 bits (NaN
    stays a quiet NaN), as torch's .to(torch.bfloat16) rounds."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    bits[nan] = ((u[nan] >> 16) | 0x40).astype("<u2")
    return bits


def dumps(tensors, metadata=None, bf16=()):
    """Serialize {name: array} to bytes; the names in `bf16` (float arrays)
    are stored as BF16, their values rounded to nearest even.

    Like the reference implementation, tensors are stored by decreasing
    element size, then name, so every tensor's data is aligned to its size.
    """
    header = {}
    chunks = []
    offset = 0
    bf16 = set(bf16)
    unknown = bf16 - set(tensors)
    if unknown:
        raise SafetensorsError(f"bf16 names no tensor: {sorted(unknown)}")
    arrays = {name: bf16_bits(t) if name in bf16 else np.asarray(t)
              for name, t in tensors.items()}
    for name in sorted(arrays, key=lambda k: (-arrays[k].dtype.itemsize, k)):
        arr = arrays[name]
        code = "BF16" if name in bf16 else _dtype_name(arr)
        data = np.ascontiguousarray(arr, dtype=_BF16_BITS if name in bf16
                                    else DTYPES[code]).tobytes()
        header[name] = {"dtype": code, "shape": [int(d) for d in arr.shape],
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((8 - len(hbytes) % 8) % 8)
    return struct.pack("<Q", len(hbytes)) + hbytes + b"".join(chunks)


def save(path, tensors, metadata=None, bf16=()):
    """Write atomically: temp file in the same folder, fsync, rename. The
    names in `bf16` are stored as BF16 (see dumps)."""
    data = dumps(tensors, metadata, bf16)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=d)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_bytes(data, with_metadata=False):
    """Parse safetensors bytes into {name: np.ndarray} (copies, native order).

    BF16 tensors come back as float32 arrays holding the same values.
    """
    if len(data) < 8:
        raise SafetensorsError("file too short for a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or 8 + n > len(data):
        raise SafetensorsError(f"header length {n} exceeds the file size {len(data)}")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"bad header JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError("header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    buf = memoryview(data)[8 + n:]
    out = {}
    spans = []
    for name, info in header.items():
        try:
            bf16 = info["dtype"] == "BF16"
            dt = _BF16_BITS if bf16 else DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"tensor {name!r}: bad header entry {info!r}") from None
        count = 1
        for d in shape:
            if d < 0:
                raise SafetensorsError(f"tensor {name!r}: negative dim in {shape}")
            count *= d
        if end - begin != count * dt.itemsize or begin < 0 or end > len(buf):
            raise SafetensorsError(
                f"tensor {name!r}: offsets [{begin}, {end}] do not fit shape "
                f"{list(shape)} {info['dtype']} in a {len(buf)}-byte buffer")
        spans.append((begin, end, name))
        arr = np.frombuffer(buf[begin:end], dtype=dt).reshape(shape)
        if bf16:
            out[name] = (arr.astype(np.uint32) << 16).view(np.float32)
        else:
            out[name] = arr.astype(dt.newbyteorder("="), copy=True)
    spans.sort()
    pos = 0
    for begin, end, name in spans:
        if begin != pos:
            raise SafetensorsError(f"tensor {name!r}: gap or overlap at byte {begin}")
        pos = end
    if pos != len(buf):
        raise SafetensorsError(f"{len(buf) - pos} trailing bytes after the last tensor")
    return (out, meta) if with_metadata else out


def load(path, with_metadata=False):
    with open(path, "rb") as fh:
        return load_bytes(fh.read(), with_metadata)
