#!/usr/bin/env bash
# Two "nodes" on one machine: two Linux network namespaces joined by a veth pair, with
# 10.x addresses that exist only inside them; one launcher per namespace, node 0's address
# as the master. Checks the ranks' environment, the rendezvous across the link, fail-fast
# across nodes (a failing rank, kill -9 of a rank, a dead launcher) and a node that never
# arrives.
source "$(dirname "$0")/common.sh" "$@"
cd "$SCRATCH"

[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null || skip "the ip command is missing (apt-get install iproute2)"
ns0=triadl$$a
ns1=triadl$$b
ip netns add $ns0 2>err.ns || skip "cannot create a network namespace: $(cat err.ns)"
CLEANUP+=("ip netns del $ns0")
ip netns add $ns1 || fail "cannot create a second network namespace"
CLEANUP+=("ip netns del $ns1")
ip link add tl$$a type veth peer name tl$$b 2>err.ns ||
  skip "cannot create a veth pair: $(cat err.ns)"
ip link set tl$$a netns $ns0
ip link set tl$$b netns $ns1
A0=10.231.0.1
A1=10.231.0.2
ip -n $ns0 addr add $A0/24 dev tl$$a
ip -n $ns1 addr add $A1/24 dev tl$$b
for ns in $ns0 $ns1; do
  ip -n $ns link set lo up
  ip -n $ns link set tl$$a up 2>/dev/null
  ip -n $ns link set tl$$b up 2>/dev/null
done
# Reachable: a closed port on node 0 answers "refused" (no ping on minimal systems).
reachable=0
for _ in $(seq 50); do
  answer=$(ip netns exec $ns1 timeout 2 bash -c "exec 3<>/dev/tcp/$A0/1" 2>&1)
  if [[ $answer == *refused* ]]; then
    reachable=1
    break
  fi
  sleep 0.1
done
((reachable)) || fail "node 1's namespace cannot reach $A0"
export TRIAD_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
PORT=29500  # each namespace has its own ports

# launch NODE_RANK OUT ARGS...: one node's launcher in its namespace, in the background.
launch() {
  local node=$1 out=$2
  shift 2
  local ns=$ns0
  [[ $node -eq 1 ]] && ns=$ns1
  start_bg ip netns exec $ns "$LAUNCH" --nnodes 2 --node-rank "$node" --nproc-per-node 2 \
    --master-addr $A0 --master-port $PORT "$@" >"$out" 2>"$out.err"
}

# 1. Four ranks over two nodes meet through node 0's rendezvous.
launch 1 n1.out --exec "$PROBE" --rendezvous
p1=$BG
sleep 0.3 # node 1 first: it must wait for node 0
launch 0 n0.out --exec "$PROBE" --rendezvous
p0=$BG
wait $p0 || fail "node 0 exited $? ($(cat n0.out.err))"
wait $p1 || fail "node 1 exited $? ($(cat n1.out.err))"
cat n0.out n1.out >all.out
check_layout all.out 4 2
expect n0.out "^\[rank 0\] probe rank=0 .* master=$A0:$PORT token_len=${#TRIAD_JOB_TOKEN} "
expect n1.out "^\[rank 3\] probe rank=3 .* master=$A0:$PORT "
expect_not n0.out "probe rank=[23] "
expect_not n1.out "probe rank=[01] "
pass "4 ranks on 2 namespaces met through $A0:$PORT"

# 2. Rank 3 (node 1) exits 3: node 0's ranks are stopped too; both launchers exit 3.
launch 0 f0.out --exec "$PROBE" --sleep-forever
p0=$BG
launch 1 f1.out --exec "$PROBE" --fail-rank 3 --code 3 --sleep-forever
p1=$BG
wait $p1
rc1=$?
start=$(now_ms)
wait $p0
rc0=$?
took=$(($(now_ms) - start))
[[ $rc0 -eq 3 && $rc1 -eq 3 ]] || fail "exit codes $rc0/$rc1 after rank 3 exited 3 (want 3/3)"
((took < 10000)) || fail "node 0 took $took ms to stop after node 1's failure"
expect f1.out.err "^triad-launch\[node 1\]: rank 3 \(pid [0-9]+ on node 1, host [^)]*\) exited with code 3; stopping every rank of the job"
expect f0.out.err "^triad-launch\[node 0\]: rank 3 \(pid [0-9]+ on node 1, host [^)]*\) exited with code 3; stopping the ranks of node 0"
pass "a failing rank on node 1 stops node 0 ($took ms after node 1), both exit 3"

# 3. kill -9 of rank 1 (node 0): node 1's ranks stop within 10 s, the signal is reported.
launch 0 k0.out --exec "$PROBE" --kill-rank 1 --sleep-forever
p0=$BG
launch 1 k1.out --exec "$PROBE" --sleep-forever
p1=$BG
wait $p0
rc0=$?
start=$(now_ms)
wait $p1
rc1=$?
took=$(($(now_ms) - start))
[[ $rc0 -eq 137 && $rc1 -eq 137 ]] || fail "exit codes $rc0/$rc1 after kill -9 of rank 1 (want 137/137)"
((took < 10000)) || fail "node 1 took $took ms to stop"
expect k1.out.err "rank 1 \(pid [0-9]+ on node 0, host [^)]*\) was killed by signal 9 \(SIGKILL\); stopping the ranks of node 1"
pass "kill -9 of rank 1 on node 0 stops node 1, both exit 137"

# 4. kill -9 of node 1's launcher: its ranks die with it, node 0 notices the silence.
launch 0 h0.out --exec "$PROBE" --sleep-forever --rendezvous
p0=$BG
launch 1 h1.out --exec "$PROBE" --sleep-forever --rendezvous
p1=$BG
for _ in $(seq 100); do
  [[ $(cat h0.out h1.out | grep -c " met 4 ranks") -eq 4 ]] && break
  sleep 0.1
done
rank_pids=$(sed -n 's/^\[rank [23]\] probe rank=.* pid=\([0-9]*\)$/\1/p' h1.out)
start=$(now_ms)
kill -9 $p1 # ip netns exec has become the launcher
{ wait $p1; } 2>/dev/null
wait $p0
rc0=$?
took=$(($(now_ms) - start))
((took < 10000)) || fail "node 0 took $took ms to notice node 1's launcher was gone"
[[ $rc0 -ne 0 ]] || fail "node 0 exited 0 after node 1's launcher died"
expect h0.out.err "the launcher of node 1 \(host .*\) stopped answering"
sleep 0.2
for p in $rank_pids; do
  kill -0 "$p" 2>/dev/null && fail "rank pid $p outlived its launcher"
done
pass "a dead launcher on node 1 stops node 0 in $took ms; its ranks died with it"

# 5. Node 1 never arrives: node 0 gives up and names it.
timeout 30 ip netns exec $ns0 "$LAUNCH" --nnodes 2 --node-rank 0 --master-addr $A0 \
  --master-port $PORT --rdzv-timeout 2 --exec "$PROBE" >m0.out 2>m0.err
rc=$?
[[ $rc -eq 2 ]] || fail "a missing node made node 0 exit $rc (want 2)"
expect m0.err "node 1 of 2 did not arrive at the rendezvous $A0:$PORT within 2 s"
pass "missing node 1 named after --rdzv-timeout"
echo "PASS"
