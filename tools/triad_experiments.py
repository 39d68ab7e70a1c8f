"""What triad-study and triad-autotune share: finding Triad's programs, running one experiment
through triad-launch in a folder of its own, reading back its metrics, the statistics over
repeats, the environment a result was measured in, and one-line errors for bad input.

An experiment is one launch of a config with a list of `--set` overrides on a number of ranks.
Its folder holds the run's own output (config.yaml, metrics.jsonl), the launcher's output
(run.log) and result.json, written last: a folder with result.json is finished, which is what
makes both tools resumable.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import secrets
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import time

EXIT_BAD_INPUT = 2  # the launcher's code for refused input; the tools use it too

# Per-step metrics of metrics.jsonl the tools report: key, short label, higher is better.
METRICS = [
    ("samples_per_s", "samples/s", True),
    ("tokens_per_s", "tokens/s", True),
    ("tflops_per_device", "TFLOP/s per device", True),
    ("ms_per_step", "ms/step", False),
    ("peak_memory_bytes", "peak memory (bytes)", False),
]
HIGHER_IS_BETTER = {key: higher for key, _, higher in METRICS}
LABELS = {key: label for key, label, _ in METRICS}

LAUNCHER_MODES = ("local", "slurm", "mpi")


EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it

# The record each tool leaves in its output folder: which tool and which study or search wrote
# it, so that a rerun resumes its own work and never mixes in another's.
OUTPUT_RECORD = "triad-output.json"


class BadInput(Exception):
    """Input the user must fix: printed as one line, exit 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, failing the tools' way: one line 'TOOL: error: ...' and exit 2 (argparse's own
    prints the usage first). A flag given an empty value (--output "") is refused: it would
    silently mean the flag's default."""

    def error(self, message):
        fail(self.prog, f"{message} (see {self.prog} --help)")

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        for i, arg in enumerate(args):
            if arg == "--":
                break
            flag, eq, value = arg.partition("=")
            action = self._option_string_actions.get(flag)
            if action is None or action.nargs == 0:
                continue
            if (value == "") if eq else (i + 1 < len(args) and args[i + 1] == ""):
                self.error(f"argument {flag}: an empty value; give one, or leave {flag} out "
                           f"for its default")
        return super().parse_known_args(args, namespace)


def finite_number(text):
    """argparse's type for a number of seconds, a share, ...: float() takes 'inf' and 'nan',
    which no such flag means."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"'{text}' is not a finite number")
    return value


def parse_json(text):
    """json.loads, with nesting too deep for Python's parser (a RecursionError: a damaged file
    of thousands of `[`) a ValueError like any other damage."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def summary(doc):
    """The first sentence of a docstring's paragraph, for argparse's description (a whole
    docstring holds usage lines and detail that --help would run together)."""
    text = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s", text, maxsplit=1)[0]


def run_main(tool, main):
    """Runs a tool's main(): bad input is one line and exit 2; Ctrl-C one line and exit 130; a
    file the system refuses to read or write one line naming it and exit 2; input nested past
    Python's recursion limit one line too. Never a traceback for any of those."""
    try:
        return main()
    except BadInput as e:
        fail(tool, str(e))
    except RecursionError:
        fail(tool, "the input is nested too deeply to read (lists or mappings inside each other "
                   "past Python's recursion limit); flatten it")
    except KeyboardInterrupt:
        print(f"{tool}: error: interrupted (Ctrl-C); finished experiments are kept: rerun the "
              f"same command to resume", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except OSError as e:
        where = f" '{e.filename}'" if e.filename else ""
        fail(tool, f"cannot read or write{where}: {e.strerror or e}; check the path, its "
                   f"permissions and the free space")


# ---------------------------------------------------------------------------------------------
# Files read and folders written

def file_kind(mode):
    """What a path of this st_mode is, for messages."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def check_input_file(path, what, fix):
    """`path` exists and is a regular file (looked at, never opened: a FIFO cannot block)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise BadInput(f"{what} '{path}' cannot be opened: {e.strerror}; {fix}")
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{what} '{path}' is {file_kind(st.st_mode)}, not a regular file; {fix}")


def read_text(path, what, fix):
    """The whole of a small UTF-8 file, opened without blocking; anything but a regular file is
    refused by name before a read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise BadInput(f"{what} '{path}' cannot be opened: {e.strerror}; {fix}")
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BadInput(f"{what} '{path}' is {file_kind(mode)}, not a regular file; {fix}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError as e:
        raise BadInput(f"{what} '{path}' cannot be read: {e.strerror}; {fix}")
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{what} '{path}' is not UTF-8 text (byte {e.start}); {fix}")


MAX_YAML_DEPTH = 100  # lists and mappings inside each other; Triad's files need a few


def _yaml_loader():
    """PyYAML's safe loader, refusing a mapping key given twice (PyYAML keeps the last one
    silently: a study's second `grid:` replaced its first)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        twice = key in seen
                        seen.add(key)
                    except TypeError:  # an unhashable key: the constructor below says so
                        twice = False
                    if twice:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key '{key}' is given twice; give it once",
                            key_node.start_mark)
            return super().construct_mapping(node, deep)

    return Loader


