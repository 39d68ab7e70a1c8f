// The backward pass over one K/V tile, shared by flash1 and flash2 (FlashAttention-2's
// backward is FlashAttention's with another split of the work): scores are recomputed tile by
// tile from the saved lse, the tile's dK and dV stay in scratch until every Q tile has been
// seen, and its dQ contributions go straight into dq, in an order the caller enforces.
#pragma once

#include <cmath>

#include "flash_common.hpp"
#include "tile_gemm.hpp"
#include "tile_pack.hpp"
#include "tile_softmax.hpp"

namespace triad::flash {

struct BwdArgs {
  Heads h;
  View4<const float> out, dout;
  View4<float> dq, dk, dv;
  const float* lse = nullptr;
  bool causal = false;
  float scale = 1.f;
};

// Checks and unpacks the ABI's backward arguments (both flash plugins take them alike).
inline BwdArgs unpack_bwd_args(const triad_attention_bwd_args_v1& args, const char* plugin) {
  BwdArgs a;
  a.h = check_heads(args.q, args.k, args.v, plugin);
  a.out = input_view(args.out, "out", a.h, plugin);
  a.dout = input_view(args.dout, "dout", a.h, plugin);
  a.dq = output_view(args.dq, "dq", a.h, plugin);
  a.dk = output_view(args.dk, "dk", a.h, plugin);
  a.dv = output_view(args.dv, "dv", a.h, plugin);
  a.lse = lse_data(args.lse, a.h, plugin);
  a.causal = args.causal != 0;
  a.scale = args.scale;
  return a;
}

// One thread's scratch for backward_k_tile.
struct BwdScratch {
  float *kt = nullptr, *k = nullptr, *vt = nullptr, *dk = nullptr, *dv = nullptr;
  float *q = nullptr, *dout = nullptr, *p = nullptr, *dp = nullptr;

