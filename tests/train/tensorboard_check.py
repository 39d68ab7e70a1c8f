#!/usr/bin/env python3
"""Checks a run's TensorBoard event files against its metrics.jsonl.

Usage: tensorboard_check.py [--killed] [--grouped SEQ WORLD] EVENTS_DIR METRICS_JSONL GLOBAL_BATCH
                            TB_INTERVAL LOG_INTERVAL [FILES]

Every file named events.out.tfevents.* in EVENTS_DIR is read record by record: the framing's two
masked CRC-32Cs are verified with a CRC written here (not Triad's), and each record parses as an
Event whose message types are built here from tensorflow's published field numbers (not from
Triad's .proto). The first record of a file is the file version "brain.Event:2" and only it; the
others are summaries of scalars. Each tag's series, over all files, must equal what metrics.jsonl
says step by step (float32), with Megatron's tags:
  every TB_INTERVAL steps: lm loss, learning-rate, batch-size, grad-norm, loss-scale (1 without fp16), each
      also as "<tag> vs samples" against the samples consumed; mem-max-allocated-bytes
  every LOG_INTERVAL steps: iteration-time (seconds), throughput (TFLOP/s per device)
  after each evaluation: lm loss validation, lm loss validation ppl (and their "vs samples")
--grouped SEQ WORLD: Megatron-DeepSpeed's tags instead (logging.tensorboard_tags:
megatron-deepspeed): each in its group ("lm-loss-training/lm loss", "learning-rate/learning-rate",
"lm-loss-validation/lm loss validation"), each also "vs tokens" against samples x SEQ,
world-size/world-size (WORLD), the four steps-vs-samples / steps-vs-tokens series, loss-scale
under fp16 only, iteration-time in its group with its "vs" series and no throughput.
A step written twice (in two files) is an error. FILES, when given, is how many files there must
be. --killed: the run was killed with kill -9, so the comparison stops at the last step both
the events (against the iteration and against the samples) and metrics.jsonl hold whole (a torn
last line of metrics.jsonl is skipped); every record must still verify. Prints one line per file
and a summary; exits 1 naming the first difference.
"""
import json
import math
import os
import re
import socket
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:
    print("SKIP: no google.protobuf in this python (Debian: apt-get install python3-protobuf)")
    sys.exit(77)

# CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, bit by bit into a byte table.
_TABLE = []
for _b in range(256):
    _c = _b
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    _TABLE.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for byte in data:
        c = _TABLE[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283, "the CRC-32C check value"


def event_class():
    """tensorflow's Event and Summary, with their published field numbers, built in memory."""
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="tb_check.proto", package="tbcheck", syntax="proto3")
    summary = f.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL,
                    oneof_index=0)
    value.oneof_decl.add(name="value")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tbcheck.Summary.Value")
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL,
                    oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tbcheck.Summary", oneof_index=0)
    event.oneof_decl.add(name="what")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    desc = pool.FindMessageTypeByName("tbcheck.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


Event = event_class()


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def records(path, killed):
    """The data of each record of a TFRecord file, every CRC verified. killed: a last record
    cut short (a write that a kill -9 stopped halfway) ends the file, as TensorBoard reads it."""
    raw = open(path, "rb").read()
    at, n = 0, 0
    while at < len(raw):
        if killed and (len(raw) - at < 12 or
                       len(raw) - at < 16 + struct.unpack("<Q", raw[at:at + 8])[0]):
            print(f"{os.path.basename(path)}: the last record is cut short at byte {at}")
            return
        if len(raw) - at < 12:
            fail(f"{path}: a torn record header at byte {at}")
        head = raw[at:at + 8]
        (length,) = struct.unpack("<Q", head)
        (head_crc,) = struct.unpack("<I", raw[at + 8:at + 12])
        if head_crc != masked(head):
            fail(f"{path}: record {n} at byte {at}: the length's CRC {head_crc:#x} != {masked(head):#x}")
        data = raw[at + 12:at + 12 + length]
        if len(data) != length or len(raw) < at + 16 + length:
            fail(f"{path}: record {n} at byte {at} is torn ({length} bytes announced)")
        (data_crc,) = struct.unpack("<I", raw[at + 12 + length:at + 16 + length])
        if data_crc != masked(data):
            fail(f"{path}: record {n} at byte {at}: the data's CRC {data_crc:#x} != {masked(data):#x}")
        yield data
        at += 16 + length
        n += 1


NAME = re.compile(r"^events\.out\.tfevents\.(\d+)\.(.+)\.(\d+)\.(\d+)$")


def read_file(path, series, where, killed):
    """Adds the file's scalars to series[tag][step]; where[tag, step] remembers the file."""
    m = NAME.match(os.path.basename(path))
    if not m or m.group(2) != socket.gethostname():
        fail(f"{path}: not named events.out.tfevents.<time>.{socket.gethostname()}.<pid>.<n>")
    count, scalars = 0, 0
    for i, data in enumerate(records(path, killed)):
        ev = Event()
        ev.ParseFromString(data)
        what = ev.WhichOneof("what")
        if (i == 0) != (what == "file_version"):
            fail(f"{path}: record {i} holds {what}; the file version comes first and only there")
        if i == 0:
            if ev.file_version != "brain.Event:2":
                fail(f"{path}: file version {ev.file_version!r}, want 'brain.Event:2'")
        elif what != "summary" or not ev.summary.value:
            fail(f"{path}: record {i} is not a summary of scalars")
        if abs(ev.wall_time - int(m.group(1))) > 3600:
            fail(f"{path}: record {i}: wall_time {ev.wall_time} is not near the name's time")
        for v in ev.summary.value:
            if v.WhichOneof("value") != "simple_value":
                fail(f"{path}: record {i}: tag {v.tag!r} is not a simple_value")
            key = (v.tag, ev.step)
            # Megatron's second evaluation at the end of training: the validation tags once more
            # at the last step, after the first (kept at step + 0.5).
            if key in where and "lm loss validation" in v.tag and (v.tag, ev.step + 0.5) not in where:
                key = (v.tag, ev.step + 0.5)
            if key in where:
                fail(f"{path}: tag {v.tag!r} at step {ev.step} also in {where[key]}")
            where[key] = os.path.basename(path)
            series.setdefault(v.tag, {})[key[1]] = v.simple_value
            scalars += 1
        count += 1
    print(f"{os.path.basename(path)}: {count} records, {scalars} scalars, every CRC verified")


def expected(metrics, batch, tb_interval, log_interval, seq=None, world=1):
    """Megatron-LM's tags; with seq (the sequence length), Megatron-DeepSpeed's grouped ones."""
    want = {}
    grouped = seq is not None

    def put(group, tag, step, value, samples=True):
        if grouped:
            tag = f"{group}/{tag}"
        want.setdefault(tag, {})[step] = value
        if samples:
            want.setdefault(tag + " vs samples", {})[step * batch] = value
            if grouped:
                want.setdefault(tag + " vs tokens", {})[step * batch * seq] = value

    for r in metrics:
        s = r["step"]
        if s % tb_interval == 0:
            put("lm-loss-training", "lm loss", s, r["loss"])
            put("learning-rate", "learning-rate", s, r["lr"])
            put("batch-size", "batch-size", s, batch)
            put("grad-norm", "grad-norm", s, r["grad_norm"])
            # Megatron-LM writes the loss scale in every precision (1 without fp16's scaler),
            # Megatron-DeepSpeed under fp16 only.
            if not grouped or "loss_scale" in r:
                put("loss-scale", "loss-scale", s, r.get("loss_scale", 1.0))
            want.setdefault("mem-max-allocated-bytes", {})[s] = r["peak_memory_bytes"]
            if grouped:
                put("world-size", "world-size", s, world)
                want.setdefault("steps-vs-samples/y=steps,x=samples", {})[s * batch] = s
                want.setdefault("steps-vs-samples/y=samples,x=steps", {})[s] = s * batch
                want.setdefault("steps-vs-tokens/y=steps,x=tokens", {})[s * batch * seq] = s
                want.setdefault("steps-vs-tokens/y=tokens,x=steps", {})[s] = s * batch * seq
        if s % log_interval == 0:
            if grouped:
                put("iteration-time", "iteration-time", s, r["ms_per_step"] / 1e3)
            else:
                put("", "iteration-time", s, r["ms_per_step"] / 1e3, samples=False)
                put("", "throughput", s, r["tflops_per_device"], samples=False)
        if "valid_loss" in r:
            put("lm-loss-validation", "lm loss validation", s, r["valid_loss"])
            # Megatron's perplexity: exp(min(20, loss)).
            assert r["valid_ppl"] == math.exp(min(20, r["valid_loss"])), r
            put("lm-loss-validation", "lm loss validation ppl", s, r["valid_ppl"])
        if "valid_loss_end" in r:  # written after the first, at the same step (and samples)
            assert r["valid_ppl_end"] == math.exp(min(20, r["valid_loss_end"])), r
            for tag, value in (("lm loss validation", r["valid_loss_end"]),
                               ("lm loss validation ppl", r["valid_ppl_end"])):
                name = f"lm-loss-validation/{tag}" if grouped else tag
                want.setdefault(name, {})[s + 0.5] = value
                want.setdefault(name + " vs samples", {})[s * batch + 0.5] = value
                if grouped:
                    want.setdefault(name + " vs tokens", {})[s * batch * seq + 0.5] = value
    return want


def same(got, want):
    """float32 equality: the value as float32, to within one unit in the last place."""
    if want is None:  # JSON has no NaN or infinity; metrics.jsonl writes null
        return not math.isfinite(got)
    w = struct.unpack("<f", struct.pack("<f", want))[0]
    return got == w or abs(got - w) <= 2.0 ** -23 * abs(w)


def metrics_rows(path, killed):
    rows = []
    for line in open(path):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if not killed:
                raise
    return rows


def cut_at_kill(series, metrics, batch):
    """Keeps what the events and metrics.jsonl both hold whole: steps up to the last one."""
    by_step = series.get("lm loss", {})
    by_samples = series.get("lm loss vs samples", {})
    last = min(max(by_step, default=0), max(by_samples, default=0) // batch,
               max((r["step"] for r in metrics), default=0))
    if last < 2:
        fail(f"the killed run left {last} whole steps; want at least 2")
    for tag, steps in series.items():
        limit = last * batch if tag.endswith(" vs samples") else last
        series[tag] = {s: v for s, v in steps.items() if s <= limit}
    return [r for r in metrics if r["step"] <= last], last


def main():
    args = sys.argv[1:]
    killed = "--killed" in args
    args = [a for a in args if a != "--killed"]
    seq = world = None
    if "--grouped" in args:  # --grouped SEQ WORLD: Megatron-DeepSpeed's tags
        i = args.index("--grouped")
        seq, world = int(args[i + 1]), int(args[i + 2])
        del args[i:i + 3]
    if len(args) not in (5, 6):
        fail(__doc__.splitlines()[2])
    folder, metrics_path = args[0], args[1]
    batch, tb_interval, log_interval = (int(a) for a in args[2:5])
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder)
                   if f.startswith("events.out.tfevents."))
    if len(args) == 6 and len(files) != int(args[5]):
        fail(f"{folder}: {len(files)} event files, want {args[5]}: {files}")
    if not files:
        fail(f"{folder}: no event file")
    series, where = {}, {}
    for f in files:
        read_file(f, series, where, killed)
    metrics = metrics_rows(metrics_path, killed)
    if killed:
        metrics, last = cut_at_kill(series, metrics, batch)
        print(f"killed: compared up to step {last}")
    want = expected(metrics, batch, tb_interval, log_interval, seq, world)
    if sorted(series) != sorted(want):
        fail(f"tags {sorted(series)}, want {sorted(want)}")
    compared = 0
    for tag, steps in want.items():
        if sorted(series[tag]) != sorted(steps):
            fail(f"{tag!r}: steps {sorted(series[tag])}, want {sorted(steps)}")
        for step, value in steps.items():
            if not same(series[tag][step], value):
                fail(f"{tag!r} at step {step}: {series[tag][step]!r}, metrics.jsonl {value!r}")
            compared += 1
    print(f"ok: {len(want)} tags, {compared} values equal metrics.jsonl "
          f"({len(metrics)} steps, {len(files)} file(s))")


if __name__ == "__main__":
    main()
