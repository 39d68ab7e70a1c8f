// SLURM host lists and task counts, against hand-written expansions and, where SLURM is
// installed, against `scontrol show hostnames` itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "slurm.hpp"
#include "triad/core/error.hpp"

using triad::launch::expand_hostlist;
using triad::launch::expand_tasks_per_node;
using V = std::vector<std::string>;

TEST(Hostlist, RangesKeepTheirPadding) {
  EXPECT_EQ(expand_hostlist("node[01-03,7]"), (V{"node01", "node02", "node03", "node7"}));
  EXPECT_EQ(expand_hostlist("x[9-11]"), (V{"x9", "x10", "x11"}));
  EXPECT_EQ(expand_hostlist("x[098-101]"), (V{"x098", "x099", "x100", "x101"}));
}

TEST(Hostlist, PlainNamesAndListsMix) {
  EXPECT_EQ(expand_hostlist("localhost"), (V{"localhost"}));
  EXPECT_EQ(expand_hostlist("a,b[1-2],c"), (V{"a", "b1", "b2", "c"}));
  EXPECT_EQ(expand_hostlist("gpu-a100-[3,5]"), (V{"gpu-a100-3", "gpu-a100-5"}));
}

TEST(Hostlist, SeveralBracketsMultiply) {
  EXPECT_EQ(expand_hostlist("r[1-2]n[8-9]"), (V{"r1n8", "r1n9", "r2n8", "r2n9"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[8-9].ib"), (V{"r1n8.ib", "r1n9.ib", "r2n8.ib", "r2n9.ib"}));
}

TEST(Hostlist, BadSyntaxIsOneClearError) {
  for (const char* bad : {"node[01-", "node]", "node[3-1]", "node[a]", "a,,b", "n[1-2"}) {
    try {
      expand_hostlist(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const triad::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--master-addr"), std::string::npos) << e.what();
    }
  }
}

TEST(Hostlist, AgreesWithScontrol) {
  if (system("command -v scontrol >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "scontrol is not installed (apt-get install slurm-client)";
  // scontrol wants a configuration to start, any will do for hostnames.
  char dir[] = "/tmp/triad-hostlist-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string conf = std::string(dir) + "/slurm.conf";
  std::ofstream(conf) << "ClusterName=x\nSlurmctldHost=localhost\nNodeName=localhost\n";
  for (const std::string list :
       {"node[01-03,7],gpu5", "r[1-2]n[08-10]", "x[9-11],y", "c[001-003,010],login1"}) {
    std::string cmd = "SLURM_CONF=" + conf + " scontrol show hostnames '" + list + "' 2>&1";
    std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
    ASSERT_TRUE(p);
    V want;
    std::array<char, 256> line;
    while (fgets(line.data(), int(line.size()), p.get())) {
      std::string s(line.data());
      if (!s.empty() && s.back() == '\n') s.pop_back();
      want.push_back(s);
    }
    EXPECT_EQ(expand_hostlist(list), want) << list;
  }
  std::remove(conf.c_str());
  rmdir(dir);
}

TEST(TasksPerNode, RepeatCountsExpand) {
  EXPECT_EQ(expand_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("1,3(x2)"), (std::vector<int>{1, 3, 3}));
  EXPECT_THROW(expand_tasks_per_node("2(x"), triad::UserError);
  EXPECT_THROW(expand_tasks_per_node("two"), triad::UserError);
}
