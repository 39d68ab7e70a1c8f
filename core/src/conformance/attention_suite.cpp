// The attention conformance suite. Every case builds its tensors the way the model does
// (contiguous, or q/k/v as views into one (B,T,3,H,D) buffer), runs the plugin through
// AttentionBackend and compares with reference_attention() in double precision.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>

#include "triad/core/conformance/conformance.hpp"
#include "triad/core/error.hpp"

namespace triad::conformance {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A (B, H, T, D) fp32 view into a buffer. The DLTensor points into this object: build the
// View in place and call tensor() after it stops moving.
struct View {
  float* base = nullptr;
  int64_t offset = 0;  // elements from base to element (0,0,0,0), passed as byte_offset
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t strides[4] = {0, 0, 0, 1};
  bool compact = false;  // pass strides = NULL (DLPack's "row-major compact")
  DLTensor dl{};

  float* row(int64_t b, int64_t h, int64_t t) const {
    return base + offset + b * strides[0] + h * strides[1] + t * strides[2];
  }
  DLTensor* tensor() {
    dl.data = base;
    dl.device = {kDLCPU, 0};
    dl.ndim = 4;
    dl.dtype = {kDLFloat, 32, 1};
    dl.shape = shape;
    dl.strides = compact ? nullptr : strides;
    dl.byte_offset = static_cast<uint64_t>(offset) * sizeof(float);
    return &dl;
  }
};

View make_view(float* base, int64_t offset, const int64_t (&n)[4], int64_t sb, int64_t sh,
               int64_t st, bool compact) {
  View v;
  v.base = base;
  v.offset = offset;
  std::memcpy(v.shape, n, sizeof(v.shape));
  v.strides[0] = sb, v.strides[1] = sh, v.strides[2] = st, v.strides[3] = 1;
  v.compact = compact;
  return v;
}

View contiguous(std::vector<float>& mem, const int64_t (&n)[4]) {
  return make_view(mem.data(), 0, n, n[1] * n[2] * n[3], n[2] * n[3], n[3], true);
}

void scatter(const std::vector<float>& logical, const View& v) {
  const int64_t B = v.shape[0], H = v.shape[1], T = v.shape[2], D = v.shape[3];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(v.row(b, h, t), &logical[((b * H + h) * T + t) * D], D * sizeof(float));
}

std::vector<float> gather(const View& v) {
  const int64_t B = v.shape[0], H = v.shape[1], T = v.shape[2], D = v.shape[3];
  std::vector<float> out(B * H * T * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(&out[((b * H + h) * T + t) * D], v.row(b, h, t), D * sizeof(float));
  return out;
}

// The scratch memory handed to the plugin: exactly the bytes it asked for, 64-byte aligned,
// filled with NaN bytes (a plugin must not count on zeroed scratch), followed by a guard
// that must survive the call.
class Workspace {
 public:
  explicit Workspace(size_t bytes) : bytes_(bytes), mem_(bytes + kGuard + kAlign) {
    auto addr = reinterpret_cast<uintptr_t>(mem_.data());
    start_ = mem_.data() + (kAlign - addr % kAlign) % kAlign;
    std::memset(start_, 0xFF, bytes_);
    std::memset(start_ + bytes_, kPattern, kGuard);
  }
  void* ptr() { return start_; }
  size_t bytes() const { return bytes_; }
  bool guard_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (start_[bytes_ + i] != static_cast<unsigned char>(kPattern)) return false;
    return true;
  }

 private:
  static constexpr size_t kGuard = 4096, kAlign = 64;
  static constexpr int kPattern = 0xA5;
  size_t bytes_;
  std::vector<unsigned char> mem_;
  unsigned char* start_;
};

// Every buffer of one case. Contiguous: one (B,H,T,D) buffer per tensor. Strided, as the
// model lays them out: q, k, v (and dq, dk, dv) interleaved in one (B,T,3,H,D) buffer,
// out and dout in (B,T,H,D).
struct Buffers {
  std::vector<float> q_mem, k_mem, v_mem, out_mem, dout_mem, dq_mem, dk_mem, dv_mem, lse;
  View q, k, v, out, dout, dq, dk, dv;
  int64_t lse_shape[3] = {0, 0, 0};
  DLTensor lse_dl{};

