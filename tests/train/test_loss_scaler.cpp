// The loss scaler's rules, step by step, against DeepSpeed's DynamicLossScaler as documented:
// halve after `hysteresis` overflows, double after loss_scale_window clean steps counted from the
// last overflow, never below min_loss_scale, and a run that overflows at the minimum stops.
#include <gtest/gtest.h>

#include <vector>

#include "triad/core/error.hpp"
#include "triad/core/train/loss_scaler.hpp"

using namespace triad;

namespace {

Fp16Config fp16(int power, int window, int hysteresis, double min_scale = 1) {
  Fp16Config f;
  f.enabled = true;
  f.initial_scale_power = power;
  f.loss_scale_window = window;
  f.hysteresis = hysteresis;
  f.min_loss_scale = min_scale;
  return f;
}

// Feeds the overflow flags; returns the scale each step ran with.
std::vector<double> scales(LossScaler& s, const std::vector<bool>& overflow) {
  std::vector<double> out;
  int step = 1;
  for (bool o : overflow) {
    out.push_back(s.scale());
    EXPECT_EQ(s.update(o, step++), o);
  }
  out.push_back(s.scale());
  return out;
}

}  // namespace

TEST(LossScaler, DisabledNeverSkips) {
  LossScaler s(Fp16Config{});
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.scale(), 1);
  EXPECT_FALSE(s.update(true, 1));
}

TEST(LossScaler, HysteresisThenHalvingThenGrowth) {
  LossScaler s(fp16(4, 2, 2));  // 16, window 2, two overflows before halving
  // step:                 1      2     3     4      5      6      7
  const auto got = scales(s, {false, true, true, false, false, false, true});
  // Step 1 is clean but (0 - (-1)) % 2 != 0: no growth. Step 2's overflow uses up the
  // hysteresis, step 3's halves (iteration 2 is the last overflow). Step 5 is the second clean
  // step after it, (4 - 2) % 2 == 0: doubled, and the hysteresis refilled; step 6 is odd again.
  // Step 7 overflows with the hysteresis refilled: skipped, no halving yet.
  const std::vector<double> want{16, 16, 16, 8, 8, 16, 16, 16};
  EXPECT_EQ(got, want);
  EXPECT_EQ(s.state().skipped, 3);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScaler s(fp16(4, 100, 2));
  Fp16Config c = fp16(4, 100, 2);
  c.consecutive_hysteresis = true;
  LossScaler r(c);
  // overflow, clean, overflow: without refilling the second overflow halves; with it, not.
  EXPECT_EQ(scales(s, {true, false, true}), (std::vector<double>{16, 16, 16, 8}));
  EXPECT_EQ(scales(r, {true, false, true}), (std::vector<double>{16, 16, 16, 16}));
}

TEST(LossScaler, StaticScaleSkipsAndStays) {
  Fp16Config c = fp16(4, 1, 1);
  c.loss_scale = 128;
  LossScaler s(c);
  EXPECT_FALSE(s.dynamic());
  EXPECT_EQ(scales(s, {false, true, false}), (std::vector<double>{128, 128, 128, 128}));
  EXPECT_EQ(s.state().skipped, 1);
}

TEST(LossScaler, NeverBelowTheMinimumAndStopsThere) {
  LossScaler s(fp16(2, 1000, 1, 2));  // 4, minimum 2
  EXPECT_EQ(scales(s, {true}), (std::vector<double>{4, 2}));
  try {
    s.update(true, 7);
    FAIL() << "an overflow at the minimum scale went on";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("step 7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fp16.min_loss_scale"), std::string::npos) << e.what();
  }
}

// Megatron's DynamicGradScaler: at its minimum the scale stays and every overflow is skipped.
TEST(LossScaler, MegatronsScalerStaysAtTheMinimum) {
  Fp16Config f = fp16(2, 3, 1, 2);  // 4, minimum 2, doubling after 3 clean steps
  f.raise_error_at_min_scale = false;
  LossScaler s(f);
  EXPECT_EQ(scales(s, {true, true, true, false, false, false}),
            (std::vector<double>{4, 2, 2, 2, 2, 2, 4}));
  EXPECT_EQ(s.state().skipped, 3);
}

TEST(LossScaler, StateRoundTripsThroughJson) {
  LossScaler s(fp16(10, 3, 2));
  scales(s, {true, true, false, false});
  const LossScaler::State back = LossScaler::from_json(LossScaler::to_json(s.state()));
  EXPECT_EQ(back.scale, s.state().scale);
  EXPECT_EQ(back.hysteresis_left, s.state().hysteresis_left);
  EXPECT_EQ(back.iter, s.state().iter);
  EXPECT_EQ(back.last_overflow, s.state().last_overflow);
  EXPECT_EQ(back.skipped, s.state().skipped);
  LossScaler t(fp16(10, 3, 2));
  t.restore(back);
  EXPECT_EQ(scales(t, {false, false, true}), scales(s, {false, false, true}));
}

// A checkpoint saved under fp16.hysteresis 3 resumed with 2: the second overflow halves the
// scale, as this run's setting says, not the third as the saved state would have it.
TEST(LossScaler, RestoreKeepsTheHysteresisOfThisRun) {
  LossScaler s(fp16(10, 1000, 3));
  LossScaler t(fp16(10, 1000, 2));
  t.restore(s.state());
  EXPECT_EQ(t.state().hysteresis_left, 2);
  EXPECT_EQ(scales(t, {true, true}), (std::vector<double>{1024, 1024, 512}));
}
