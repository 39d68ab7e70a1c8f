// FlashAttention-2 (Dao, 2023) on the CPU, fp32. Forward: one unit of parallel work per
// (batch, head, Q tile); K/V tiles stream past it with an unnormalised accumulator that is
// divided by the row sum once, at the end; only lse is saved. Under a causal mask, K tiles
// wholly in the future are never visited and only tiles crossing the diagonal are masked.
// Backward: delta = rowsum(dO * O) first, then one task per (batch, head, K tile), which owns
// its dK/dV rows. Tasks of one head all add into the same dQ rows; rather than float atomics
// (whose order, and so whose bits, change from run to run) each Q tile's rows take the K
// tiles' contributions in K order, a task waiting for its predecessor's turn on that tile.
// Consecutive K tiles thus run as a pipeline, and dq is bit-identical for any thread count.
#include <omp.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "flash_backward.hpp"
#include "flash_common.hpp"
#include "flash_cuda.hpp"
#include "tile_gemm.hpp"
#include "tile_pack.hpp"
#include "tile_softmax.hpp"
#include "triad/sdk/attention.hpp"

namespace {

using namespace triad::flash;

const char* const kName = "flash2";

const triad_param_spec_v1 kParams[] = {
    {"block_q", TRIAD_PARAM_INT, "128",
     "forward: query rows per tile, the unit of parallel work (a multiple of 16, up to 512)"},
    {"block_k", TRIAD_PARAM_INT, "128", "forward: key rows per tile (a multiple of 16, up to 512)"},
    {"bwd_block_q", TRIAD_PARAM_INT, "64", "backward: query rows per tile (1..512)"},
    {"bwd_block_k", TRIAD_PARAM_INT, "128",
     "backward: key rows per tile, the unit of parallel work (a multiple of 16, up to 512)"},
    {"deterministic", TRIAD_PARAM_BOOL, "true",
     "GPU backward: bit-identical across runs (no float atomics; about 10% slower). The CPU "
     "backward is always deterministic"},
};

// One thread's scratch for the forward pass. Scores are kept transposed, keys x queries, so
// the per-query softmax statistics are columns: every step is a vertical vector operation.
struct FwdScratch {
  float *qt, *v, *st, *o, *m, *l, *alpha, *sum;
  FwdScratch(Arena& a, int D, Tiles t) {
    const size_t dp = round_up(D, kLane), bk = t.bk, bq = t.bq;
    qt = a.floats(dp * bq);
    v = D % kLane ? a.floats(bk * dp) : nullptr;  // V is read in place when D needs no padding
    st = a.floats(bk * bq);
    o = a.floats(bq * dp);
    m = a.floats(bq);
    l = a.floats(bq);
    alpha = a.floats(bq);
    sum = a.floats(bq);
  }
};

struct BwdLayout {
  float* delta;    // (B, H, T)
  int32_t* ready;  // (B, H): 1 once the head's delta is written
  int32_t* turns;  // (B, H, Q tiles): K tiles that have added into the Q tile's dq rows so far
  PerThread<BwdScratch> scratch;
  BwdLayout(Arena& a, int64_t heads, int T, int D, Tiles t, int threads)
      : delta(a.floats(heads * T)),
        ready(reinterpret_cast<int32_t*>(a.take(heads * sizeof(int32_t)))),
        turns(reinterpret_cast<int32_t*>(a.take(heads * q_tiles(T, t) * sizeof(int32_t)))),
        scratch(a, threads, D, t) {}
  static int q_tiles(int T, Tiles t) { return (T + t.bq - 1) / t.bq; }
};

// Waits until another task has set *flag to value (release), yielding the core after a short
// spin in case that task's thread is descheduled.
inline void wait_for(int32_t* flag, int32_t value) {
  std::atomic_ref<int32_t> c(*flag);
  for (int spins = 0; c.load(std::memory_order_acquire) != value; ++spins)
    if (spins > 256) std::this_thread::yield();
}

inline void publish(int32_t* flag, int32_t value) {
  std::atomic_ref<int32_t>(*flag).store(value, std::memory_order_release);
}

// K tile number `turn` of one head may add into a Q tile's dq rows once the K tiles before it
// have: their counter then equals `turn`.
struct KOrder {
  int32_t* turns;  // the head's counters, one per Q tile
  int32_t turn;
  void wait(int q_tile) const { wait_for(&turns[q_tile], turn); }
  void done(int q_tile) const { publish(&turns[q_tile], turn + 1); }
};

class Flash2 : public triad::sdk::AttentionPlugin {
 public:
  Flash2(triad::sdk::Services services, triad::sdk::Params params)
      : threads_(thread_count(services)),
        stream_(services.stream()),
        deterministic_(params.get_bool("deterministic")) {
    fwd_.bq = block_param(params, kName, "block_q", kLane);
    fwd_.bk = block_param(params, kName, "block_k", kLane);
    bwd_.bq = block_param(params, kName, "bwd_block_q", 1);
    bwd_.bk = block_param(params, kName, "bwd_block_k", kLane);
  }

