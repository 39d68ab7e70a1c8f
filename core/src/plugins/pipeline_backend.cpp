#include "triad/core/plugins/pipeline_backend.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <tuple>
#include <utility>

#include "triad/core/error.hpp"

namespace triad {

namespace {

const char* const kOpNames[] = {
    "load",           "forward",        "backward",          "send-activation", "recv-activation",
    "send-grad",      "recv-grad",      "reduce-tied-grads", "reduce-grads",    "optimizer-step",
    "backward-input", "backward-weight"};
static_assert(std::size(kOpNames) == TRIAD_PIPE_OP_COUNT_V2);

// The step-wide ops, in the order that ends every step.
constexpr int32_t kEnd[] = {TRIAD_PIPE_REDUCE_TIED_GRADS, TRIAD_PIPE_REDUCE_GRADS,
                            TRIAD_PIPE_OPTIMIZER_STEP};
constexpr const char* kEndText =
    "the step ends with reduce-tied-grads, reduce-grads, optimizer-step, once each and in that "
    "order";

bool step_wide(int32_t op) {
  return op >= TRIAD_PIPE_REDUCE_TIED_GRADS && op <= TRIAD_PIPE_OPTIMIZER_STEP;
}

std::string plural(long long n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "micro-batch 2" ("micro-batch 2 chunk 1" when v > 1)
std::string pass_text(int32_t mb, int32_t chunk, int v) {
  std::string s = "micro-batch " + std::to_string(mb);
  if (v > 1) s += " chunk " + std::to_string(chunk);
  return s;
}

// "forward of micro-batch 2 in buffer 0", "reduce-grads", "op 12"
std::string instr_text(const triad_pipe_instr_v1& i, int v) {
  if (i.op < 0 || i.op >= TRIAD_PIPE_OP_COUNT_V2) return "op " + std::to_string(i.op);
  std::string s = pipe_op_name(i.op);
  if (step_wide(i.op)) return s;
  return s + " of " + pass_text(i.micro_batch, i.chunk, v) + " in buffer " +
         std::to_string(i.buffer);
}

std::string at(size_t k, const triad_pipe_instr_v1& i, int v) {
  return "instruction " + std::to_string(k) + " (" + instr_text(i, v) + ")";
}

bool first_virtual(const triad_pipe_layout_v1& l, int32_t chunk) {
  return l.stage == 0 && chunk == 0;
}
bool last_virtual(const triad_pipe_layout_v1& l, int32_t chunk) {
  return l.stage == l.stages - 1 && chunk == l.virtual_stages - 1;
}

bool compute(int32_t op) {
  return op == TRIAD_PIPE_FORWARD || op == TRIAD_PIPE_BACKWARD || op == TRIAD_PIPE_BACKWARD_INPUT ||
         op == TRIAD_PIPE_BACKWARD_WEIGHT;
}

// The orders one (micro-batch, chunk) pass may run its ops in after its optional LOAD: with a
// whole backward, or split with the SEND_GRAD before or after the weight half (the same order
// twice on the first virtual stage, which sends nothing; kept, as it never matters which of two
// equal orders a pass follows).
std::vector<std::vector<int32_t>> pass_orders(const triad_pipe_layout_v1& l, int32_t chunk) {
  std::vector<int32_t> head;
  if (!first_virtual(l, chunk)) head.push_back(TRIAD_PIPE_RECV_ACTIVATION);
  head.push_back(TRIAD_PIPE_FORWARD);
  if (!last_virtual(l, chunk)) {
    head.push_back(TRIAD_PIPE_SEND_ACTIVATION);
    head.push_back(TRIAD_PIPE_RECV_GRAD);
  }
  const bool sends = !first_virtual(l, chunk);
  std::vector<std::vector<int32_t>> orders;
  for (const std::vector<int32_t>& tail :
       {std::vector<int32_t>{TRIAD_PIPE_BACKWARD, TRIAD_PIPE_SEND_GRAD},
        std::vector<int32_t>{TRIAD_PIPE_BACKWARD_INPUT, TRIAD_PIPE_SEND_GRAD,
                             TRIAD_PIPE_BACKWARD_WEIGHT},
        std::vector<int32_t>{TRIAD_PIPE_BACKWARD_INPUT, TRIAD_PIPE_BACKWARD_WEIGHT,
                             TRIAD_PIPE_SEND_GRAD}}) {
    std::vector<int32_t> ops = head;
    for (int32_t op : tail)
      if (sends || op != TRIAD_PIPE_SEND_GRAD) ops.push_back(op);
    orders.push_back(std::move(ops));
  }
  return orders;
}

bool holds(const std::vector<int32_t>& order, int32_t op) {
  return std::find(order.begin(), order.end(), op) != order.end();
}

// Why `op` has no place in the pass of `chunk` at all.
std::string not_here(int32_t op) {
  switch (op) {
    case TRIAD_PIPE_SEND_ACTIVATION:
      return "the last virtual stage sends an activation that no stage receives";
    case TRIAD_PIPE_RECV_ACTIVATION:
      return "the first virtual stage receives an activation that no stage sends (it loads the "
             "tokens)";
    case TRIAD_PIPE_SEND_GRAD:
      return "the first virtual stage sends a gradient that no stage receives";
    default:
      return "the last virtual stage receives a gradient that no stage sends (its backward "
             "starts from the loss)";
  }
}

// Whether a LOAD on this stage may precede `chunk`'s forward: the first stage loads for chunk 0,
// the last for chunk v-1 (a one-stage pipeline for both); the stages between, which load nothing
// the executor needs, before any chunk.
bool load_allowed(const triad_pipe_layout_v1& l, int32_t chunk) {
  const bool first = l.stage == 0, last = l.stage == l.stages - 1;
  if (!first && !last) return true;
  return (first && chunk == 0) || (last && chunk == l.virtual_stages - 1);
}

struct PassState {
  size_t next = 0;      // ops run, a prefix of each order still open to it
  unsigned open = ~0u;  // bit k: the pass still follows pass_orders()[k]
  int32_t buffer = -1;  // the buffer it holds; -1 before its first instruction
  bool loaded = false;
};

// The ops that come next in the orders `ps` still follows ("backward or backward-input"), the
// orders narrowed to those holding `op` when any does.
std::string next_text(const std::vector<std::vector<int32_t>>& orders, const PassState& ps,
                      int32_t op) {
  bool any = false;
  for (size_t k = 0; k < orders.size(); ++k)
    any = any || ((ps.open >> k & 1u) && holds(orders[k], op));
  std::vector<int32_t> next;
  for (size_t k = 0; k < orders.size(); ++k)
    if ((ps.open >> k & 1u) && (!any || holds(orders[k], op)) && ps.next < orders[k].size() &&
        std::find(next.begin(), next.end(), orders[k][ps.next]) == next.end())
      next.push_back(orders[k][ps.next]);
  std::string s;
  for (int32_t n : next) s += (s.empty() ? "" : " or ") + std::string(pipe_op_name(n));
  return s;
}

// Why `op` breaks the orders `ps` still follows, or "" and `ps` moved past it.
std::string advance(const std::vector<std::vector<int32_t>>& orders, PassState& ps, int32_t op,
                    const std::string& pass) {
  unsigned open = 0;
  for (size_t k = 0; k < orders.size(); ++k)
    if ((ps.open >> k & 1u) && ps.next < orders[k].size() && orders[k][ps.next] == op)
      open |= 1u << k;
  if (open) {
    ps.open = open;
    ++ps.next;
    return "";
  }
  bool anywhere = false, ahead = false, behind = false;
  for (size_t k = 0; k < orders.size(); ++k) {
    const auto pos = std::find(orders[k].begin(), orders[k].end(), op);
    if (pos == orders[k].end()) continue;
    anywhere = true;
    if (!(ps.open >> k & 1u)) continue;
    (size_t(pos - orders[k].begin()) < ps.next ? behind : ahead) = true;
  }
  if (!anywhere) return not_here(op);
  if (behind)
    return "a second " + std::string(pipe_op_name(op)) + " of " + pass +
           " (each pass runs each of its instructions once)";
  if (ahead) return "it comes before the " + next_text(orders, ps, op) + " of " + pass;
  return pass + " already ran " +
         (op == TRIAD_PIPE_BACKWARD ? "a backward-input" : "its whole backward") +
         "; a pass runs one backward, or a backward-input and later a backward-weight";
}

// Whether `ps` has run all of one of the orders.
bool finished(const std::vector<std::vector<int32_t>>& orders, const PassState& ps) {
  for (size_t k = 0; k < orders.size(); ++k)
    if ((ps.open >> k & 1u) && ps.next == orders[k].size()) return true;
  return false;
}

}  // namespace

const char* pipe_op_name(int32_t op) {
  return op >= 0 && op < TRIAD_PIPE_OP_COUNT_V2 ? kOpNames[op] : "unknown";
}

std::string pipe_layout_text(const triad_pipe_layout_v1& l) {
  return "stage " + std::to_string(l.stage) + " of " + std::to_string(l.stages) + ", " +
         plural(l.micro_batches, "micro-batch", "micro-batches") + ", " +
         plural(l.virtual_stages, "virtual stage", "virtual stages");
}

std::string describe_capabilities(const triad_pipe_caps_v1& c) {
  if (c.max_virtual_stages == 1) return "not interleaved (1 virtual stage)";
  if (c.max_virtual_stages <= 0) return "interleaved, any number of virtual stages";
  return "interleaved, up to " + std::to_string(c.max_virtual_stages) + " virtual stages";
}

std::string pipe_stream_error(const triad_pipe_layout_v1& l, const PipeSchedule& stream,
                              int* peak_buffers, int* in_flight) {
  const int m = l.micro_batches, v = l.virtual_stages;
  if (stream.buffers < 0 || stream.buffers > m * v)
    return "it declares " + plural(stream.buffers, "buffer", "buffers") + ", more than the " +
           plural(m * v, "pass", "passes") + " of its step can use";
  std::vector<std::vector<std::vector<int32_t>>> orders;
  for (int32_t c = 0; c < v; ++c) orders.push_back(pass_orders(l, c));
  std::vector<PassState> passes(size_t(m) * size_t(v));
  std::vector<int> owner(size_t(stream.buffers), -1);  // pass index, -1 free
  std::vector<int> loads(size_t(m), 0), done(size_t(m), 0);
  std::vector<bool> started(size_t(m), false);
  int used = 0, peak = 0, flying = 0, most_flying = 0;
  size_t ended = 0;  // step-wide ops seen
  for (size_t k = 0; k < stream.instrs.size(); ++k) {
    const triad_pipe_instr_v1& in = stream.instrs[k];
    const std::string where = at(k, in, v);
    if (in.op < 0 || in.op >= TRIAD_PIPE_OP_COUNT_V2)
      return "instruction " + std::to_string(k) + " has op " + std::to_string(in.op) +
             ", not a triad_pipe_op";
    if (step_wide(in.op)) {
      if (in.micro_batch != -1 || in.buffer != -1)
        return where + ": a step-wide op has micro_batch -1 and buffer -1, not " +
               std::to_string(in.micro_batch) + " and " + std::to_string(in.buffer);
      if (ended >= std::size(kEnd) || in.op != kEnd[ended]) return where + ": " + kEndText;
      ++ended;
      continue;
    }
    if (ended > 0)
      return where + ": it comes after " + pipe_op_name(kEnd[ended - 1]) + "; " + kEndText;
    if (in.micro_batch < 0 || in.micro_batch >= m)
      return where + ": the micro-batch is outside 0.." + std::to_string(m - 1);
    if (in.chunk < 0 || in.chunk >= v)
      return where + ": the chunk is outside 0.." + std::to_string(v - 1) + " (" +
             plural(v, "virtual stage", "virtual stages") + ")";
    if (in.buffer < 0 || in.buffer >= stream.buffers)
      return where + ": buffer " + std::to_string(in.buffer) + " is outside the " +
             plural(stream.buffers, "buffer", "buffers") + " it declares";
    const std::string pass = pass_text(in.micro_batch, in.chunk, v);
    const size_t id = size_t(in.micro_batch) * size_t(v) + size_t(in.chunk);
    PassState& ps = passes[id];
    const std::vector<std::vector<int32_t>>& seqs = orders[size_t(in.chunk)];
    const size_t fwd =
        size_t(std::find(seqs[0].begin(), seqs[0].end(), TRIAD_PIPE_FORWARD) - seqs[0].begin());
    if (in.op == TRIAD_PIPE_LOAD_MICRO_BATCH) {
      if (!load_allowed(l, in.chunk))
        return where + ": " +
               (l.stage == 0
                    ? "the first stage loads before chunk 0's forward"
                    : "the last stage loads before chunk " + std::to_string(v - 1) + "'s forward");
      const bool between = l.stage != 0 && l.stage != l.stages - 1;
      if (ps.loaded || (between && loads[size_t(in.micro_batch)] > 0))
        return where + ": a second load of " + pass + " on this stage";
      if (ps.next > fwd) return where + ": it comes after the forward it loads for";
      ps.loaded = true;
      ++loads[size_t(in.micro_batch)];
    } else if (std::string e = advance(seqs, ps, in.op, pass); !e.empty()) {
      return where + ": " + e;
    }
    // The buffer: bound at the pass's first instruction, held until its last.
    if (ps.buffer < 0) {
      if (owner[size_t(in.buffer)] >= 0) {
        const int o = owner[size_t(in.buffer)];
        return where + ": buffer " + std::to_string(in.buffer) + " still holds " +
               pass_text(o / v, o % v, v) + ", whose backward has not finished";
      }
      owner[size_t(in.buffer)] = int(id);
      ps.buffer = in.buffer;
      peak = std::max(peak, ++used);
      if (!started[size_t(in.micro_batch)]) {
        started[size_t(in.micro_batch)] = true;
        most_flying = std::max(most_flying, ++flying);
      }
    } else if (ps.buffer != in.buffer) {
      return where + ": " + pass + " started in buffer " + std::to_string(ps.buffer) +
             "; all its instructions use that buffer";
    }
    if (finished(seqs, ps)) {
      owner[size_t(ps.buffer)] = -1;
      --used;
      if (++done[size_t(in.micro_batch)] == v) --flying;
    }
  }
  for (int32_t mb = 0; mb < m; ++mb)
    for (int32_t c = 0; c < v; ++c) {
      const PassState& ps = passes[size_t(mb) * size_t(v) + size_t(c)];
      if (!finished(orders[size_t(c)], ps))
        return pass_text(mb, c, v) + " has no " + next_text(orders[size_t(c)], ps, -1) +
               (ps.next == 0 ? " (it never runs)" : "");
      if (!ps.loaded && (first_virtual(l, c) || last_virtual(l, c)))
        return pass_text(mb, c, v) + " is never loaded (the " +
               (first_virtual(l, c) ? "first stage loads its tokens" : "last stage its targets") +
               " before the forward)";
    }
  if (ended < std::size(kEnd))
    return "the stream has no " + std::string(pipe_op_name(kEnd[ended])) + " at its end; " +
           kEndText;
  if (peak_buffers) *peak_buffers = peak;
  if (in_flight) *in_flight = most_flying;
  return "";
}

namespace {

// The time `costs` give one pass (FORWARD, BACKWARD or one of its halves) of `chunk` on `stage`.
double pass_cost(const PipeCosts& costs, int stage, int32_t chunk, int32_t op) {
  if (op == TRIAD_PIPE_FORWARD || op == TRIAD_PIPE_BACKWARD)
    return costs.pass(stage, chunk, op == TRIAD_PIPE_BACKWARD);
  const bool weight = op == TRIAD_PIPE_BACKWARD_WEIGHT;
  return costs.half ? costs.half(stage, chunk, weight) : costs.pass(stage, chunk, true) / 2;
}

// Every stage's stream run together, each instruction's start time on a clock where each pass
// takes what `cost` says (unit costs: FORWARD 1, BACKWARD 2, each of its halves 1) and a message
// arrives its transfer time after it was sent (unit costs: at once). error is "" or the first
// problem.
struct Run {
  std::string error;
  std::vector<std::vector<double>> start;  // [stage][instruction]
  std::vector<double> clock;               // each stage's end
  std::vector<double> busy;                // each stage's time in passes
};

Run run_together(const std::vector<PipeSchedule>& st, int v, const PipeCosts& cost) {
  const int p = int(st.size());
  struct Message {
    int32_t micro_batch, chunk;  // the receiver's pass
    double time;                 // when it arrives
  };
  // (from, to, is_grad) -> messages in the order sent
  std::map<std::tuple<int, int, bool>, std::deque<Message>> channels;
  // The stage and chunk of virtual stage chunk * p + stage + step.
  auto peer = [p](int stage, int32_t chunk, int step) {
    const int g = int(chunk) * p + stage + step;
    return std::make_pair(g % p, int32_t(g / p));
  };
  Run r;
  r.start.resize(size_t(p));
  r.clock.assign(size_t(p), 0);
  r.busy.assign(size_t(p), 0);
  std::vector<size_t> pc(size_t(p), 0);
  for (bool moved = true; moved && r.error.empty();) {
    moved = false;
    for (int s = 0; s < p && r.error.empty(); ++s) {
      const auto& instrs = st[size_t(s)].instrs;
      double& clock = r.clock[size_t(s)];
      for (size_t& k = pc[size_t(s)]; k < instrs.size(); ++k) {
        const triad_pipe_instr_v1& in = instrs[k];
        const bool grad = in.op == TRIAD_PIPE_SEND_GRAD || in.op == TRIAD_PIPE_RECV_GRAD;
        const double t0 = clock;
        if (in.op == TRIAD_PIPE_SEND_ACTIVATION || in.op == TRIAD_PIPE_SEND_GRAD) {
          const auto [to, chunk] = peer(s, in.chunk, grad ? -1 : 1);
          channels[{s, to, grad}].push_back(
              {in.micro_batch, chunk, clock + cost.transfer(s, in.chunk, grad)});
        } else if (in.op == TRIAD_PIPE_RECV_ACTIVATION || in.op == TRIAD_PIPE_RECV_GRAD) {
          const int from = peer(s, in.chunk, grad ? 1 : -1).first;
          auto& q = channels[{from, s, grad}];
          if (q.empty()) break;  // blocked
          const Message msg = q.front();
          if (msg.micro_batch != in.micro_batch || msg.chunk != in.chunk) {
            r.error = "stage " + std::to_string(s) + " receives at " + at(k, in, v) +
                      ", but the next " + (grad ? "gradient" : "activation") + " stage " +
                      std::to_string(from) + " sent it is for " +
                      pass_text(msg.micro_batch, msg.chunk, v) +
                      ": messages of one kind between two stages arrive in the order they were "
                      "sent";
            break;
          }
          q.pop_front();
          clock = std::max(clock, msg.time);
        } else if (compute(in.op)) {
          const double d = pass_cost(cost, s, in.chunk, in.op);
          clock += d;
          r.busy[size_t(s)] += d;
        }
        r.start[size_t(s)].push_back(compute(in.op) ? t0 : clock);
        moved = true;
      }
    }
  }
  if (!r.error.empty()) return r;
  std::string blocked;
  for (int s = 0; s < p; ++s) {
    const auto& instrs = st[size_t(s)].instrs;
    const size_t k = pc[size_t(s)];
    if (k == instrs.size()) continue;
    const triad_pipe_instr_v1& in = instrs[k];
    const bool grad = in.op == TRIAD_PIPE_RECV_GRAD;
    blocked += (blocked.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s) +
               " waits at " + at(k, in, v) + " for stage " +
               std::to_string(peer(s, in.chunk, grad ? 1 : -1).first);
  }
  if (!blocked.empty()) {
    r.error = "deadlock: " + blocked;
    return r;
  }
  for (const auto& [key, q] : channels)
    if (!q.empty()) {
      const auto [from, to, grad] = key;
      r.error = "stage " + std::to_string(from) + " sends the " +
                (grad ? "gradient" : "activation") + " of " +
                pass_text(q.front().micro_batch, q.front().chunk, v) + " to stage " +
                std::to_string(to) + ", which never receives it";
      return r;
    }
  return r;
}

}  // namespace

std::string simulate_pipeline(const std::vector<PipeSchedule>& stages, int micro_batches,
                              int virtual_stages) {
  if (stages.empty()) return "no stages";
  if (micro_batches < 1 || virtual_stages < 1)
    return "micro-batches and virtual stages are at least 1";
  const int p = int(stages.size());
  for (int s = 0; s < p; ++s) {
    const triad_pipe_layout_v1 l{s, p, micro_batches, virtual_stages};
    if (std::string e = pipe_stream_error(l, stages[size_t(s)]); !e.empty())
      return "stage " + std::to_string(s) + ": " + e;
  }
  return run_together(stages, virtual_stages, PipeCosts{}).error;
}

PipeTimeline pipeline_timeline(const std::vector<PipeSchedule>& stages, int micro_batches,
                               int virtual_stages) {
  if (std::string e = simulate_pipeline(stages, micro_batches, virtual_stages); !e.empty())
    throw UserError("the pipeline streams cannot run: " + e);
  const int p = int(stages.size()), v = virtual_stages;
  const Run r = run_together(stages, v, PipeCosts{});
  PipeTimeline t;
  t.makespan = int(std::lround(*std::max_element(r.clock.begin(), r.clock.end())));
  long long busy = 0;
  size_t width = 1;
  std::vector<std::vector<std::string>> cells(size_t(p),
                                              std::vector<std::string>(size_t(t.makespan), "."));
  for (int s = 0; s < p; ++s) {
    const triad_pipe_layout_v1 l{s, p, micro_batches, v};
    int peak = 0, flying = 0;
    pipe_stream_error(l, stages[size_t(s)], &peak, &flying);
    t.peak_buffers.push_back(peak);
    t.in_flight.push_back(flying);
    t.max_in_flight = std::max(t.max_in_flight, flying);
    const auto& instrs = stages[size_t(s)].instrs;
    for (size_t k = 0; k < instrs.size(); ++k) {
      const triad_pipe_instr_v1& in = instrs[k];
      if (!compute(in.op)) continue;
      const char pass = in.op == TRIAD_PIPE_FORWARD          ? 'F'
                        : in.op == TRIAD_PIPE_BACKWARD       ? 'B'
                        : in.op == TRIAD_PIPE_BACKWARD_INPUT ? 'b'
                                                             : 'W';
      t.split = t.split || pass == 'b';
      PipeBox b{s,
                int(std::lround(r.start[size_t(s)][k])),
                int(std::lround(pass_cost(PipeCosts{}, s, in.chunk, in.op))),
                pass,
                in.micro_batch,
                in.chunk};
      t.boxes.push_back(b);
      busy += b.length;
      std::string cell(1, char(std::toupper(b.pass)));
      cell += std::to_string(in.micro_batch);
      if (v > 1) cell += char('a' + in.chunk % 26);
      width = std::max(width, cell.size());
      for (int u = 0; u < b.length; ++u) cells[size_t(s)][size_t(b.start + u)] = cell;
    }
  }
  t.bubble = t.makespan > 0 ? 1.0 - double(busy) / (double(p) * t.makespan) : 0.0;
  for (const auto& row : cells) {
    std::string line;
    for (const std::string& c : row) {
      if (!line.empty()) line += ' ';
      line += c + std::string(width - c.size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    t.rows.push_back(line);
  }
  return t;
}

PipeTiming pipeline_timing(const std::vector<PipeSchedule>& stages, int micro_batches,
                           int virtual_stages, const PipeCosts& costs) {
  if (std::string e = simulate_pipeline(stages, micro_batches, virtual_stages); !e.empty())
    throw UserError("the pipeline streams cannot run: " + e);
  const Run r = run_together(stages, virtual_stages, costs);
  PipeTiming t;
  t.end = r.clock;
  t.busy = r.busy;
  t.makespan = *std::max_element(r.clock.begin(), r.clock.end());
  return t;
}

std::string pipe_bubble_text(const PipeTimeline& t, int micro_batches, int virtual_stages) {
  const int p = int(t.rows.size()), denominator = virtual_stages * micro_batches + p - 1;
  char buf[240];
  if (t.split && virtual_stages == 1) {
    // Split backwards: F = B = W = 1 leaves (p-1)(F+B-W) idle per stage where m >= p, against
    // 1F1B's (p-1)(F+B+W).
    const int zb = 3 * micro_batches + p - 1;
    std::snprintf(buf, sizeof(buf),
                  "%.3f of the step (formula (p-1)/(3m+p-1) = %d/%d = %.3f with a split "
                  "backward; 1F1B's (p-1)/(m+p-1) = %d/%d = %.3f)",
                  t.bubble, p - 1, zb, double(p - 1) / zb, p - 1, denominator,
                  double(p - 1) / denominator);
    return buf;
  }
  std::snprintf(buf, sizeof(buf), "%.3f of the step (%sformula %s = %d/%d = %.3f)", t.bubble,
                t.split ? "1F1B's " : "", virtual_stages == 1 ? "(p-1)/(m+p-1)" : "(p-1)/(v*m+p-1)",
                p - 1, denominator, double(p - 1) / denominator);
  return buf;
}

std::string pipe_counts_text(const std::vector<int>& counts) {
  std::string s;
  for (int c : counts) {
    if (!s.empty()) s += ' ';
    s += std::to_string(c);
  }
  return s;
}

// ---------------------------------------------------------------------------------------

PipelineBackend::PipelineBackend(std::shared_ptr<const LoadedPlugin> plugin,
                                 const ResolvedParams& params, const triad_services_v1* services)
    : instance_(std::move(plugin), "pipeline", params, services),
      services_(services),
      ops_(instance_.ops<triad_pipeline_ops_v1>()),
      caps_(instance_.capabilities(ops_.capabilities)) {}

const std::string& PipelineBackend::name() const {
  return instance_.name();
}

const triad_pipe_caps_v1& PipelineBackend::capabilities() const {
  return caps_;
}

std::string PipelineBackend::last_error() const {
  return instance_.last_error();
}

const std::string& PipelineBackend::path() const {
  return instance_.plugin().path();
}

int PipelineBackend::try_num_buffers(const triad_pipe_layout_v1& layout,
                                     int32_t* buffers) const noexcept {
  return instance_.call("num_buffers",
                        [&] { return ops_.num_buffers(instance_.handle(), &layout, buffers); });
}

int PipelineBackend::try_schedule_call(const triad_pipe_layout_v1& layout, triad_pipe_instr_v1* out,
                                       size_t capacity, size_t* count) const noexcept {
  return instance_.call(
      "schedule", [&] { return ops_.schedule(instance_.handle(), &layout, out, capacity, count); });
}

std::string PipelineBackend::try_schedule(const triad_pipe_layout_v1& l, PipeSchedule* out,
                                          int* status) const {
  int ignored = TRIAD_OK;
  int& st = status ? *status : ignored;
  PipeSchedule s;
  int32_t buffers = -1;
  if ((st = try_num_buffers(l, &buffers)) != TRIAD_OK)
    return instance_.failure(st, "num_buffers()");
  size_t count = 0;
  if ((st = try_schedule_call(l, nullptr, 0, &count)) != TRIAD_OK)
    return instance_.failure(st, "schedule()");
  // A step has at most 8 instructions per pass (LOAD and the seven of a split pass) and 3 at its
  // end.
  const size_t most =
      8 * size_t(std::max(l.micro_batches, 1)) * size_t(std::max(l.virtual_stages, 1)) + 3;
  if (count > most)
    return "schedule() reports " + std::to_string(count) + " instructions; a step of " +
           plural(l.micro_batches, "micro-batch", "micro-batches") + " has at most " +
           std::to_string(most);
  s.buffers = buffers;
  s.instrs.assign(count, triad_pipe_instr_v1{-1, -1, -1, -1});
  size_t again = 0;
  if ((st = try_schedule_call(l, s.instrs.data(), count, &again)) != TRIAD_OK)
    return instance_.failure(st, "schedule()");
  if (again != count)
    return "schedule() reported " + std::to_string(count) + " instructions, then " +
           std::to_string(again);
  if (out) *out = std::move(s);
  return "";
}

// Why this plugin cannot schedule `l`, or "" and *out filled.
std::string PipelineBackend::refusal(const triad_pipe_layout_v1& l, PipeSchedule* out) const {
  if (caps_.max_virtual_stages > 0 && l.virtual_stages > caps_.max_virtual_stages)
    return "it schedules up to " +
           plural(caps_.max_virtual_stages, "virtual stage", "virtual stages");
  int status = TRIAD_OK;
  if (std::string why = try_schedule(l, out, &status); !why.empty())
    // A case the plugin does not schedule: its own reason; any other failure is the plugin's
    // fault, named with the call that failed.
    return status == TRIAD_ERR_UNSUPPORTED ? last_error() : why;
  if (std::string broken = pipe_stream_error(l, *out); !broken.empty())
    return "its stream breaks a rule: " + broken + "; check it with triad-plugin-test pipeline " +
           path();
  return "";
}

// Why this plugin cannot schedule every stage of `l`'s pipeline so that they run together, or ""
// and *out filled; *stage is the stage refused on its own, -1 when the streams do not run together.
std::string PipelineBackend::pipeline_refusal(const triad_pipe_layout_v1& l,
                                              std::vector<PipeSchedule>* out, int* stage) const {
  std::vector<PipeSchedule> all(size_t(l.stages));
  *stage = -1;
  for (int s = 0; s < l.stages; ++s)
    if (std::string why =
            refusal({s, l.stages, l.micro_batches, l.virtual_stages}, &all[size_t(s)]);
        !why.empty()) {
      *stage = s;
      return why;
    }
  if (std::string e = simulate_pipeline(all, l.micro_batches, l.virtual_stages); !e.empty())
    return "its stages' streams do not run together: " + e +
           "; check it with triad-plugin-test pipeline " + path();
  *out = std::move(all);
  return "";
}

void PipelineBackend::refuse(const triad_pipe_layout_v1& l, int stage,
                             const std::string& why) const {
  const std::string what =
      stage >= 0 ? pipe_layout_text({stage, l.stages, l.micro_batches, l.virtual_stages})
                 : plural(l.stages, "stage", "stages") + ", " +
                       plural(l.micro_batches, "micro-batch", "micro-batches") + ", " +
                       plural(l.virtual_stages, "virtual stage", "virtual stages");
  // The nearest layout this plugin schedules, and the installed pipeline plugins that schedule
  // this one (each with its defaults).
  const std::string own = nearest_fix(l);
  const std::string others = other_plugins_fix(
      "pipeline", name(),
      [&](std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params) {
        PipelineBackend be(std::move(plugin), params, services_);
        std::vector<PipeSchedule> all;
        int failed = -1;
        return be.pipeline_refusal(l, &all, &failed).empty();
      },
      "", schedule_key_);
  std::string fix = own.empty() ? others : others.empty() ? own : own + "; or " + others;
  if (fix.empty())
    fix = "no installed pipeline plugin schedules it; change " + micro_batches_key_ + " or " +
          virtual_stages_key_;
  throw UserError(instance_.who() + " cannot schedule " + what + ": " + why + "; " + fix);
}

// "set KEY to M" for the fewest micro-batches above the layout's that this plugin schedules with
// every stage, "or KEY to 1" when one virtual stage would do; "" when neither is near.
std::string PipelineBackend::nearest_fix(const triad_pipe_layout_v1& l) const {
  const auto schedules_all = [&](int32_t m, int32_t v) {
    std::vector<PipeSchedule> all;
    int failed = -1;
    return pipeline_refusal({0, l.stages, m, v}, &all, &failed).empty();
  };
  std::vector<std::string> ways;
  for (int32_t m = l.micro_batches + 1; m <= l.micro_batches + 2 * l.stages; ++m)
    if (schedules_all(m, l.virtual_stages)) {
      ways.push_back(micro_batches_key_ + " to " + std::to_string(m));
      break;
    }
  if (l.virtual_stages > 1 && schedules_all(l.micro_batches, 1))
    ways.push_back(virtual_stages_key_ + " to 1");
  if (ways.empty()) return "";
  return "set " + ways[0] + (ways.size() > 1 ? " or " + ways[1] : "");
}

namespace {

void require_layout(const triad_pipe_layout_v1& l) {
  if (l.stages < 1 || l.stage < 0 || l.stage >= l.stages || l.micro_batches < 1 ||
      l.virtual_stages < 1)
    throw UserError("pipeline layout " + pipe_layout_text(l) +
                    " is malformed: stages, micro-batches and virtual stages are at least 1 and "
                    "the stage is one of 0..stages-1");
}

}  // namespace

PipeSchedule PipelineBackend::schedule(int stage, int stages, int micro_batches,
                                       int virtual_stages) const {
  const triad_pipe_layout_v1 l{stage, stages, micro_batches, virtual_stages};
  require_layout(l);
  PipeSchedule s;
  if (std::string why = refusal(l, &s); !why.empty()) refuse(l, stage, why);
  return s;
}

std::vector<PipeSchedule> PipelineBackend::schedules(int stages, int micro_batches,
                                                     int virtual_stages) const {
  const triad_pipe_layout_v1 l{0, stages, micro_batches, virtual_stages};
  require_layout(l);
  std::vector<PipeSchedule> all;
  int stage = -1;
  if (std::string why = pipeline_refusal(l, &all, &stage); !why.empty()) refuse(l, stage, why);
  return all;
}

}  // namespace triad
