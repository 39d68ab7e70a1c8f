"""Megatron indexed datasets against an independent implementation in numpy.

The writer, the reader, GPTDataset's three indices and BlendedDataset's blend below follow
Megatron-LM's megatron/core/datasets/indexed_dataset.py, gpt_dataset.py, blended_dataset.py and
helpers.cpp (ported line by line, numpy.random.RandomState included). Checks:
  1. numpy writes (every integer dtype, documents of several sequences, empty sequences),
     Triad reads the same sequences and document index.
  2. Triad writes, numpy reads; the files are byte for byte what numpy writes.
  3. GPT samples: Triad's document, sample and shuffle indices of epoch 0 and its samples equal
     Megatron's for the same seed (shuffled), and the plain stream windows without shuffle.
  4. A blend of two datasets with weights 0.3 / 0.7: Triad's samples equal Megatron's.

usage: indexed_interop.py PROBE WORKDIR
"""
import json, os, struct, subprocess, sys
import numpy as np

probe, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)

HEADER = b"MMIDIDX\x00\x00"
CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7,
         "uint16": 8}
NAMES = {v: k for k, v in CODES.items()}


def write_megatron(prefix, docs, dtype):
    """IndexedDatasetBuilder.add_document per document, then finalize (_IndexWriter)."""
    sequence_lengths, document_indices = [], [0]
    with open(prefix + ".bin", "wb") as f:
        for doc in docs:
            for seq in doc:
                a = np.array(seq, dtype=dtype)
                f.write(a.tobytes(order="C"))
                sequence_lengths.append(a.size)
            document_indices.append(len(sequence_lengths))
    itemsize = np.dtype(dtype).itemsize
    pointers, cur = [], 0
    for n in sequence_lengths:
        pointers.append(cur)
        cur += n * itemsize
    with open(prefix + ".idx", "wb") as f:
        f.write(HEADER)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", CODES[np.dtype(dtype).name]))
        f.write(struct.pack("<Q", len(sequence_lengths)))
        f.write(struct.pack("<Q", len(document_indices)))
        f.write(np.array(sequence_lengths, dtype=np.int32).tobytes(order="C"))
        f.write(np.array(pointers, dtype=np.int64).tobytes(order="C"))
        f.write(np.array(document_indices, dtype=np.int64).tobytes(order="C"))


def read_megatron(prefix):
    """_IndexReader + _MMapBinReader."""
    with open(prefix + ".idx", "rb") as s:
        assert s.read(9) == HEADER
        assert struct.unpack("<Q", s.read(8))[0] == 1
        dtype = np.dtype(NAMES[struct.unpack("<B", s.read(1))[0]])
        n = struct.unpack("<Q", s.read(8))[0]
        d = struct.unpack("<Q", s.read(8))[0]
        offset = s.tell()
    buf = np.memmap(prefix + ".idx", mode="r", order="C")
    lengths = np.frombuffer(buf, dtype=np.int32, count=n, offset=offset)
    pointers = np.frombuffer(buf, dtype=np.int64, count=n, offset=offset + lengths.nbytes)
    docs = np.frombuffer(buf, dtype=np.int64, count=d,
                         offset=offset + lengths.nbytes + pointers.nbytes)
    assert lengths.shape[0] == docs[-1]
    data = np.fromfile(prefix + ".bin", dtype=np.uint8)
    seqs = [np.frombuffer(data, dtype=dtype, count=int(lengths[i]), offset=int(pointers[i]))
            for i in range(n)]
    return dtype.name, seqs, docs


def probe_json(*args, stdin=None):
    r = subprocess.run([probe, *map(str, args)], input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"probe {args} failed ({r.returncode}): {r.stderr}")
        sys.exit(1)
    return json.loads(r.stdout)


rng = np.random.default_rng(7)
failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL", what)


def random_docs(rng, n_docs, high, max_seqs=1, empty_ok=False):
    docs = []
    for _ in range(n_docs):
        k = int(rng.integers(1, max_seqs + 1))
        lo = 0 if empty_ok else 1
        docs.append([rng.integers(0, high, int(rng.integers(lo, 40))).tolist() for _ in range(k)])
    return docs