def _check_shape(value, path):
    """Refuses a YAML value that holds itself (an alias inside its own anchor: `a: &x {b: *x}`)
    or is nested past MAX_YAML_DEPTH: every later walk over it would recurse without end."""
    stack = [(value, 1, ())]
    while stack:
        v, depth, inside = stack.pop()
        if not isinstance(v, (dict, list)):
            continue
        if id(v) in inside:
            raise BadInput(f"{path}: an alias refers to a mapping or list it is inside (an "
                           f"anchor that holds itself); write the value out")
        if depth > MAX_YAML_DEPTH:
            raise BadInput(f"{path}: lists or mappings nested more than {MAX_YAML_DEPTH} deep; "
                           f"flatten it")
        items = v.values() if isinstance(v, dict) else v
        stack.extend((x, depth + 1, inside + (id(v),)) for x in items)


def load_yaml(path, what, fix):
    """A YAML file's contents; a syntax error (a key given twice too) is one line naming the
    file, line and column."""
    import yaml
    text = read_text(path, what, fix)
    try:
        value = yaml.load(text, Loader=_yaml_loader())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise BadInput(f"{path}{where}: not valid YAML ({problem}); fix the syntax")
    except RecursionError:
        raise BadInput(f"{path}: lists or mappings nested too deeply to read (past Python's "
                       f"recursion limit); flatten it")
    _check_shape(value, path)
    return value


def check_output_folder(flag, folder):
    """A folder the tool creates (if missing) and writes into: it, or its nearest existing
    ancestor, is a directory in which a folder can be made (probed, and removed at once)."""
    import tempfile
    want = os.path.abspath(folder)
    at = want
    while not os.path.lexists(at) and os.path.dirname(at) != at:
        at = os.path.dirname(at)
    fix = f"give {flag} a folder you can write"
    said = f"{flag} '{folder}' is" if at == want else \
        f"{flag} '{folder}' cannot be created: '{at}' is"
    if not os.path.isdir(at):
        try:
            kind = "a regular file" if os.path.isfile(at) else file_kind(os.stat(at).st_mode)
        except OSError:
            kind = "a symbolic link to nothing"
        raise BadInput(f"{said} {kind}, not a folder; {fix}")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".triad-write-check-", dir=at))
    except OSError as e:
        raise BadInput(f"{flag} '{folder}' cannot be created: cannot write in '{at}' "
                       f"({e.strerror}); {fix}")


