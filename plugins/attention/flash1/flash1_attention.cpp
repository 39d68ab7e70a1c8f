// FlashAttention (Dao et al., 2022) on the CPU, fp32. Forward: for each (batch, head), the
// outer loop walks K/V tiles and the inner loop Q tiles; each query row keeps its running max m
// and sum l in the workspace and its output, normalised so far, in `out`, rescaled as each
// tile arrives. Nothing of size T x T is ever formed. Backward recomputes the scores tile by
// tile from the saved lse in the same order and accumulates dQ straight into dq.
// Parallel over batch x head.
#include <omp.h>

#include <cmath>

#include "flash_backward.hpp"
#include "flash_common.hpp"
#include "flash_cuda.hpp"
#include "tile_gemm.hpp"
#include "tile_pack.hpp"
#include "tile_softmax.hpp"
#include "triad/sdk/attention.hpp"

namespace {

using namespace triad::flash;

const char* const kName = "flash1";

const triad_param_spec_v1 kParams[] = {
    {"block_q", TRIAD_PARAM_INT, "64", "query rows per tile (1..512)"},
    {"block_k", TRIAD_PARAM_INT, "128", "key rows per tile (a multiple of 16, up to 512)"},
    {"deterministic", TRIAD_PARAM_BOOL, "true",
     "GPU backward: bit-identical across runs (no float atomics; about 10% slower). The CPU "
     "backward is always deterministic"},
};

// One thread's scratch for the forward pass.
struct FwdScratch {
  float *kt, *v, *s, *row_scale;
  FwdScratch(Arena& a, int D, Tiles t) {
    const size_t dp = round_up(D, kLane), bk = t.bk, bq = t.bq;
    kt = a.floats(dp * bk);
    v = D % kLane ? a.floats(bk * dp) : nullptr;  // V is read in place when D needs no padding
    s = a.floats(bq * bk);
    row_scale = a.floats(bq);
  }
};

struct FwdLayout {
  float *m, *l;  // (B, H, T) running max (base 2) and sum per query row
  PerThread<FwdScratch> scratch;
  FwdLayout(Arena& a, int64_t rows, int D, Tiles t, int threads)
      : m(a.floats(rows)), l(a.floats(rows)), scratch(a, threads, D, t) {}
};

struct BwdLayout {
  float* delta;  // (B, H, T)
  PerThread<BwdScratch> scratch;
  BwdLayout(Arena& a, int64_t rows, int D, Tiles t, int threads)
      : delta(a.floats(rows)), scratch(a, threads, D, t) {}
};

class Flash1 : public triad::sdk::AttentionPlugin {
 public:
  Flash1(triad::sdk::Services services, triad::sdk::Params params)
      : threads_(thread_count(services)),
        stream_(services.stream()),
        deterministic_(params.get_bool("deterministic")) {
    tiles_.bq = block_param(params, kName, "block_q", 1);
    tiles_.bk = block_param(params, kName, "block_k", kLane);
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
      return triad::flash_cuda::workspace(false, shape, fwd, bwd);
#endif
    const int64_t rows = shape.batch * shape.heads * shape.seq_len;
    const int D = static_cast<int>(shape.head_dim);
    Arena f, b;
    [[maybe_unused]] const FwdLayout fl(f, rows, D, tiles_, threads_);
    [[maybe_unused]] const BwdLayout bl(b, rows, D, tiles_, threads_);
    *fwd = rows > 0 ? f.request() : 0;
    *bwd = rows > 0 ? b.request() : 0;
  }

  void forward(const triad_attention_fwd_args_v1& args) override {
#ifdef TRIAD_FLASH_CUDA
    if (triad::flash_cuda::on_gpu(args.q))
      return triad::flash_cuda::forward(false, args, stream_, kName);
#endif
    const Heads h = check_heads(args.q, args.k, args.v, kName);
    const View4<float> out = output_view(args.out, "out", h, kName);
    float* lse = lse_data(args.lse, h, kName);
    const int64_t rows = int64_t{h.B} * h.H * h.T;
    if (rows == 0) return;
    Arena sizing;
    [[maybe_unused]] const FwdLayout sized(sizing, rows, h.D, tiles_, threads_);
    Arena arena(aligned_workspace(args.workspace, args.workspace_bytes, sizing.request(), kName));
    const FwdLayout ws(arena, rows, h.D, tiles_, threads_);
    const bool causal = args.causal != 0;
    const float scale = args.scale;

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (int64_t bh = 0; bh < int64_t{h.B} * h.H; ++bh) {
      const int b = static_cast<int>(bh / h.H), hh = static_cast<int>(bh % h.H);
      forward_head(h, out, lse + bh * h.T, ws.m + bh * h.T, ws.l + bh * h.T, b, hh, causal, scale,
                   ws.scratch.get(omp_get_thread_num()));
    }
  }