  Buffers(int64_t B, int64_t H, int64_t T, int64_t D, bool strided) {
    const int64_t n[4] = {B, H, T, D};
    const size_t numel = B * H * T * D;
    lse.assign(B * H * T, kNaN);
    lse_shape[0] = B, lse_shape[1] = H, lse_shape[2] = T;
    if (!strided) {
      for (auto* m : {&q_mem, &k_mem, &v_mem, &out_mem, &dout_mem, &dq_mem, &dk_mem, &dv_mem})
        m->assign(numel, kNaN);
      q = contiguous(q_mem, n), k = contiguous(k_mem, n), v = contiguous(v_mem, n);
      out = contiguous(out_mem, n), dout = contiguous(dout_mem, n);
      dq = contiguous(dq_mem, n), dk = contiguous(dk_mem, n), dv = contiguous(dv_mem, n);
      return;
    }
    q_mem.assign(3 * numel, kNaN);   // qkv
    dq_mem.assign(3 * numel, kNaN);  // dqkv
    out_mem.assign(numel, kNaN);
    dout_mem.assign(numel, kNaN);
    const int64_t sb3 = T * 3 * H * D, st3 = 3 * H * D;
    q = make_view(q_mem.data(), 0, n, sb3, D, st3, false);
    k = make_view(q_mem.data(), H * D, n, sb3, D, st3, false);
    v = make_view(q_mem.data(), 2 * H * D, n, sb3, D, st3, false);
    dq = make_view(dq_mem.data(), 0, n, sb3, D, st3, false);
    dk = make_view(dq_mem.data(), H * D, n, sb3, D, st3, false);
    dv = make_view(dq_mem.data(), 2 * H * D, n, sb3, D, st3, false);
    out = make_view(out_mem.data(), 0, n, T * H * D, D, H * D, false);
    dout = make_view(dout_mem.data(), 0, n, T * H * D, D, H * D, false);
  }
  Buffers(const Buffers&) = delete;

  DLTensor* lse_tensor() {
    lse_dl.data = lse.data();
    lse_dl.device = {kDLCPU, 0};
    lse_dl.ndim = 3;
    lse_dl.dtype = {kDLFloat, 32, 1};
    lse_dl.shape = lse_shape;
    lse_dl.strides = nullptr;
    lse_dl.byte_offset = 0;
    return &lse_dl;
  }
  // Snapshot of every input buffer, to prove the plugin left them alone.
  std::vector<std::vector<float>> inputs() const { return {q_mem, k_mem, v_mem, dout_mem}; }
};

struct ShapeCase {
  int64_t B, H, T, D;
  bool causal, strided;
};

std::string describe(const ShapeCase& c) {
  std::ostringstream os;
  os << "B=" << c.B << " H=" << c.H << " T=" << c.T << " D=" << c.D
     << (c.causal ? " causal" : " non-causal") << (c.strided ? " strided" : " contiguous");
  return os.str();
}

triad_attention_shape_v1 shape_of(const ShapeCase& c) {
  triad_attention_shape_v1 s{};
  s.batch = c.B, s.heads = c.H, s.seq_len = c.T, s.head_dim = c.D;
  s.causal = c.causal;
  s.dtype = {kDLFloat, 32, 1};
  s.device = {kDLCPU, 0};
  return s;
}

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1e", x);
  return buf;
}