def check_output_file(flag, path, overwrite, suffix=None,
                      replace="add --overwrite to replace it"):
    """A file the tool writes at its end (--png, --out), checked before any work: a name, with
    `suffix` where the format is fixed (".png"), in an existing folder this process can write,
    and not an earlier file unless `overwrite` (`replace` says how to ask for that). Every
    tool's written files are checked here."""
    fix = f"give {flag} a file name in a folder you can write"
    if os.path.isdir(path) or path.endswith(os.sep):
        raise BadInput(f"{flag} '{path}' is a folder; give a file name, e.g. "
                       f"{os.path.join(path, 'out' + (suffix or ''))}")
    if suffix and not path.lower().endswith(suffix):
        raise BadInput(f"{flag} '{path}' does not end in {suffix}: the file is written as "
                       f"{suffix[1:].upper()}; give a name like "
                       f"{os.path.splitext(path)[0] + suffix}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.lexists(folder):
        raise BadInput(f"{flag} '{path}': the folder '{folder}' does not exist; create it or "
                       f"give a path in a folder that exists")
    if not os.path.isdir(folder):
        raise BadInput(f"{flag} '{path}': '{folder}' is not a folder; {fix}")
    if os.path.lexists(path):
        if not os.path.isfile(path):
            kind = ("a symbolic link to nothing" if os.path.islink(path)
                    else file_kind(os.stat(path).st_mode))
            raise BadInput(f"{flag} '{path}' is {kind}, not a regular file; {fix}")
        if not overwrite:
            raise BadInput(f"{flag} '{path}' already exists; {replace}, or choose another "
                           f"file")
    # The file is written as a temporary beside it, then moved: the folder must take new files
    # (probed, and removed at once: access() misjudges read-only mounts and ACLs).
    import tempfile
    try:
        fd, probe = tempfile.mkstemp(prefix=".triad-write-check-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise BadInput(f"{flag} '{path}': the folder '{folder}' is not writable "
                       f"({e.strerror}); {fix}")


def plot_arguments(argv, usage):
    """(JSON, PNG) of a drawing script the C++ tools run (plot_schedule.py, plot_simulate.py):
    `SCRIPT JSON PNG [--overwrite | --keep]`, PNG checked as check_output_file does. A tool
    that has an --overwrite flag passes --overwrite or --keep; one that passes neither has no
    such flag, so an existing PNG is kept and the line says to remove it instead."""
    args = argv[1:]
    flags = [a for a in args if a in ("--overwrite", "--keep")]
    rest = [a for a in args if a not in flags]
    if len(rest) != 2 or len(flags) > 1:
        raise BadInput(f"usage: {usage}")
    replace = "add --overwrite to replace it" if flags else "remove it first"
    check_output_file("--png", rest[1], flags == ["--overwrite"], ".png", replace)
    return rest[0], rest[1]


def save_png(fig, path, dpi):
    """A matplotlib figure written as PNG through atomic_file: whole or not at all, and a
    failure names `path`, not the temporary."""
    with atomic_file(path, "wb") as f:
        fig.savefig(f, dpi=dpi, format="png")


def claim_output(tool, flag, folder, identity, overwrite, products):
    """Makes `folder` this tool's output for `identity` (what was asked: config, grid, ...)
    before anything else is written there. The same identity resumes (finished experiments are
    kept); another tool's or another study's output is refused unless --overwrite, which removes
    the earlier `products` (the names this tool writes) first; a folder holding anything else
    is never touched. Call after every other check: a refusal writes nothing."""
    check_output_folder(flag, folder)
    record_path = os.path.join(folder, OUTPUT_RECORD)
    record = {"tool": tool, "identity": identity}
    entries = os.listdir(folder) if os.path.isdir(folder) else []
    if entries:
        try:
            held = parse_json(read_text(record_path, "output record", "remove it"))
        except (BadInput, ValueError):
            held = None
        if not isinstance(held, dict):
            raise BadInput(f"{flag} '{folder}' holds files that are not a {tool} output (no "
                           f"{OUTPUT_RECORD}); choose another {flag} (or empty that folder)")
        if json.loads(json.dumps(record, default=str)) != held:
            if held.get("tool") != tool:
                what = f"the output of {held.get('tool') or 'another tool'}"
            else:
                what = "the output of another " + ("study" if tool == "triad-study"
                                                    else "search")
            if not overwrite:
                raise BadInput(f"{flag} '{folder}' holds {what} (a different config, grid or "
                               f"settings); add --overwrite to replace it, or choose another "
                               f"{flag}")
            strays = [e for e in entries if e not in products and e != OUTPUT_RECORD]
            if strays:
                raise BadInput(f"{flag} '{folder}' holds {what} and other files ('{strays[0]}'); "
                               f"--overwrite replaces only {tool} output: choose another {flag}")
            for e in entries:
                p = os.path.join(folder, e)
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
    os.makedirs(folder, exist_ok=True)
    write_json(record_path, record)


# ---------------------------------------------------------------------------------------------
# Finding programs

def _search_dirs():
    """Where Triad's programs may be: beside the running script (build/bin, or <prefix>/bin),
    beside this module, the bin folder next to a share/triad install, then the source tree's
    build/bin when run from tools/ directly."""
    here = os.path.dirname(os.path.realpath(__file__))
    script = os.path.dirname(os.path.realpath(sys.argv[0])) if sys.argv and sys.argv[0] else here
    dirs = [script, here, os.path.normpath(os.path.join(here, "..", "..", "bin"))]
    if os.path.basename(here) == "tools":
        dirs.append(os.path.join(os.path.dirname(here), "build", "bin"))
    return dirs


def find_program(name):
    """The path of a Triad program (triad-launch, triad-estimate): TRIAD_BIN_DIR if set, then
    beside these tools, then PATH."""
    dirs = []
    if os.environ.get("TRIAD_BIN_DIR"):
        dirs.append(os.environ["TRIAD_BIN_DIR"])
    dirs += _search_dirs()
    for d in dirs:
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    p = shutil.which(name)
    if p:
        return p
    raise BadInput(f"cannot find {name} beside {dirs[0] if dirs else 'this tool'} or on PATH; "
                   f"build Triad (tools/bootstrap) or set TRIAD_BIN_DIR to the folder holding it")


def build_info():
    """What CMake wrote beside the installed tools (source folder, version), or {}."""
    for d in _search_dirs():
        p = os.path.join(d, "triad-tools.json")
        if os.path.isfile(p):
            try:
                return json.load(open(p))
            except (OSError, ValueError):
                pass
    return {}


# ---------------------------------------------------------------------------------------------
# Values and overrides

def format_value(v):
    """A YAML value as --set writes it: true/false, numbers as Python prints them, strings."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    return str(v)


def value_sets(key, value):
    """--set lines for one key: a mapping value ({name: flash2, block_q: 32}) becomes one line
    per leaf (attention.name=flash2 ...)."""
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            out += value_sets(f"{key}.{k}", v)
        return out
    if isinstance(value, list):
        raise BadInput(f"'{key}' value {value!r} is a list; a grid value must be a scalar or a "
                       f"mapping (give the list of values once: {key}: [a, b])")
    return [f"{key}={format_value(value)}"]


def short_value(v):
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{short_value(x)}" for k, x in v.items()) + "}"
    return format_value(v)


def slug(text):
    """A folder name from an experiment's label: letters, digits and ._=- kept."""
    keep = "".join(c if c.isalnum() or c in "._=-" else "_" for c in text)
    return keep[:200] or "base"


def flatten(tree, prefix=""):
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


# ---------------------------------------------------------------------------------------------
# Launching

def launch_command(launch, config, sets, world=1, mode="local", quiet=True, dry_run=False):
    """The command line that runs `config` with `sets` on `world` ranks in a launcher mode:
    local (triad-launch starts the ranks), slurm (one srun task that starts them), mpi (one
    mpirun task per rank)."""
    tail = [config] + (["-q"] if quiet else []) + (["--dry-run"] if dry_run else [])
    for s in sets:
        tail += ["--set", s]
    if mode == "local" or dry_run:
        return [launch, "--nproc-per-node", str(world)] + tail
    if mode == "slurm":
        return ["srun", "-N1", "-n1", launch, "--nproc-per-node", str(world)] + tail
    if mode == "mpi":
        return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "TRIAD_JOB_TOKEN",
                "-n", str(world), launch] + tail
    raise BadInput(f"launcher mode '{mode}' is not one of {', '.join(LAUNCHER_MODES)}")


