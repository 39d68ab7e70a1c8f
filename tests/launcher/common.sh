# Shared by the launcher test scripts: arguments, verdicts, ports, a scratch folder.
# Usage in a script: source "$(dirname "$0")/common.sh" "$@"
set -uo pipefail
LAUNCH=$1
PROBE=$2
CONFIGS=${3:-}
export OMP_NUM_THREADS=1  # keep the launcher's note out of the expected output
SCRATCH=$(mktemp -d /tmp/triad-launcher-test.XXXXXX)
CLEANUP=()
cleanup() {
  for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}
# skip WHY: this machine lacks what the script needs (exit 77, ctest's "skipped"), except under
# TRIAD_CI=1 (CI, where everything is installed and we run as root): there it is a failure.
skip() {
  if [[ ${TRIAD_CI:-} == 1 ]]; then
    echo "FAIL: $* (TRIAD_CI=1: a missing dependency is an error, not a skip)"
    exit 1
  fi
  echo "SKIP: $*"
  exit 77
}
pass() { echo "ok: $*"; }

# A TCP port nobody listens on now, below the kernel's ephemeral range (where port-0 servers
# and outgoing connections of concurrent tests take theirs).
free_port() {
  local p low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((low > 12000)) || low=32768
  for _ in $(seq 100); do
    p=$((10000 + RANDOM % (low - 10000)))
    if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
      echo "$p"
      return
    fi
  done
  echo 29500
}

# expect FILE REGEX [what]
expect() {
  grep -Eq -- "$2" "$1" || {
    echo "--- $1:"
    cat "$1"
    fail "${3:-expected /$2/ in $1}"
  }
}
# expect_not FILE REGEX [what]
expect_not() {
  if grep -Eq -- "$2" "$1"; then
    echo "--- $1:"
    cat "$1"
    fail "${3:-did not expect /$2/ in $1}"
  fi
}
# expect_count FILE REGEX N
expect_count() {
  local n
  n=$(grep -Ec -- "$2" "$1")
  [[ $n -eq $3 ]] || {
    echo "--- $1:"
    cat "$1"
    fail "expected $3 lines matching /$2/ in $1, found $n"
  }
}
now_ms() { date +%s%3N; }

# start_bg CMD...: runs CMD in the background (BG is its pid, signals reach it directly,
# unlike through timeout(1), which signals its whole group) with a 90 s watchdog.
start_bg() {
  "$@" &
  BG=$!
  (
    sleep 90
    kill -9 $BG
  ) >/dev/null 2>&1 &
  CLEANUP+=("kill -9 $BG" "kill $!")
}

# Every rank's probe line carries the launcher's prefix with the same rank, and the
# layout expected: check_layout FILE WORLD LOCAL_WORLD
check_layout() {
  local f=$1 world=$2 local_world=$3 r
  expect_count "$f" "probe rank=[0-9]+ local_rank" "$world"
  for ((r = 0; r < world; r++)); do
    expect "$f" "^\[rank $r\] probe rank=$r local_rank=$((r % local_world)) world=$world local_world=$local_world master=[^ ]+:[0-9]+ token_len=(32|[1-9][0-9]+) " \
      "rank $r's environment in $f"
    expect "$f" "^\[rank $r\] probe rank=$r met $world ranks" "rank $r met the others through the rendezvous"
  done
  expect_not "$f" "^[^[]" "a line without the [rank N] prefix in $f"
}