  void backward(const triad_attention_bwd_args_v1& args) override {
#ifdef TRIAD_FLASH_CUDA
    if (triad::flash_cuda::on_gpu(args.q))
      return triad::flash_cuda::backward(false, args, deterministic_, stream_, kName);
#endif
    BwdArgs a = unpack_bwd_args(args, kName);
    const Heads& h = a.h;
    const int64_t rows = int64_t{h.B} * h.H * h.T;
    if (rows == 0) return;
    Arena sizing;
    [[maybe_unused]] const BwdLayout sized(sizing, rows, h.D, tiles_, threads_);
    Arena arena(aligned_workspace(args.workspace, args.workspace_bytes, sizing.request(), kName));
    const BwdLayout ws(arena, rows, h.D, tiles_, threads_);

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (int64_t bh = 0; bh < int64_t{h.B} * h.H; ++bh) {
      const int b = static_cast<int>(bh / h.H), hh = static_cast<int>(bh % h.H);
      float* delta = ws.delta + bh * h.T;
      row_deltas(a, b, hh, delta);
      // One thread walks the K tiles of a head in order, so dq sums in a fixed order.
      const BwdScratch s = ws.scratch.get(omp_get_thread_num());
      for (int k0 = 0; k0 < h.T; k0 += tiles_.bk)
        backward_k_tile(a, b, hh, k0, delta, s, tiles_, InOrder{});
    }
  }

 private:
  // Forward for head (b, hh); m and l hold the running max (base 2) and sum of its T rows.
  void forward_head(const Heads& h, const View4<float>& out, float* lse, float* m, float* l, int b,
                    int hh, bool causal, float scale, const FwdScratch& s) const {
    const int T = h.T, D = h.D, Dp = round_up(D, kLane), bq = tiles_.bq, bk = tiles_.bk;
    const int64_t os = out.s[2];
    float* o = out.row(b, hh, 0);
    for (int i = 0; i < T; ++i) {
      m[i] = kNegInf;
      l[i] = 0.f;
      for (int d = 0; d < D; ++d) o[i * os + d] = 0.f;
    }
    for (int k0 = 0; k0 < T; k0 += bk) {
      const int kn = std::min(bk, T - k0), kp = round_up(kn, kLane);
      // K^T carries scale * log2(e): scores arrive in base 2. Packed once per K tile; Q and V
      // are read where they lie.
      pack_transposed(s.kt, bk, h.k.row(b, hh, k0), h.k.s[2], kn, D, scale * kLog2e);
      const RowsRef vr = padded_rows(h.v.row(b, hh, k0), h.v.s[2], kn, D, s.v);
      const int q_begin = causal ? k0 / bq * bq : 0;  // earlier Q tiles see none of these keys
      for (int q0 = q_begin; q0 < T; q0 += bq) {
        const int qn = std::min(bq, T - q0);
        // A tile crossing the diagonal: query r sees keys c <= r + q0 - k0 only, and blocks
        // that see none are skipped.
        const bool diagonal = causal && k0 + kn - 1 > q0;
        const Band band{diagonal ? Band::On::columns : Band::On::nothing, true, q0 - k0};
        tile_gemm(qn, kp, D, h.q.row(b, hh, q0), h.q.s[2], 1, s.kt, bk, s.s, bk, kp, Init::zero,
                  nullptr, band);
        for (int r = 0; r < qn; ++r) {
          float* sr = s.s + static_cast<ptrdiff_t>(r) * bk;
          if (diagonal) {
            const int valid = q0 + r - k0 + 1;
            if (valid < kn) mask_from(sr, std::max(valid, 0), kn);
          }
          // Tile statistics, then merge with the row's running ones (FlashAttention eq. in
          // Algorithm 1, lines 10-12): O = (l e^(m-m') O + e^(mt-m') P V) / l'.
          const float mt = row_max(sr, kn);
          const float lt = exp2_row(sr, safe_offset(mt), kn);
          const int i = q0 + r;
          const float mn = std::max(m[i], mt);
          const float a_old = m[i] == kNegInf ? 0.f : std::exp2(m[i] - mn);
          const float a_new = mt == kNegInf ? 0.f : std::exp2(mt - mn);
          const float ln = a_old * l[i] + a_new * lt;
          const float inv = ln > 0.f ? 1.f / ln : 0.f;
          s.row_scale[r] = ln > 0.f ? a_old * l[i] * inv : 1.f;
          const float p_scale = a_new * inv;
#pragma omp simd
          for (int c = 0; c < kn; ++c) sr[c] *= p_scale;
          m[i] = mn;
          l[i] = ln;
        }
        tile_gemm(qn, Dp, kn, s.s, bk, 1, vr.data, vr.ld, o + q0 * os, os, D, Init::rescale,
                  s.row_scale, diagonal ? Band{Band::On::sum, true, q0 - k0} : Band{});
      }
    }
    for (int i = 0; i < T; ++i) lse[i] = (m[i] + std::log2(l[i])) * kLn2;
  }

  int threads_;
  void* stream_;        // the core's device stream (GPU calls)
  bool deterministic_;  // GPU backward without float atomics
  Tiles tiles_;
};

}  // namespace

// TRIAD_ATTENTION_PLUGIN forwards TRIAD_PARAMS(kParams) into a second macro, where its comma
// splits it into two arguments; the descriptor macro it would call is used directly instead.
TRIAD_DEFINE_PLUGIN_DESCRIPTOR(Flash1, "attention", "flash1", "1.0",
                               "FlashAttention (2022), CPU fp32: K/V tiles outer, Q tiles "
                               "inner, running max/sum per row; O(B*H*T) workspace",
                               &::triad::sdk::AttentionAdapter<Flash1>::ops, TRIAD_PARAMS(kParams))
