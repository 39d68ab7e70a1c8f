"""What the triad-study and triad-autotune tests share: a scratch folder, a tiny model, running a
tool and checking its one-line errors."""
import os
import shutil
import subprocess
import sys
import tempfile

# Two layers of 64, 32 tokens, synthetic data: a step takes milliseconds, so the tests measure
# the tools, not the model.
TINY = """\
model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 32, vocab_size: 256}
data: {kind: synthetic}
training: {train_iters: 50, micro_batch_size: 4, seed: 1}
optimizer: {lr: 1.0e-3}
output: {dir: runs/tiny}
"""

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def finish(name, folder):
    """Exit 1 on any failed check (the scratch folder kept for a look), else 0."""
    if failures:
        print(f"{name}: {len(failures)} checks failed (files kept in {folder}):\n  "
              + "\n  ".join(failures))
        sys.exit(1)
    shutil.rmtree(folder, ignore_errors=True)
    print(f"{name}: all checks passed")
    sys.exit(0)


def scratch(prefix):
    d = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(d, "tiny.yaml"), "w") as f:
        f.write(TINY)
    return d


def run(cmd, cwd):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=env)
    return p.returncode, p.stdout, p.stderr


def check_bad_input(tool, rc, err, must_name, what):
    """Exit 2 and one line on stderr naming the thing."""
    lines = [l for l in err.splitlines() if l.strip()]
    check(rc == 2, f"{what}: exit 2 (got {rc})")
    check(len(lines) == 1 and lines[0].startswith(f"{tool}: error: "),
          f"{what}: one line '{tool}: error: ...' (got {err.strip()!r})")
    for s in must_name:
        check(s in err, f"{what}: the line names {s!r}")