  triad_attention_caps_v1 capabilities() const override {
    triad_attention_caps_v1 c = cpu_fp32_caps();
#ifdef TRIAD_FLASH_CUDA
    triad::flash_cuda::add_gpu_caps(c);
#endif
    return c;
  }

  void workspace_size(const triad_attention_shape_v1& shape, size_t* fwd,
                      size_t* bwd) const override {
#ifdef TRIAD_FLASH_CUDA
    if (triad::flash_cuda::check_shape(shape, kName))
      return triad::flash_cuda::workspace(true, shape, fwd, bwd);
#endif
    const int64_t rows = shape.batch * shape.heads * shape.seq_len;
    const int D = static_cast<int>(shape.head_dim);
    Arena f, b;
    [[maybe_unused]] const PerThread<FwdScratch> fl(f, threads_, D, fwd_);
    [[maybe_unused]] const BwdLayout bl(b, shape.batch * shape.heads,
                                        static_cast<int>(shape.seq_len), D, bwd_, threads_);
    *fwd = rows > 0 ? f.request() : 0;
    *bwd = rows > 0 ? b.request() : 0;
  }

  void forward(const triad_attention_fwd_args_v1& args) override {
#ifdef TRIAD_FLASH_CUDA
    if (triad::flash_cuda::on_gpu(args.q))
      return triad::flash_cuda::forward(true, args, stream_, kName);
#endif
    const Heads h = check_heads(args.q, args.k, args.v, kName);
    const View4<float> out = output_view(args.out, "out", h, kName);
    float* lse = lse_data(args.lse, h, kName);
    const int64_t rows = int64_t{h.B} * h.H * h.T;
    if (rows == 0) return;
    Arena sizing;
    [[maybe_unused]] const PerThread<FwdScratch> sized(sizing, threads_, h.D, fwd_);
    Arena arena(aligned_workspace(args.workspace, args.workspace_bytes, sizing.request(), kName));
    const PerThread<FwdScratch> scratch(arena, threads_, h.D, fwd_);
    const bool causal = args.causal != 0;
    const int q_tiles = (h.T + fwd_.bq - 1) / fwd_.bq;
    const int64_t tasks = int64_t{h.B} * h.H * q_tiles;

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (int64_t task = 0; task < tasks; ++task) {
      // Under a causal mask the last Q tiles cost the most: hand them out first.
      const int64_t bh = task % (int64_t{h.B} * h.H);
      const int qt = causal ? q_tiles - 1 - static_cast<int>(task / (int64_t{h.B} * h.H))
                            : static_cast<int>(task / (int64_t{h.B} * h.H));
      const int b = static_cast<int>(bh / h.H), hh = static_cast<int>(bh % h.H);
      forward_q_tile(h, out, lse + bh * h.T, b, hh, qt * fwd_.bq, causal, args.scale,
                     scratch.get(omp_get_thread_num()));
    }
  }