def error_line(text):
    """The line a failed launch explains itself with: its last 'error' line, else its last."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in reversed(lines):
        if "error" in l.lower():
            return l
    return lines[-1] if lines else ""


def dry_run(launch, config, sets, world):
    """(ok, resolved config as a nested dict or None, the refusal line)."""
    cmd = launch_command(launch, config, sets, world, dry_run=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        return False, None, error_line(p.stderr) or f"triad-launch --dry-run exited {p.returncode}"
    return True, parse_dry_run(p.stdout), ""


def parse_dry_run(text):
    """The resolved config a dry run prints first, up to its 'layout:' line."""
    import yaml
    head = text.split("\nlayout:", 1)[0]
    try:
        return yaml.safe_load(head) or {}
    except yaml.YAMLError:
        return {}


def estimate(estimator, config, sets, world, memory=None):
    """triad-estimate's verdict for a config: (peak bytes per rank for ZeRO stages 0-3, the
    limit in bytes, None) or (None, None, the refusal line) when the layout is invalid."""
    cmd = [estimator, config, "--world", str(world), "--json"]
    for s in sets:
        cmd += ["--set", s]
    if memory:
        cmd += ["--memory-per-device", str(memory)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 1):  # 0 fits, 1 does not fit, 2 bad input
        return None, None, error_line(p.stderr) or f"triad-estimate exited {p.returncode}"
    j = json.loads(p.stdout)
    peaks = [z["peak_per_rank"] for z in sorted(j["zero_stages"], key=lambda z: z["stage"])]
    return peaks, j["limit_bytes"], None


def classify(rc, log_text, timed_out):
    """ok | refused (bad input for this combination) | oom (does not fit, or killed for memory)
    | timeout | failed."""
    low = log_text.lower()
    if timed_out:
        return "timeout"
    if rc == 0:
        return "ok"
    if ("needs an estimated" in low or "out of memory" in low or "bad_alloc" in low
            or "cannot allocate" in low or rc in (137, -signal.SIGKILL)):
        return "oom"
    if rc == EXIT_BAD_INPUT:
        return "refused"
    return "failed"


def read_metrics(out_dir):
    path = os.path.join(out_dir, "metrics.jsonl")
    recs = []
    if os.path.isfile(path):
        for line in open(path):
            line = line.strip()
            if line:
                try:
                    recs.append(parse_json(line))
                except ValueError:
                    pass  # a line cut short by a crash
    return recs


def summarize(records, warmup):
    """One run's values: the mean of each per-step metric over the measured steps (those after
    `warmup`), and the peak memory over every step; under "per_step" each per-step metric's
    measured values, for medians over a study's repeats. None when no measured step exists."""
    measured = [r for r in records if r.get("step", 0) > warmup]
    if not measured:
        return None
    out, per_step = {}, {}
    for key, _, _ in METRICS:
        vals = [float(r[key]) for r in (records if key == "peak_memory_bytes" else measured)
                if r.get(key) is not None]
        if not vals:
            out[key] = None
        elif key == "peak_memory_bytes":
            out[key] = max(vals)
        else:
            out[key] = sum(vals) / len(vals)
            per_step[key] = vals
    out["measured_steps"] = len(measured)
    out["per_step"] = per_step
    return out