// max|got - ref| / max(max|ref|, floor); infinity (and a note) if got has a non-finite value.
double rel_error(const std::vector<float>& got, const std::vector<double>& ref, double floor,
                 std::string* note) {
  double worst = 0.0, scale = floor;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      *note = "non-finite value at element " + std::to_string(i) + " (not written?)";
      return std::numeric_limits<double>::infinity();
    }
    worst = std::max(worst, std::abs(got[i] - ref[i]));
  }
  return worst / scale;
}

// Compares each named tensor; appends "name err" to detail, returns false if any is over tol.
bool compare(const std::vector<std::pair<std::string, double>>& errs,
             const std::vector<std::string>& notes, double tol, std::string* detail) {
  bool ok = true;
  for (size_t i = 0; i < errs.size(); ++i) {
    if (!detail->empty()) *detail += ", ";
    *detail += errs[i].first + " " + sci(errs[i].second);
    if (!(errs[i].second <= tol)) {
      ok = false;
      *detail += " > " + sci(tol) + (notes[i].empty() ? "" : " [" + notes[i] + "]");
    }
  }
  return ok;
}

AttentionProblem make_problem(const ShapeCase& c) {
  AttentionProblem p;
  p.B = c.B, p.H = c.H, p.T = c.T, p.D = c.D;
  p.causal = c.causal;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.D)));
  std::mt19937 rng(static_cast<uint32_t>(c.B * 1000003 + c.H * 10007 + c.T * 101 + c.D));
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto* x : {&p.q, &p.k, &p.v, &p.dout}) {
    x->resize(c.B * c.H * c.T * c.D);
    for (auto& e : *x) e = normal(rng);
  }
  return p;
}

// Forward then backward on one shape; grads are prefilled with `grad_fill` to show that
// backward overwrites them.
CaseResult run_shape(AttentionBackend& be, const ShapeCase& c, double tol, float grad_fill,
                     const std::string& name) {
  CaseResult r{name, Outcome::kPass, ""};
  auto fail = [&](const std::string& why) {
    r.outcome = Outcome::kFail;
    r.detail = why;
    return r;
  };
  const triad_attention_shape_v1 shape = shape_of(c);
  try {
    be.check_supported(shape);
  } catch (const UserError& e) {
    return {name, Outcome::kSkip, e.what()};
  }
  size_t fwd_bytes = 0, bwd_bytes = 0;
  try {
    be.workspace_size(shape, &fwd_bytes, &bwd_bytes);
  } catch (const std::exception& e) {
    return fail(e.what());
  }

  const AttentionProblem p = make_problem(c);
  const AttentionReference ref = reference_attention(p);
  Buffers buf(c.B, c.H, c.T, c.D, c.strided);
  scatter(p.q, buf.q), scatter(p.k, buf.k), scatter(p.v, buf.v), scatter(p.dout, buf.dout);
  const auto inputs_before = buf.inputs();

  Workspace fws(fwd_bytes);
  triad_attention_fwd_args_v1 fa{buf.q.tensor(),
                                 buf.k.tensor(),
                                 buf.v.tensor(),
                                 buf.out.tensor(),
                                 buf.lse_tensor(),
                                 c.causal,
                                 static_cast<float>(p.scale),
                                 fws.ptr(),
                                 fws.bytes()};
  int s = be.try_forward(fa);
  if (s != TRIAD_OK)
    return fail("forward returned " + status_name(s) +
                " for a shape its capabilities accept: " + be.last_error());
  if (!fws.guard_intact())
    return fail("forward wrote past the " + std::to_string(fwd_bytes) +
                " workspace bytes it asked for");
  if (buf.inputs() != inputs_before) return fail("forward modified q, k or v");

  // Errors are relative to the largest reference value, but never to less than kFloor: with
  // T = 1 the exact dq and dk are zero.
  constexpr double kFloor = 1e-3;
  std::string detail, n_out, n_lse;
  const double e_out = rel_error(gather(buf.out), ref.out, kFloor, &n_out);
  const double e_lse = rel_error(buf.lse, ref.lse, 1.0, &n_lse);
  if (!compare({{"out", e_out}, {"lse", e_lse}}, {n_out, n_lse}, tol, &detail))
    return fail("forward: " + detail);

  for (View* g : {&buf.dq, &buf.dk, &buf.dv}) {
    std::vector<float> fill(c.B * c.H * c.T * c.D, grad_fill);
    scatter(fill, *g);
  }
  const auto out_before = buf.out_mem;
  const auto lse_before = buf.lse;
  Workspace bws(bwd_bytes);
  triad_attention_bwd_args_v1 ba{buf.q.tensor(),
                                 buf.k.tensor(),
                                 buf.v.tensor(),
                                 buf.out.tensor(),
                                 buf.lse_tensor(),
                                 buf.dout.tensor(),
                                 buf.dq.tensor(),
                                 buf.dk.tensor(),
                                 buf.dv.tensor(),
                                 c.causal,
                                 static_cast<float>(p.scale),
                                 bws.ptr(),
                                 bws.bytes()};
  s = be.try_backward(ba);
  if (s != TRIAD_OK)
    return fail("backward returned " + status_name(s) +
                " for a shape its capabilities accept: " + be.last_error());
  if (!bws.guard_intact())
    return fail("backward wrote past the " + std::to_string(bwd_bytes) +
                " workspace bytes it asked for");
  if (buf.inputs() != inputs_before || buf.out_mem != out_before ||
      std::memcmp(buf.lse.data(), lse_before.data(), lse_before.size() * sizeof(float)) != 0)
    return fail("backward modified one of its inputs (q, k, v, out, lse, dout)");

  std::string n_dq, n_dk, n_dv, gdetail;
  const double e_dq = rel_error(gather(buf.dq), ref.dq, kFloor, &n_dq);
  const double e_dk = rel_error(gather(buf.dk), ref.dk, kFloor, &n_dk);
  const double e_dv = rel_error(gather(buf.dv), ref.dv, kFloor, &n_dv);
  const bool ok =
      compare({{"dq", e_dq}, {"dk", e_dk}, {"dv", e_dv}}, {n_dq, n_dk, n_dv}, tol, &gdetail);
  r.detail = detail + ", " + gdetail;
  if (!ok)
    return fail("backward: " + gdetail +
                (grad_fill != 0.f && !std::isnan(grad_fill)
                     ? " (did it accumulate into the prefilled "
                       "gradients instead of overwriting?)"
                     : ""));
  return r;
}