# 1. numpy writes, Triad reads.
HIGH = {"uint8": 256, "int8": 128, "int16": 32768, "int32": 1 << 31, "int64": 1 << 31,
        "uint16": 65536}
for name, high in HIGH.items():
    docs = random_docs(rng, 25, high, max_seqs=3, empty_ok=True)
    prefix = os.path.join(work, f"np_{name}")
    write_megatron(prefix, docs, np.dtype(name))
    got = probe_json("read", prefix)
    want_seqs = [s for d in docs for s in d]
    want_docs = [0] + list(np.cumsum([len(d) for d in docs]))
    check(got["dtype"] == name, f"{name}: dtype {got['dtype']}")
    check(got["sequences"] == want_seqs, f"{name}: sequences differ")
    check(got["document_index"] == [int(x) for x in want_docs], f"{name}: document index differs")
print("numpy-written datasets read by Triad: 6 dtypes")

# 2. Triad writes, numpy reads; the bytes are numpy's.
for name, high in (("uint16", 50257), ("int32", 1 << 31), ("uint8", 256)):
    docs = random_docs(rng, 40, high, max_seqs=2, empty_ok=True)
    prefix = os.path.join(work, f"triad_{name}")
    subprocess.run([probe, "write", prefix, name], input=json.dumps(docs), text=True, check=True)
    dtype, seqs, didx = read_megatron(prefix)
    check(dtype == name, f"triad {name}: dtype {dtype}")
    check([s.tolist() for s in seqs] == [s for d in docs for s in d], f"triad {name}: sequences")
    check(didx.tolist() == [0] + np.cumsum([len(d) for d in docs]).tolist(), f"triad {name}: docs")
    write_megatron(prefix + "_np", docs, np.dtype(name))
    for ext in (".bin", ".idx"):
        check(open(prefix + ext, "rb").read() == open(prefix + "_np" + ext, "rb").read(),
              f"triad {name}: {ext} differs from numpy's bytes")
check(not [f for f in os.listdir(work) if ".tmp-" in f], "temporary files left behind")
print("Triad-written datasets read by numpy, byte-identical: 3 dtypes")


# 3. GPTDataset (one epoch: num_samples within the epoch, as Triad's runs within one epoch).
def build_sample_idx(sizes, document_idx, seq_length, num_epochs, tokens_per_epoch):
    """helpers.cpp build_sample_idx, drop_last_partial_sequence, add_extra_token 1."""
    extra = 1
    num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    sample_idx = np.zeros((num_samples + 1, 2), dtype=np.int64)
    sample_idx_index, document_idx_index, doc_offset = 1, 0, 0
    while sample_idx_index <= num_samples:
        remaining = seq_length + extra
        while remaining != 0:
            document_length = sizes[document_idx[document_idx_index]] - doc_offset
            remaining -= document_length
            if remaining <= 0:
                doc_offset += remaining + document_length - extra
                remaining = 0
            else:
                if document_idx_index == len(document_idx) - 1:
                    doc_offset = sizes[document_idx[document_idx_index]] - extra
                    break
                document_idx_index += 1
                doc_offset = 0
        sample_idx[sample_idx_index] = (document_idx_index, doc_offset)
        sample_idx_index += 1
    return sample_idx