def pooled_median(runs, key):
    """The median of a per-step metric over every measured step of `runs` (summarize's values);
    a run recorded without its steps counts with its mean. None when no run has the metric."""
    vals = []
    for v in runs:
        steps = (v.get("per_step") or {}).get(key)
        if steps:
            vals += steps
        elif v.get(key) is not None:
            vals.append(v[key])
    return statistics.median(vals) if vals else None


def mean_sem(values):
    """Mean and σ of the mean (sample standard deviation / sqrt(n)); σ is 0 for one value."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    n = len(vals)
    m = sum(vals) / n
    if n == 1:
        return m, 0.0
    var = sum((v - m) ** 2 for v in vals) / (n - 1)
    return m, math.sqrt(var / n)


def run_experiment(launch, folder, config, sets, world, warmup, steps, mode="local",
                   timeout=None, env=None, spec=None):
    """Runs one experiment in `folder` (created afresh) for warmup + steps steps and writes
    folder/result.json: status, exit code, seconds, load average, the values (summarize) and
    the refusal or failure line. Returns that record."""
    if os.path.exists(folder):
        shutil.rmtree(folder)  # an unfinished earlier attempt: ours to replace
    os.makedirs(folder)
    out_dir = os.path.join(folder, "run")
    all_sets = list(sets) + [f"training.train_iters={warmup + steps}", f"output.dir={out_dir}"]
    cmd = launch_command(launch, config, all_sets, world, mode)
    run_env = dict(os.environ if env is None else env)
    if mode == "mpi" and "TRIAD_JOB_TOKEN" not in run_env:
        run_env["TRIAD_JOB_TOKEN"] = secrets.token_hex(16)
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    timed_out = False
    with open(os.path.join(folder, "run.log"), "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        # A session of its own, so a timeout stops the ranks too, not only the launcher.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=run_env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except KeyboardInterrupt:
            # The ranks are in a session of their own, out of the terminal's reach: stop them.
            # No result.json: the next run replaces this unfinished folder.
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                rc = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
    seconds = time.monotonic() - t0
    text = open(os.path.join(folder, "run.log")).read()
    status = classify(rc, text, timed_out)
    values = summarize(read_metrics(out_dir), warmup) if status == "ok" else None
    if status == "ok" and values is None:
        status = "failed"  # exited 0 but measured nothing
    message = "" if status == "ok" else (
        f"ran past {timeout:g} s" if timed_out else error_line(text.split("\n", 1)[-1]))
    result = {"status": status, "rc": rc, "seconds": round(seconds, 3),
              "loadavg_before": load_before, "loadavg_after": os.getloadavg()[0],
              "values": values, "message": message, "command": cmd, "world": world,
              "warmup_steps": warmup, "steps": steps, "spec": spec}
    write_json(os.path.join(folder, "result.json"), result)
    return result


def finished(folder, spec):
    """The result.json of an experiment already run with the same spec, else None."""
    path = os.path.join(folder, "result.json")
    try:
        result = parse_json(open(path).read())
    except (OSError, ValueError):
        return None
    # A damaged one (not an object) is an unfinished experiment: run again.
    return result if isinstance(result, dict) and result.get("spec") == spec else None


class atomic_file:
    """`with atomic_file(path) as f:` writes f into a temporary file beside `path` and moves it
    over `path` only when the block ends without an error: never a half-written result."""

    def __init__(self, path, mode="w", **kw):
        self.path, self.tmp = path, f"{path}.tmp-{os.getpid()}"
        try:
            self.f = open(self.tmp, mode, **kw)
        except OSError as e:  # said of the file the user named, not of our temporary
            raise OSError(e.errno, e.strerror, path) from None

    def __enter__(self):
        return self.f

    def __exit__(self, kind, value, tb):
        try:
            self.f.close()
            if kind is None:
                os.replace(self.tmp, self.path)
                return False
        except OSError as e:  # a full disk at close, a folder gone: nothing half-written kept
            value = e
        self._discard()
        # Said of the file the user named, not of the temporary (nor of no file at all).
        if isinstance(value, OSError) and value.filename in (None, self.tmp):
            raise OSError(value.errno, value.strerror, self.path) from None
        if kind is None:
            raise value
        return False

    def _discard(self):
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def write_json(path, obj):
    with atomic_file(path) as f:
        json.dump(obj, f, indent=2, default=str)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# The environment

def _first(cmd, cwd=None):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           cwd=cwd, timeout=20)
        return p.stdout.strip() if p.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def environment(launch):
    """The machine, thread settings, Triad commit and library versions a result came from."""
    info = build_info()
    source = info.get("source_dir") or os.path.dirname(os.path.dirname(os.path.realpath(launch)))
    env = {"time": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "host": platform.node(), "platform": platform.platform(),
           "cpu": "", "cpus": os.cpu_count(),
           "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
           "memory_total_bytes": None, "loadavg": list(os.getloadavg()),
           "threads": {k: os.environ.get(k) for k in
                       ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "UCX_TLS")},
           "triad": {"launch": launch, "version": info.get("version", ""), "source": source,
                     "commit": "", "dirty": None, "build_type": info.get("build_type", "")},
           "python": platform.python_version(), "libraries": {}}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                env["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                env["memory_total_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    # Read-only git queries (no index refresh: other work may share the checkout).
    commit = _first(["git", "-C", source, "rev-parse", "HEAD"])
    if commit:
        env["triad"]["commit"] = commit
        env["triad"]["dirty"] = bool(_first(["git", "--no-optional-locks", "-C", source,
                                              "status", "--porcelain", "-uno"]))
    libs = env["libraries"]
    for mod in ("yaml", "numpy", "matplotlib"):
        try:
            libs[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - absent or broken: not recorded
            pass
    # The Debian packages the runtime links (OpenBLAS, UCX, yaml-cpp, spdlog, Boost, OpenMP).
    dpkg = _first(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\n",
                   "libopenblas0*", "libucx0*", "libyaml-cpp0*", "libspdlog1*",
                   "libboost-filesystem1*", "libgomp1", "openmpi-bin"])
    for line in dpkg.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2].startswith("ii"):
            libs[parts[0]] = parts[1]
    return env


# ---------------------------------------------------------------------------------------------
# Progress

class Progress:
    """One line per experiment: [i/n] name: outcome (seconds) | ETA h:mm:ss, the ETA from the
    mean time of the experiments run so far in this invocation; [i] and no ETA when the total
    is not known (a search that stops early)."""

    def __init__(self, total, tool):
        self.total, self.done, self.tool = total, 0, tool
        self.times = []

    def line(self, name, outcome, seconds=None, ran=True):
        self.done += 1
        if ran and seconds is not None:
            self.times.append(seconds)
        if self.total is None:
            took = f" ({seconds:.1f} s)" if seconds is not None and ran else ""
            print(f"[{self.done}] {name}: {outcome}{took}", flush=True)
            return
        left = self.total - self.done
        eta = ""
        if self.times and left > 0:
            eta = " | ETA " + str(datetime.timedelta(seconds=round(
                left * sum(self.times) / len(self.times))))
        took = f" ({seconds:.1f} s)" if seconds is not None and ran else ""
        width = len(str(self.total))
        print(f"[{self.done:>{width}}/{self.total}] {name}: {outcome}{took}{eta}", flush=True)


def fail(tool, message):
    """Bad input: one line on stderr, exit 2."""
    print(f"{tool}: error: {message}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)