// A shape the plugin accepts, for the checks that are not about shapes.
std::optional<ShapeCase> pick_supported(const AttentionBackend& be) {
  const auto& caps = be.capabilities();
  std::vector<int64_t> dims = {64, 32, 128, 80};
  for (int i = 0; i < caps.num_head_dims && i < TRIAD_ATTENTION_MAX_HEAD_DIMS; ++i)
    dims.push_back(caps.head_dims[i]);
  if (caps.max_head_dim > 0) dims.push_back(caps.max_head_dim);
  for (int64_t D : dims)
    for (bool causal : {true, false}) {
      ShapeCase c{1, 2, 9, D, causal, false};
      try {
        be.check_supported(shape_of(c));
        return c;
      } catch (const UserError&) {
      }
    }
  return std::nullopt;
}

// Malformed arguments: the plugin must answer with a status (and a message), not crash.
// Buffers are oversized so a plugin that skips a check still stays in bounds.
void run_bad_inputs(AttentionBackend& be, const ShapeCase& c, Summary& sum,
                    const AttentionSuiteOptions& o) {
  const int64_t B = c.B, H = c.H, T = c.T, D = c.D;
  const triad_attention_shape_v1 shape = shape_of(c);
  size_t fwd_bytes = 0, bwd_bytes = 0;
  be.workspace_size(shape, &fwd_bytes, &bwd_bytes);
  const size_t room = B * H * (T + 2) * (D + 2);
  std::vector<float> q(room), k(room), v(room), out(room), dout(room), dq(room), dk(room), dv(room),
      lse(room);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto* x : {&q, &k, &v, &dout})
    for (auto& e : *x) e = normal(rng);
  const int64_t n[4] = {B, H, T, D};
  View vq = contiguous(q, n), vk = contiguous(k, n), vv = contiguous(v, n), vo = contiguous(out, n),
       vdo = contiguous(dout, n), vdq = contiguous(dq, n), vdk = contiguous(dk, n),
       vdv = contiguous(dv, n);
  int64_t lse_shape[3] = {B, H, T};
  DLTensor tl{lse.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, lse_shape, nullptr, 0};
  Workspace fws(fwd_bytes + 64), bws(bwd_bytes + 64);
  const float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  auto fwd_args = [&] {
    return triad_attention_fwd_args_v1{vq.tensor(), vk.tensor(), vv.tensor(), vo.tensor(), &tl,
                                       c.causal,    scale,       fws.ptr(),   fwd_bytes};
  };
  auto bwd_args = [&] {
    return triad_attention_bwd_args_v1{
        vq.tensor(),  vk.tensor(),  vv.tensor(), vo.tensor(), &tl,       vdo.tensor(), vdq.tensor(),
        vdk.tensor(), vdv.tensor(), c.causal,    scale,       bws.ptr(), bwd_bytes};
  };
  auto report = [&](CaseResult r) {
    sum.add(r.outcome);
    if (o.on_case) o.on_case(r);
  };
  // Expects a failing status (one of `allowed`, or any non-zero if empty) and a message.
  auto expect = [&](const std::string& what, int status, std::vector<int> allowed) {
    CaseResult r{"rejects " + what, Outcome::kPass, ""};
    bool ok = status != TRIAD_OK;
    if (ok && !allowed.empty())
      ok = std::find(allowed.begin(), allowed.end(), status) != allowed.end();
    std::string msg = status != TRIAD_OK ? be.last_error() : "";
    if (!ok) {
      std::string want;
      for (int a : allowed) want += (want.empty() ? "" : " or ") + status_name(a);
      r.outcome = Outcome::kFail;
      r.detail = "returned " + status_name(status) + ", expected " +
                 (want.empty() ? "an error status" : want);
    } else if (msg.empty() || msg == "no message") {
      r.outcome = Outcome::kFail;
      r.detail = "returned " + status_name(status) + " but last_error() gave no message";
    } else {
      r.detail = status_name(status) + ": " + msg;
    }
    report(r);
  };

  const std::string name = "forward on a valid " + describe(c);
  int s = be.try_forward(fwd_args());
  if (s != TRIAD_OK) {
    report({name, Outcome::kFail, "returned " + status_name(s) + ": " + be.last_error()});
    return;
  }
  const std::vector<int> kInvalid = {TRIAD_ERR_INVALID};
  {
    auto a = fwd_args();
    vk.shape[2] = T - 1;
    a.k = vk.tensor();
    expect("k with T-1 rows while q has T (forward)", be.try_forward(a), kInvalid);
    vk.shape[2] = T;
  }
  {
    auto a = fwd_args();
    lse_shape[2] = T - 1;
    expect("lse of shape (B,H,T-1) (forward)", be.try_forward(a), kInvalid);
    lse_shape[2] = T;
  }
  {
    auto a = fwd_args();
    a.out = nullptr;
    expect("a null out tensor (forward)", be.try_forward(a), kInvalid);
  }
  {
    auto a = fwd_args();
    vq.tensor()->dtype = {kDLInt, 32, 1};
    a.q = &vq.dl;
    expect("q of dtype int32 (forward)", be.try_forward(a),
           {TRIAD_ERR_INVALID, TRIAD_ERR_UNSUPPORTED});
  }
  {
    vq.compact = false;
    vq.strides[3] = 2;
    vq.shape[3] = D / 2;
    vk.shape[3] = vv.shape[3] = vo.shape[3] = D / 2;
    auto a = fwd_args();
    expect("q with stride 2 along D (forward)", be.try_forward(a),
           {TRIAD_ERR_INVALID, TRIAD_ERR_UNSUPPORTED});
    vq = contiguous(q, n), vk = contiguous(k, n), vv = contiguous(v, n), vo = contiguous(out, n);
  }
  if (fwd_bytes > 0) {
    auto a = fwd_args();
    a.workspace_bytes = fwd_bytes - 1;
    expect("a workspace one byte smaller than asked for (forward)", be.try_forward(a), {});
  } else {
    report({"rejects a too small workspace (forward)", Outcome::kSkip,
            "the plugin asks for no forward workspace"});
  }
  s = be.try_forward(fwd_args());  // restore a valid out/lse for backward
  {
    auto a = bwd_args();
    vdq.shape[3] = D - 1;
    a.dq = vdq.tensor();
    expect("dq with head dim D-1 (backward)", be.try_backward(a), kInvalid);
    vdq = contiguous(dq, n);
  }
  {
    auto a = bwd_args();
    a.dout = nullptr;
    expect("a null dout tensor (backward)", be.try_backward(a), kInvalid);
  }
  if (bwd_bytes > 0) {
    auto a = bwd_args();
    a.workspace_bytes = bwd_bytes - 1;
    expect("a workspace one byte smaller than asked for (backward)", be.try_backward(a), {});
  } else {
    report({"rejects a too small workspace (backward)", Outcome::kSkip,
            "the plugin asks for no backward workspace"});
  }
}

}  // namespace