  BwdScratch(Arena& a, int D, Tiles t) {
    const size_t dpad = round_up(D, kLane), bk = t.bk, bq = t.bq;
    kt = a.floats(dpad * bk);
    vt = a.floats(dpad * bk);
    dk = a.floats(bk * dpad);
    dv = a.floats(bk * dpad);
    p = a.floats(bq * bk);
    dp = a.floats(bq * bk);
    if (D % kLane) {  // else K, Q and dO are read in place
      k = a.floats(bk * dpad);
      q = a.floats(bq * dpad);
      dout = a.floats(bq * dpad);
    }
  }
};

// delta[i] = rowsum(dO_i * O_i) for the T rows of head (b, h): the softmax backward term. Each row
// is summed in the order and with the fmadd the micro-kernel uses for dP = dO V^T, so where a row's
// softmax is one-hot (O_i = V_j bit for bit: the first row under a causal mask, T = 1) dP - delta
// is exactly 0 and so is that row's dS, as in exact arithmetic, instead of a rounding residue.
// Eight rows at a time keep eight independent chains of fmadd in flight.
inline void row_deltas(const BwdArgs& a, int b, int h, float* delta) {
  constexpr int kRows = 8;
  const int to = a.h.T;
  for (int i0 = 0; i0 < to; i0 += kRows) {
    const float* o[kRows];
    const float* g[kRows];
    for (int r = 0; r < kRows; ++r) {
      const int i = std::min(i0 + r, to - 1);  // a short last group repeats its last row
      o[r] = a.out.row(b, h, i);
      g[r] = a.dout.row(b, h, i);
    }
    float acc[kRows] = {};
    for (int d = 0; d < a.h.D; ++d)
      for (int r = 0; r < kRows; ++r) acc[r] = fmadd(g[r][d], o[r][d], acc[r]);
    for (int r = 0; r < kRows && i0 + r < to; ++r) delta[i0 + r] = acc[r];
  }
}

// The first query row the K tile at k0 touches: under a causal mask, earlier Q tiles see none
// of its keys.
inline int first_q_row(const BwdArgs& a, int k0, Tiles t) {
  return a.causal ? k0 / t.bq * t.bq : 0;
}

// Serialises the dQ updates of one head: flash1 runs a head's K tiles on one thread, in order,
// and needs nothing; flash2 runs them on many and waits its turn per Q tile.
struct InOrder {
  void wait(int /*q_tile*/) const {}
  void done(int /*q_tile*/) const {}
};

// Writes dK and dV of keys k0..k0+bk-1 of head (b, h) and adds their part of dQ into the dq
// rows of every query they touch; the K tile at k0 = 0, the first to reach each Q tile,
// overwrites instead. delta[i] must hold row i's delta for the rows it touches.
// order.wait(i) / order.done(i) bracket the update of Q tile i's rows.
template <class Order>
void backward_k_tile(const BwdArgs& a, int b, int h, int k0, const float* delta,
                     const BwdScratch& s, Tiles t, const Order& order) {
  const int T = a.h.T, D = a.h.D, Dp = round_up(D, kLane), bk = t.bk;
  const int kn = std::min(bk, T - k0), kp = round_up(kn, kLane);
  const float* lse = a.lse + (static_cast<int64_t>(b) * a.h.H + h) * T;
  const auto& q = a.h.q;
  const auto& dout = a.dout;
  // S arrives in base 2: K^T carries scale * log2(e), so P = 2^(S - lse * log2(e)).
  pack_transposed(s.kt, bk, a.h.k.row(b, h, k0), a.h.k.s[2], kn, D, a.scale * kLog2e);
  pack_transposed(s.vt, bk, a.h.v.row(b, h, k0), a.h.v.s[2], kn, D);
  const RowsRef kr = padded_rows(a.h.k.row(b, h, k0), a.h.k.s[2], kn, D, s.k);

  bool first = true;
  for (int q0 = first_q_row(a, k0, t); q0 < T; q0 += t.bq) {
    const int qn = std::min(t.bq, T - q0);
    const RowsRef qr = padded_rows(q.row(b, h, q0), q.s[2], qn, D, s.q);
    const RowsRef gr = padded_rows(dout.row(b, h, q0), dout.s[2], qn, D, s.dout);

    // A tile crossing the diagonal: query r sees keys c <= r + q0 - k0 only, and blocks that
    // see none are skipped.
    const bool diagonal = a.causal && k0 + kn - 1 > q0;
    const Band cols_upto{diagonal ? Band::On::columns : Band::On::nothing, true, q0 - k0};
    const Band keys_upto{diagonal ? Band::On::sum : Band::On::nothing, true, q0 - k0};
    const Band queries_from{diagonal ? Band::On::sum : Band::On::nothing, false, k0 - q0};

    tile_gemm(qn, kp, D, qr.data, qr.ld, 1, s.kt, bk, s.p, bk, kp, Init::zero, nullptr, cols_upto);
    for (int r = 0; r < qn; ++r) {
      float* pr = s.p + static_cast<ptrdiff_t>(r) * bk;
      if (diagonal) {
        const int valid = q0 + r - k0 + 1;
        if (valid < kn) mask_from(pr, std::max(valid, 0), kn);
      }
      exp2_row(pr, lse[q0 + r] * kLog2e, kn);
    }
    const Init init = first ? Init::zero : Init::accumulate;
    // dV += P^T dO: P read transposed through its strides.
    tile_gemm(kn, Dp, qn, s.p, 1, bk, gr.data, gr.ld, s.dv, Dp, Dp, init, nullptr, queries_from);
    // dP = dO V^T, then dS = P * (dP - delta), with the softmax scale folded in. Where P is
    // masked, dP may not have been computed: dS is set to 0 there without reading it.
    tile_gemm(qn, kp, D, gr.data, gr.ld, 1, s.vt, bk, s.dp, bk, kp, Init::zero, nullptr, cols_upto);
    for (int r = 0; r < qn; ++r) {
      const float* pr = s.p + static_cast<ptrdiff_t>(r) * bk;
      float* dr = s.dp + static_cast<ptrdiff_t>(r) * bk;
      const float dl = delta[q0 + r];
      const float sc = a.scale;
      const int valid = diagonal ? std::clamp(q0 + r - k0 + 1, 0, kn) : kn;
#pragma omp simd
      for (int c = 0; c < kn; ++c) dr[c] = c < valid ? sc * pr[c] * (dr[c] - dl) : 0.f;
    }
    // dK += dS^T Q;  dQ += dS K.
    tile_gemm(kn, Dp, qn, s.dp, 1, bk, qr.data, qr.ld, s.dk, Dp, Dp, init, nullptr, queries_from);
    order.wait(q0 / t.bq);
    tile_gemm(qn, Dp, kn, s.dp, bk, 1, kr.data, kr.ld, a.dq.row(b, h, q0), a.dq.s[2], D,
              k0 == 0 ? Init::zero : Init::accumulate, nullptr, keys_upto);
    order.done(q0 / t.bq);
    first = false;
  }
  unpack_rows(a.dk.row(b, h, k0), a.dk.s[2], s.dk, Dp, kn, D);
  unpack_rows(a.dv.row(b, h, k0), a.dv.s[2], s.dv, Dp, kn, D);
}

}  // namespace triad::flash