  void backward(const triad_attention_bwd_args_v1& args) override {
#ifdef TRIAD_FLASH_CUDA
    if (triad::flash_cuda::on_gpu(args.q))
      return triad::flash_cuda::backward(true, args, deterministic_, stream_, kName);
#endif
    BwdArgs a = unpack_bwd_args(args, kName);
    const Heads& h = a.h;
    const int64_t heads = int64_t{h.B} * h.H;
    if (heads * h.T == 0) return;
    Arena sizing;
    [[maybe_unused]] const BwdLayout sized(sizing, heads, h.T, h.D, bwd_, threads_);
    Arena arena(aligned_workspace(args.workspace, args.workspace_bytes, sizing.request(), kName));
    const BwdLayout ws(arena, heads, h.T, h.D, bwd_, threads_);
    const int k_tiles = (h.T + bwd_.bk - 1) / bwd_.bk;
    const int q_tiles = BwdLayout::q_tiles(h.T, bwd_);
    std::fill(ws.turns, ws.turns + heads * q_tiles, 0);
    std::fill(ws.ready, ws.ready + heads, 0);
    // Task order only decides speed: dq's summation order is fixed by KOrder. Heads go in
    // groups of one per thread, a group's tasks K-tile-major: the threads work on different
    // heads (rarely waiting on each other), on few heads at a time (their rows stay in cache),
    // and under a causal mask on a head's largest tasks (its first K tiles) first. Tasks are
    // handed out in index order and every task a task waits on (same head, earlier K tile)
    // comes earlier, so it has always been started: waiting cannot deadlock.
    std::atomic<int64_t> next{0};
    const int64_t tasks = heads * k_tiles;
    const int64_t group = std::min<int64_t>(threads_, heads);

#pragma omp parallel num_threads(threads_)
    {
      const BwdScratch s = ws.scratch.get(omp_get_thread_num());
      for (int64_t task = next++; task < tasks; task = next++) {
        const int64_t first_head = task / (group * k_tiles) * group;
        const int64_t in_group = task % (group * k_tiles);
        const int64_t group_heads = std::min(group, heads - first_head);
        const int64_t bh = first_head + in_group % group_heads;
        const int kt = static_cast<int>(in_group / group_heads);
        const int b = static_cast<int>(bh / h.H), hh = static_cast<int>(bh % h.H);
        float* delta = ws.delta + bh * h.T;
        // delta first, once per head, by the head's first K tile; its other tasks wait for
        // it. (Recomputing it in every task costs ~10% at T = 4096: it streams O and dO
        // again; a separate pass over all heads would need a barrier.)
        if (kt == 0) {
          row_deltas(a, b, hh, delta);
          publish(&ws.ready[bh], 1);
        } else {
          wait_for(&ws.ready[bh], 1);
        }
        backward_k_tile(a, b, hh, kt * bwd_.bk, delta, s, bwd_,
                        KOrder{ws.turns + bh * q_tiles, kt});
      }
    }
  }

