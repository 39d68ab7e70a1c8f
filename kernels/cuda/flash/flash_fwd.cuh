// The forward step shared by flash1 and flash2: one warp, MT m-tiles of 16 query rows against one
// K/V block of Bc keys already in shared memory. S = Q K^T, online softmax (running max m in
// log2 units, running row sum l, per-thread partial sums), O = O * alpha + P V.
#pragma once

#include "flash_common.cuh"

namespace triad::kernels::cuda::flash::detail {

template <int D, int Br, int Bc, int W>
struct FwdConfig {
  static constexpr int kThreads = 32 * W;
  static constexpr int kMT = Br / (16 * W);  // m-tiles per warp
  static_assert(kMT * 16 * W == Br, "Br must be a multiple of 16 * warps");
  static_assert(Bc % 16 == 0 && D % 16 == 0, "tile sizes");
};

// Forward tile sizes per head dim: (Br, Bc, warps). The K/V block can be set at build time
// (for tuning runs).
#ifndef TRIAD_FLASH_FWD_BC_D64
#define TRIAD_FLASH_FWD_BC_D64 64
#endif
#ifndef TRIAD_FLASH_FWD_BC_D128
#define TRIAD_FLASH_FWD_BC_D128 64
#endif
// kQRegs: each warp keeps its Q fragments in registers for all K/V blocks instead of reloading
// them from shared memory (32 registers at D = 64; too many at D = 128).
#ifndef TRIAD_FLASH_FWD_QREGS_D64
#define TRIAD_FLASH_FWD_QREGS_D64 1
#endif
template <int D>
struct FwdTiles;
template <>
struct FwdTiles<64> {
  static constexpr int kBr = 128, kBc = TRIAD_FLASH_FWD_BC_D64, kWarps = 4;
  static constexpr bool kQRegs = TRIAD_FLASH_FWD_QREGS_D64 != 0;
};
template <>
struct FwdTiles<128> {
  static constexpr int kBr = 128, kBc = TRIAD_FLASH_FWD_BC_D128, kWarps = 4;
  static constexpr bool kQRegs = false;
};

template <typename T, int D, int Bc, int MT, bool kQRegs = false>
struct FwdWarp {
  float o[MT][D / 8][4];
  float m[MT][2];
  float l[MT][2];
  uint32_t qf[kQRegs ? MT : 1][kQRegs ? D / 16 : 1][4];  // Q fragments when kQRegs

  // With kQRegs, call after the Q tile has landed (and before step).
  __device__ __forceinline__ void load_q(uint32_t sQ, int warp_row, int lane) {
    if constexpr (kQRegs) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          ldsm4(qf[mt][kk], a_addr<D>(sQ, warp_row + mt * 16, kk * 16, lane));
        }
      }
    }
  }

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][nd][e] = 0.f;
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        m[mt][r] = -INFINITY;
        l[mt][r] = 0.f;
      }
    }
  }

  // sQ: the Q tile (rows from warp_row); sK, sV: the K/V block; row0: global index of the warp's
  // first query row; n0: global index of the block's first key. mask: apply the causal / tail
  // mask (keys >= seq_len, keys > row when causal).
  __device__ __forceinline__ void step(uint32_t sQ, int warp_row, uint32_t sK, uint32_t sV,
                                       int lane, bool mask, int row0, int n0, int seq_len,
                                       bool causal, float scale_log2) {
    float s[MT][Bc / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nb = 0; nb < Bc / 8; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nb][e] = 0.f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kQRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = qf[mt][kk][e];
        } else {
          ldsm4(a[mt], a_addr<D>(sQ, warp_row + mt * 16, kk * 16, lane));
        }
      }
#pragma unroll
      for (int nb2 = 0; nb2 < Bc / 16; ++nb2) {
        uint32_t b[4];
        ldsm4(b, bn_addr<D>(sK, nb2 * 16, kk * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Elem<T>::mma(s[mt][2 * nb2], a[mt], b[0], b[1]);
          Elem<T>::mma(s[mt][2 * nb2 + 1], a[mt], b[2], b[3]);
        }
      }
    }
    const int g = lane >> 2, t = lane & 3;
    if (mask) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nb = 0; nb < Bc / 8; ++nb) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = row0 + mt * 16 + g + (e >> 1) * 8;
            const int col = n0 + nb * 8 + 2 * t + (e & 1);
            if (col >= seq_len || (causal && col > row)) s[mt][nb][e] = -INFINITY;
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < Bc / 8; ++nb) {
          mx = fmaxf(mx, fmaxf(s[mt][nb][2 * r], s[mt][nb][2 * r + 1]));
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[mt][r], mx * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = ex2(m[mt][r] - m_use);
        m[mt][r] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nb = 0; nb < Bc / 8; ++nb) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = ex2(fmaf(s[mt][nb][2 * r + e], scale_log2, -m_use));
            s[mt][nb][2 * r + e] = pv;
            sum += pv;
          }
        }
        l[mt][r] = l[mt][r] * alpha + sum;
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd) {
          o[mt][nd][2 * r] *= alpha;
          o[mt][nd][2 * r + 1] *= alpha;
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = Elem<T>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = Elem<T>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = Elem<T>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = Elem<T>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int nd2 = 0; nd2 < D / 16; ++nd2) {
        uint32_t b[4];
        ldsm4t(b, bt_addr<D>(sV, kk * 16, nd2 * 16, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Elem<T>::mma(o[mt][2 * nd2], a[mt], b[0], b[1]);
          Elem<T>::mma(o[mt][2 * nd2 + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

  // Full row sums (all four lanes of a row get the total). Every lane must call it.
  __device__ __forceinline__ void reduce_l(float (&lsum)[MT][2]) const {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float x = l[mt][r];
        x += __shfl_xor_sync(0xffffffffu, x, 1);
        x += __shfl_xor_sync(0xffffffffu, x, 2);
        lsum[mt][r] = x;
      }
    }
  }

  // Normalise and store O rows < seq_len (out points at row 0 of the (b, h) slice) and their lse.
  __device__ __forceinline__ void write_out(T* out, int64_t ost, float* lse_bh, int row0,
                                            int seq_len, int lane) const {
    float lsum[MT][2];
    reduce_l(lsum);
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + mt * 16 + g + 8 * r;
        if (row >= seq_len) continue;
        const float inv = lsum[mt][r] > 0.f ? 1.f / lsum[mt][r] : 0.f;
        T* orow = out + static_cast<int64_t>(row) * ost + 2 * t;
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd) {
          *reinterpret_cast<uint32_t*>(orow + nd * 8) =
              Elem<T>::pack(o[mt][nd][2 * r] * inv, o[mt][nd][2 * r + 1] * inv);
        }
        if (t == 0) {
          lse_bh[row] = lsum[mt][r] > 0.f ? (m[mt][r] + log2f(lsum[mt][r])) * kLn2 : -INFINITY;
        }
      }
    }
  }
};

}  // namespace triad::kernels::cuda::flash::detail