class MegatronGPT:
    """GPTDataset with num_epochs 1 and split 100,0,0 (all sequences)."""

    def __init__(self, prefix, seq_length, seed):
        _, self.seqs, _ = read_megatron(prefix)
        sizes = np.array([len(s) for s in self.seqs], dtype=np.int32)
        self.T = seq_length
        rs = np.random.RandomState(seed)
        documents = np.arange(len(sizes), dtype=np.int32)
        doc = np.mgrid[0:1, 0:len(documents)][1]
        doc[:] = documents
        doc = doc.reshape(-1).astype(np.int32)
        rs.shuffle(doc)  # _build_document_index
        self.document_index = doc
        self.sample_index = build_sample_idx(sizes, doc, seq_length, 1, int(sizes.sum()))
        n = self.sample_index.shape[0] - 1
        shuffle = np.arange(0, n, 1, dtype=np.uint32)
        rs.shuffle(shuffle)  # _build_shuffle_index
        self.shuffle_index = shuffle

    def __len__(self):
        return self.sample_index.shape[0] - 1

    def __getitem__(self, idx):  # _query_document_sample_shuffle_indices
        idx = self.shuffle_index[idx]
        b, bo = self.sample_index[idx]
        e, eo = self.sample_index[idx + 1]
        if b == e:
            return self.seqs[self.document_index[b]][bo:eo + 1].tolist()
        parts = []
        for i in range(b, e + 1):
            s = self.seqs[self.document_index[i]]
            parts += s[(bo if i == b else 0):(None if i < e else eo + 1)].tolist()
        return parts


T, SEED = 16, 1234
prefix = os.path.join(work, "gpt")
docs = [[rng.integers(0, 50257, int(rng.integers(1, 60))).tolist()] for _ in range(120)]
write_megatron(prefix, docs, np.uint16)
meg = MegatronGPT(prefix, T, SEED)
ep = probe_json("indices", prefix, T, SEED, 1, len(meg))
check(ep["document_index"] == meg.document_index.tolist(), "document index != Megatron's")
check(ep["sample_index"] == meg.sample_index.reshape(-1).tolist(), "sample index != Megatron's")
check(ep["shuffle_index"] == meg.shuffle_index.tolist(), "shuffle index != Megatron's")
got = probe_json("samples", T, SEED, 1, len(meg), prefix)
check(got == [meg[i] for i in range(len(meg))], "shuffled samples != Megatron's")
stream = [t for d in docs for s in d for t in s]
got = probe_json("samples", T, SEED, 0, len(meg) + 3, prefix)
# Past one epoch the stream goes on into the second (Megatron's sample index spans the epochs).
want = [(stream + stream)[k * T:k * T + T + 1] for k in range(len(meg) + 3)]
check(got == want, "unshuffled samples are not the stream's windows (on into epoch 2)")
print(f"GPT samples: Megatron's {len(meg)} samples of epoch 0 for seed {SEED} "
      f"({len(docs)} documents, T {T}), and the plain stream without shuffle")


# 4. Blend (BlendedDataset, helpers.cpp build_blending_indices; weights normalized).
def build_blending_indices(weights, size):
    w = np.array(weights, dtype=np.float64)
    w = (w / np.sum(w)).tolist()
    current = [0] * len(w)
    out = []
    for sample_idx in range(size):
        x = max(float(sample_idx), 1.0)
        best, best_err = 0, w[0] * x - current[0]
        for d in range(1, len(w)):
            err = w[d] * x - current[d]
            if err > best_err:
                best, best_err = d, err
        out.append((best, current[best]))
        current[best] += 1
    return out


pa, pb = os.path.join(work, "blend_a"), os.path.join(work, "blend_b")
write_megatron(pa, [[rng.integers(0, 1000, int(rng.integers(1, 50))).tolist()] for _ in range(80)],
               np.uint16)
write_megatron(pb, [[rng.integers(1000, 2000, int(rng.integers(1, 50))).tolist()]
                    for _ in range(200)], np.uint16)
ma, mb = MegatronGPT(pa, T, SEED), MegatronGPT(pb, T, SEED)
count = int(min(len(ma) / 0.3, len(mb) / 0.7)) - 2
picks = build_blending_indices([0.3, 0.7], count)
want = [(ma if d == 0 else mb)[i] for d, i in picks]
got = probe_json("samples", T, SEED, 1, count, "0.3", pa, "0.7", pb)
check(got == want, "blended samples != Megatron's")
print(f"blend 0.3/0.7: Megatron's first {count} samples "
      f"({sum(1 for d, _ in picks if d == 0)} from A)")

print(f"{failures} failed")
sys.exit(1 if failures else 0)
