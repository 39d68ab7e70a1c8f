"""What the equivalence scripts (layout_equivalence.sh, context_equivalence.sh) check of the
tensor files their runs wrote (step 1's gathered gradients, HF exports) against one process's."""
import numpy as np


def relative_to_largest(x, r):
    """The largest difference relative to the reference tensor's largest element."""
    return float(np.abs(x - r).max()) / (float(np.abs(r).max()) or 1.0)


def compare_files(read, work, what, base, path, others, measure, limit, fail):
    """Each of `others`' file WORK/RUN/PATH holds the tensors of `base`'s, each within `limit`
    by `measure(tensor, reference)`; `fail(message)` for each that does not. `read` reads a
    safetensors file into {name: array}. Returns the number of tensors checked."""
    ref_t = read(f"{work}/{base}/{path}")
    checks = 0
    for o in others:
        t = read(f"{work}/{o}/{path}")
        if set(t) != set(ref_t):
            fail(f"{o} {what}: tensors {sorted(set(t) ^ set(ref_t))} differ")
            continue
        worst = 0.0
        for name, r in ref_t.items():
            checks += 1
            if t[name].shape != r.shape:
                fail(f"{o} {what} {name}: shape {t[name].shape} vs {r.shape}")
                continue
            err = measure(t[name].astype(np.float64), r)
            worst = max(worst, err)
            if not err <= limit:
                fail(f"{o} {what} {name}: differs by {err:.2e}")
        print(f"{o:22} {what} of {len(ref_t)} tensors against {base}: worst difference "
              f"{worst:.2e}")
    return checks