 private:
  // Rows q0.. of head (b, hh): out = softmax(q k^T * scale) v over the K tiles it can see.
  void forward_q_tile(const Heads& h, const View4<float>& out, float* lse, int b, int hh, int q0,
                      bool causal, float scale, const FwdScratch& s) const {
    const int T = h.T, D = h.D, Dp = round_up(D, kLane), bq = fwd_.bq, bk = fwd_.bk;
    const int qn = std::min(bq, T - q0), qp = round_up(qn, kLane);
    // Q^T carries scale * log2(e): scores arrive in base 2. Query columns past qn are zero.
    pack_transposed(s.qt, bq, h.q.row(b, hh, q0), h.q.s[2], qn, D, scale * kLog2e);
    float *m = s.m, *l = s.l, *alpha = s.alpha, *sum = s.sum;
#pragma omp simd
    for (int r = 0; r < qp; ++r) m[r] = kNegInf, l[r] = 0.f;
    const int k_end = causal ? q0 + qn : T;
    for (int k0 = 0; k0 < k_end; k0 += bk) {
      const int kn = std::min(bk, T - k0);
      // Only a tile crossing the diagonal is masked, and its wholly masked blocks skipped:
      // key c (a row of S^T) sees queries r >= c + k0 - q0.
      const bool diagonal = causal && k0 + kn - 1 > q0;
      // S^T = K Q^T, K read where it lies.
      tile_gemm(kn, qp, D, h.k.row(b, hh, k0), h.k.s[2], 1, s.qt, bq, s.st, bq, qp, Init::zero,
                nullptr, diagonal ? Band{Band::On::columns, false, k0 - q0} : Band{});
      if (diagonal) {
        for (int c = 0; c < kn; ++c) {
          // key k0 + c is in the future of queries q0 + r for r < k0 + c - q0
          float* row = s.st + static_cast<ptrdiff_t>(c) * bq;
          const int first_valid = std::clamp(k0 + c - q0, 0, qp);
#pragma omp simd
          for (int r = 0; r < qp; ++r) row[r] = r < first_valid ? kNegInf : row[r];
        }
      }
#pragma omp simd
      for (int r = 0; r < qp; ++r) alpha[r] = m[r], sum[r] = 0.f;  // alpha holds the old max
      for (int c = 0; c < kn; ++c) {
        const float* row = s.st + static_cast<ptrdiff_t>(c) * bq;
#pragma omp simd
        for (int r = 0; r < qp; ++r) m[r] = row[r] > m[r] ? row[r] : m[r];
      }
      for (int c = 0; c < kn; ++c) {
        float* row = s.st + static_cast<ptrdiff_t>(c) * bq;
#pragma omp simd
        for (int r = 0; r < qp; ++r) {
          // A query with no visible key yet (m = -inf) gets p = 0, not NaN.
          const float p = exp2_approx(row[r] - (m[r] == kNegInf ? 0.f : m[r]));
          row[r] = p;
          sum[r] += p;
        }
      }
#pragma omp simd
      for (int r = 0; r < qp; ++r) {
        alpha[r] = exp2_approx(alpha[r] - (m[r] == kNegInf ? 0.f : m[r]));
        l[r] = l[r] * alpha[r] + sum[r];
      }
      // O = diag(alpha) O + P V, with P = (S^T)^T read through its strides.
      const RowsRef vr = padded_rows(h.v.row(b, hh, k0), h.v.s[2], kn, D, s.v);
      tile_gemm(qn, Dp, kn, s.st, 1, bq, vr.data, vr.ld, s.o, Dp, Dp,
                k0 == 0 ? Init::zero : Init::rescale, alpha,
                diagonal ? Band{Band::On::sum, true, q0 - k0} : Band{});
    }
    for (int r = 0; r < qn; ++r) {
      alpha[r] = 1.f / l[r];
      lse[q0 + r] = (m[r] + std::log2(l[r])) * kLn2;
    }
    unpack_rows(out.row(b, hh, q0), out.s[2], s.o, Dp, qn, D, alpha);
  }

  int threads_;
  void* stream_;        // the core's device stream (GPU calls)
  bool deterministic_;  // GPU backward without float atomics
  Tiles fwd_, bwd_;
};

}  // namespace

// TRIAD_ATTENTION_PLUGIN forwards TRIAD_PARAMS(kParams) into a second macro, where its comma
// splits it into two arguments; the descriptor macro it would call is used directly instead.
TRIAD_DEFINE_PLUGIN_DESCRIPTOR(Flash2, "attention", "flash2", "1.0",
                               "FlashAttention-2 (2023), CPU fp32: parallel over Q tiles, "
                               "deferred normalisation, causal tile skipping; deterministic "
                               "backward",
                               &::triad::sdk::AttentionAdapter<Flash2>::ops, TRIAD_PARAMS(kParams))