std::string format_summary(const Summary& s) {
  return std::to_string(s.passed) + " passed, " + std::to_string(s.failed) + " failed, " +
         std::to_string(s.skipped) + " skipped";
}

std::string format_case(const CaseResult& r) {
  switch (r.outcome) {
    case Outcome::kPass:
      return "PASS " + r.name + (r.detail.empty() ? "" : " (" + r.detail + ")");
    case Outcome::kFail:
      return "FAIL " + r.name + ": " + r.detail;
    default:
      return "SKIP " + r.name + ": " + r.detail;
  }
}

Summary run_attention_suite(AttentionBackend& be, const AttentionSuiteOptions& o) {
  Summary sum;
  auto report = [&](const CaseResult& r) {
    sum.add(r.outcome);
    if (o.on_case) o.on_case(r);
  };
  // Lengths that are not multiples of any block size a tiled kernel would use.
  const std::vector<int64_t> lengths =
      o.quick ? std::vector<int64_t>{1, 7, 65} : std::vector<int64_t>{1, 7, 63, 65, 129, 257};
  const std::vector<int64_t> dims =
      o.quick ? std::vector<int64_t>{32, 80} : std::vector<int64_t>{32, 64, 80, 128};
  const std::pair<int64_t, int64_t> batch_heads[] = {{1, 1}, {2, 3}};
  for (int64_t T : lengths)
    for (int64_t D : dims)
      for (auto [B, H] : batch_heads)
        for (bool causal : {true, false})
          for (bool strided : {false, true}) {
            ShapeCase c{B, H, T, D, causal, strided};
            report(run_shape(be, c, o.tolerance, kNaN, "fwd+bwd " + describe(c)));
          }

  auto pick = pick_supported(be);
  if (!pick) {
    report({"argument checks", Outcome::kSkip, "no fp32 CPU shape is supported by this plugin"});
    return sum;
  }
  ShapeCase c = *pick;
  c.B = 2, c.T = 33, c.strided = true;
  report(run_shape(be, c, o.tolerance, 1e4f,
                   "backward overwrites dq, dk, dv prefilled with 1e4 (" + describe(c) + ")"));
  try {
    run_bad_inputs(be, *pick, sum, o);
  } catch (const std::exception& e) {
    report({"argument checks", Outcome::kFail, e.what()});
  }
  return sum;
}

}  // namespace triad::conformance
