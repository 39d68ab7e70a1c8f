// DistEnv::from_environment: the rank side of the launcher's contract.
#include <gtest/gtest.h>

#include <cstdlib>

#include "triad/core/dist/dist_env.hpp"
#include "triad/core/error.hpp"

using triad::DistEnv;

namespace {

const char* kVars[] = {"RANK",        "LOCAL_RANK",  "WORLD_SIZE",     "LOCAL_WORLD_SIZE",
                       "MASTER_ADDR", "MASTER_PORT", "TRIAD_JOB_TOKEN"};

class DistEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved_.emplace_back(v, old);
      unsetenv(v);
    }
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
    for (auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }
  void set_job(const char* rank, const char* world) {
    setenv("RANK", rank, 1);
    setenv("WORLD_SIZE", world, 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("TRIAD_JOB_TOKEN", "abc", 1);
  }
  std::string error() {
    try {
      DistEnv::from_environment();
    } catch (const triad::UserError& e) {
      return e.what();
    }
    return "";
  }
  std::vector<std::pair<std::string, std::string>> saved_;
};

}  // namespace

TEST_F(DistEnvTest, NothingSetIsAWorldOfOne) {
  DistEnv e = DistEnv::from_environment();
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_FALSE(e.distributed());
}

TEST_F(DistEnvTest, ReadsEveryVariable) {
  set_job("5", "8");
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  DistEnv e = DistEnv::from_environment();
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.token, "abc");
  EXPECT_TRUE(e.distributed());
}

TEST_F(DistEnvTest, NoLocalVariablesMeansOneNode) {
  set_job("2", "3");
  DistEnv e = DistEnv::from_environment();
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 3);
}

TEST_F(DistEnvTest, MalformedOrInconsistentValuesNameTheVariable) {
  set_job("2x", "4");
  EXPECT_NE(error().find("RANK='2x' is not an integer"), std::string::npos);
  set_job("4", "4");
  EXPECT_NE(error().find("RANK=4 is outside 0..3"), std::string::npos);
  set_job("0", "0");
  EXPECT_NE(error().find("WORLD_SIZE=0"), std::string::npos);
  set_job("1", "4");
  setenv("LOCAL_RANK", "2", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  EXPECT_NE(error().find("LOCAL_RANK=2 is outside 0..1"), std::string::npos);
  unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_NE(error().find("LOCAL_WORLD_SIZE"), std::string::npos);
  unsetenv("LOCAL_RANK");
  setenv("MASTER_PORT", "70000", 1);
  EXPECT_NE(error().find("MASTER_PORT=70000"), std::string::npos);
}

TEST_F(DistEnvTest, HalfAJobIsRefused) {
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_NE(error().find("RANK is not"), std::string::npos);
  unsetenv("WORLD_SIZE");
  setenv("RANK", "1", 1);
  EXPECT_NE(error().find("WORLD_SIZE is not"), std::string::npos);
}

TEST_F(DistEnvTest, SeveralRanksNeedTheRendezvous) {
  set_job("0", "2");
  unsetenv("TRIAD_JOB_TOKEN");
  EXPECT_NE(error().find("TRIAD_JOB_TOKEN is not set"), std::string::npos);
  set_job("0", "2");
  unsetenv("MASTER_PORT");
  EXPECT_NE(error().find("MASTER_PORT is not set"), std::string::npos);
}
