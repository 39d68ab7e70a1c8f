"""Interop with an independent implementation: a json + numpy reader and writer.

usage: safetensors_interop.py PROBE WORKDIR
"""
import json, os, struct, subprocess, sys
import numpy as np

probe, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)


def read_safetensors(path):  # the whole format, per the spec
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    dt = {"F32": "<f4", "F16": "<f2", "I32": "<i4"}
    arrays = {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                               dtype=dt[v["dtype"]]).reshape(v["shape"]) for k, v in header.items()}
    return n, meta, arrays, raw


# 1. Triad writes, numpy reads.
path = os.path.join(work, "triad.safetensors")
subprocess.run([probe, "write", path], check=True)
n, meta, t, raw = read_safetensors(path)
assert n % 8 == 0, n
assert meta == {"format": "pt", "note": "ünïcode ✓"}, meta
i = np.arange(105)
want_a = (np.sin(i) * 10.0 ** (i % 7 - 3)).astype(np.float32).reshape(3, 5, 7)
assert t["a"].shape == (3, 5, 7) and np.array_equal(t["a"], want_a)
assert np.array_equal(t["b.bias"], np.arange(6, dtype=np.float32) - 2.5)
assert len(raw) == 8 + n + 4 * (105 + 6)
assert not [f for f in os.listdir(work) if ".tmp." in f]

# 2. numpy writes (unpadded header, offsets not in key order, F16/BF16/I32), Triad reads.
rng = np.random.default_rng(0)
f32 = rng.standard_normal((4, 3)).astype(np.float32)
f16 = np.array([1, -2, 65504, 6e-8, 0.3333, -0.0, np.inf], dtype=np.float16)
bf16_src = rng.standard_normal(5).astype(np.float32)
bf16 = (bf16_src.view(np.uint32) >> 16).astype(np.uint16)
i32 = np.array([7, -7], dtype=np.int32)
blobs = [("z_f16", "F16", f16), ("a_f32", "F32", f32), ("m_bf16", "BF16", bf16), ("i", "I32", i32)]
header, data = {"__metadata__": {"source": "numpy"}}, b""
for name, dtype, arr in blobs:
    header[name] = {"dtype": dtype, "shape": list(arr.shape),
                    "data_offsets": [len(data), len(data) + arr.nbytes]}
    data += arr.tobytes()
text = json.dumps(header).encode()
path = os.path.join(work, "numpy.safetensors")
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data)
out = json.loads(subprocess.run([probe, "dump", path], check=True, capture_output=True).stdout)
assert out["metadata"] == {"source": "numpy"}, out["metadata"]
got = out["tensors"]
assert got["a_f32"]["shape"] == [4, 3] and np.array_equal(np.float32(got["a_f32"]["values"]), f32.ravel())
v = got["z_f16"]["values"]
assert v[-1] == "inf" and np.array_equal(np.float32(v[:-1]), f16[:-1].astype(np.float32)), v
assert np.signbit(np.float32(v[5]))
want_bf16 = (bf16.astype(np.uint32) << 16).view(np.float32)
assert np.array_equal(np.float32(got["m_bf16"]["values"]), want_bf16)
assert got["i"]["dtype"] == "I32" and got["i"]["values"] is None and got["i"]["nbytes"] == 8
print("safetensors interop OK")
