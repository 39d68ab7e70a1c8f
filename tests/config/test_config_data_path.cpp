// data.kind indexed and data.path as a list (Megatron's blend syntax): read from YAML and from
// --set, written back by to_yaml, and every malformed list refused with the place and the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "triad/core/config/config.hpp"
#include "triad/core/error.hpp"

namespace triad {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DataPathConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("triad-config-data-path-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& data_section) {
    path_ = (dir_ / "run.yaml").string();
    std::ofstream(path_) << "model:\n  num_layers: 2\n  hidden_size: 64\n  num_attention_heads: "
                            "4\n  seq_length: 32\n"
                         << data_section;
    return path_;
  }
  Config load(const std::string& data_section, const std::vector<std::string>& sets = {}) {
    return load_config(write(data_section), sets);
  }
  std::string error(const std::string& data_section, const std::vector<std::string>& sets = {}) {
    try {
      load(data_section, sets);
    } catch (const UserError& e) {
      return e.what();
    }
    ADD_FAILURE() << "loaded without error";
    return "";
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(DataPathConfig, ListsInFlowAndBlockStyle) {
  Config c = load("data:\n  kind: indexed\n  path: [0.3, data/a_text_document, 0.7, data/b]\n");
  EXPECT_EQ(c.data.kind, "indexed");
  EXPECT_TRUE(c.data.path.empty());
  EXPECT_THAT(c.data.path_list, ElementsAre("0.3", "data/a_text_document", "0.7", "data/b"));
  c = load("data:\n  kind: indexed\n  path:\n    - data/a\n    - data/b\n");
  EXPECT_THAT(c.data.path_list, ElementsAre("data/a", "data/b"));
  c = load("data:\n  kind: indexed\n  path: data/a\n");
  EXPECT_EQ(c.data.path, "data/a");
  EXPECT_TRUE(c.data.path_list.empty());
}

TEST_F(DataPathConfig, OverridesReplaceEitherForm) {
  Config c = load("data:\n  kind: indexed\n  path: data/a\n", {"data.path=[1, x, 3, y]"});
  EXPECT_TRUE(c.data.path.empty());
  EXPECT_THAT(c.data.path_list, ElementsAre("1", "x", "3", "y"));
  c = load("data:\n  kind: indexed\n  path: [1, x, 3, y]\n", {"data.path=data/c"});
  EXPECT_EQ(c.data.path, "data/c");
  EXPECT_TRUE(c.data.path_list.empty());
}

TEST_F(DataPathConfig, ToYamlReadsBack) {
  const Config c = load("data:\n  kind: indexed\n  path: [0.25, 'a b/c', 0.75, d]\n");
  const std::string yaml = to_yaml(c);
  EXPECT_THAT(yaml, HasSubstr("path: [0.25, a b/c, 0.75, d]"));
  const std::string again = (dir_ / "again.yaml").string();
  std::ofstream(again) << yaml;
  const Config d = load_config(again, {});
  EXPECT_EQ(d.data.path_list, c.data.path_list);
  const std::string back = to_yaml(d);  // the same but for the "resolved from" comment
  EXPECT_EQ(back.substr(back.find("model:")), yaml.substr(yaml.find("model:")));
}

TEST_F(DataPathConfig, BadListsAreRefusedWithThePlace) {
  std::string msg = error("data:\n  kind: indexed\n  path: [0.3, a, b]\n");
  EXPECT_THAT(msg, AllOf(HasSubstr("data.path has 3 items, mixing weights (item 1, '0.3') and "
                                   "prefixes, but not in pairs (" +
                                   path_ + ":8:3)"),
                         HasSubstr("Megatron's --data-path syntax")));
  EXPECT_THAT(error("data:\n  kind: indexed\n  path: [0.3, a, b, 0.7]\n"),
              HasSubstr("item 3 ('b') should be a weight (a number) before the prefix"));
  EXPECT_THAT(error("data:\n  kind: indexed\n  path: [0.5, 1]\n"),
              HasSubstr("holds weights only, no dataset prefix"));
  EXPECT_THAT(error("data:\n  kind: indexed\n  path: [-1, a, 2, b]\n"),
              AllOf(HasSubstr("weight '-1' (item 1, for 'a') is not a positive number"),
                    HasSubstr("give each dataset a weight above 0")));
  EXPECT_THAT(error("data:\n  kind: indexed\n  path: [a, '']\n"), HasSubstr("item 2 is empty"));
  EXPECT_THAT(error("data:\n  kind: indexed\n  path: [a, {b: 1}]\n"),
              HasSubstr("data.path: item 2 of the list is a map"));
  EXPECT_THAT(error("data:\n  kind: indexed\n  path: {a: 1}\n"),
              HasSubstr("data.path: expected a text value or a list of them, got a map"));
  msg = error("data:\n  kind: tokens\n  path: [a, b]\n");
  EXPECT_THAT(msg, HasSubstr("data.path is a list (" + path_ +
                             ":8:3), which only data.kind indexed takes"));
  EXPECT_THAT(error("data:\n  kind: indexed\n"),
              HasSubstr("data.path is required for data.kind 'indexed'"));
  EXPECT_THAT(error("data:\n  kind: indexed\n  path: a\n", {"data.path=[0.3, a, b]"}),
              HasSubstr("(--set 'data.path=[0.3, a, b]')"));
}

TEST_F(DataPathConfig, RunPathsNeedBothFilesOfEachPrefix) {
  const std::string a = (dir_ / "a").string();
  std::ofstream(a + ".bin") << "";
  std::ofstream(a + ".idx") << "";
  Config c = load("data:\n  kind: indexed\n  path: [0.5, " + a + ", 0.5, " + a + "]\n");
  EXPECT_NO_THROW(check_run_paths(c, false));
  fs::remove(a + ".bin");
  try {
    check_run_paths(c, false);
    ADD_FAILURE() << "no error for a missing .bin";
  } catch (const UserError& e) {
    EXPECT_THAT(e.what(), HasSubstr("data.path '" + a + ".bin' (data.kind indexed, prefix '" + a +
                                    "') cannot be opened"));
  }
  c = load("data:\n  kind: indexed\n  path: " + a + ".idx\n");
  try {
    check_run_paths(c, false);
    ADD_FAILURE() << "no error for a prefix with its extension";
  } catch (const UserError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ends in .idx, but it is the prefix of the .bin/.idx pair; "
                                    "write '" +
                                    a + "'"));
  }
}

}  // namespace
}  // namespace triad
