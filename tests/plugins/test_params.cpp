// resolve_params: a plugin's YAML section checked against the schema it declares.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iterator>

#include "test_helpers.hpp"
#include "triad/core/plugins/plugin_loader.hpp"

namespace triad {
namespace {

using test::user_error;
using ::testing::AllOf;
using ::testing::HasSubstr;

const triad_param_spec_v1 kSpecs[] = {
    {"block_q", TRIAD_PARAM_INT, "64", "queries per tile"},
    {"block_k", TRIAD_PARAM_INT, "64", "keys per tile"},
    {"softmax_scale", TRIAD_PARAM_FLOAT, "0.125", "score scale"},
    {"deterministic", TRIAD_PARAM_BOOL, "false", "fixed reduction order"},
    {"impl", TRIAD_PARAM_STRING, "auto", "kernel variant"},
};

triad_plugin_v1 descriptor(const triad_param_spec_v1* specs, size_t n) {
  triad_plugin_v1 d{};
  d.abi_version = TRIAD_ABI_VERSION_1;
  d.kind = "attention";
  d.name = "flashy";
  d.version = "1";
  d.description = "test";
  d.num_params = n;
  d.params = specs;
  return d;
}

TEST(ResolveParams, DefaultsFillEveryDeclaredParameter) {
  auto d = descriptor(kSpecs, std::size(kSpecs));
  ResolvedParams r = resolve_params(d, {}, "attention");
  EXPECT_EQ(r.values(), (std::map<std::string, std::string>{{"block_q", "64"},
                                                            {"block_k", "64"},
                                                            {"softmax_scale", "0.125"},
                                                            {"deterministic", "false"},
                                                            {"impl", "auto"}}));
  const triad_params_v1* c = r.c_view();
  ASSERT_EQ(c->count, 5u);
  EXPECT_STREQ(c->items[0].name, "block_k");
  EXPECT_STREQ(c->items[0].value, "64");
}

TEST(ResolveParams, GivenValuesAreCanonicalised) {
  auto d = descriptor(kSpecs, std::size(kSpecs));
  ResolvedParams r = resolve_params(
      d,
      {{"block_q", " +032 "}, {"softmax_scale", "1e-1"}, {"deterministic", "Yes"}, {"impl", " v2"}},
      "attention");
  EXPECT_EQ(r.values().at("block_q"), "32");
  EXPECT_EQ(r.values().at("block_k"), "64");
  EXPECT_EQ(r.values().at("softmax_scale"), "0.1");
  EXPECT_EQ(r.values().at("deterministic"), "true");
  EXPECT_EQ(r.values().at("impl"), " v2");  // strings are passed as written
  EXPECT_EQ(resolve_params(d, {{"deterministic", "off"}}, "a").values().at("deterministic"),
            "false");
}

TEST(ResolveParams, UnknownKeyNamesThePathAndTheClosestName) {
  auto d = descriptor(kSpecs, std::size(kSpecs));
  std::string msg = user_error([&] { resolve_params(d, {{"blok_q", "64"}}, "attention"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("attention.blok_q: unknown parameter of attention plugin "
                                   "'flashy'"),
                         HasSubstr("did you mean 'block_q'?"), HasSubstr("valid: block_q, block_k"),
                         HasSubstr("triad-info --kind attention"),
                         HasSubstr("; drop the setting, or declare 'blok_q' in the plugin's "
                                   "parameter schema")));
  msg = user_error([&] { resolve_params(d, {{"wibble", "1"}}, "attention"); });
  EXPECT_THAT(msg, HasSubstr("attention.wibble: unknown parameter"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("did you mean")));
}

TEST(ResolveParams, PluginWithoutParametersRejectsAnyKey) {
  auto d = descriptor(nullptr, 0);
  EXPECT_TRUE(resolve_params(d, {}, "attention").values().empty());
  EXPECT_EQ(resolve_params(d, {}, "attention").c_view()->count, 0u);
  EXPECT_THAT(user_error([&] {
                resolve_params(d, {{"block_q", "1"}}, "attention");
              }),
              HasSubstr("attention.block_q: unknown parameter of attention plugin 'flashy', "
                        "which takes no parameters"));
}

TEST(ResolveParams, WrongTypes) {
  auto d = descriptor(kSpecs, std::size(kSpecs));
  EXPECT_THAT(user_error([&] {
                resolve_params(d, {{"block_q", "abc"}}, "attention");
              }),
              HasSubstr("attention.block_q: 'abc' is not an integer"));
  EXPECT_THAT(user_error([&] {
                resolve_params(d, {{"block_q", "6.5"}}, "attention");
              }),
              HasSubstr("'6.5' is not an integer"));
  EXPECT_THAT(user_error([&] {
                resolve_params(d, {{"block_q", "99999999999999999999"}}, "x");
              }),
              HasSubstr("is not an integer"));
  EXPECT_THAT(user_error([&] {
                resolve_params(d, {{"softmax_scale", "fast"}}, "attention");
              }),
              HasSubstr("attention.softmax_scale: 'fast' is not a (finite) number"));
  EXPECT_THAT(user_error([&] {
                resolve_params(d, {{"deterministic", "maybe"}}, "attention");
              }),
              HasSubstr("attention.deterministic: 'maybe' is not a boolean (true or false)"));
}

TEST(ResolveParams, BadDefaultIsBlamedOnThePlugin) {
  const triad_param_spec_v1 bad[] = {{"n", TRIAD_PARAM_INT, "lots", "help"}};
  auto d = descriptor(bad, 1);
  EXPECT_THAT(user_error([&] { resolve_params(d, {}, "attention"); }),
              AllOf(HasSubstr("declares parameter 'n' of type int with default 'lots'"),
                    HasSubstr("fix the plugin's parameter table")));
}

TEST(ResolvedParams, CopiesOwnTheirStrings) {
  auto d = descriptor(kSpecs, std::size(kSpecs));
  ResolvedParams copy;
  {
    ResolvedParams r = resolve_params(d, {{"impl", "mine"}}, "attention");
    copy = r;
  }
  ResolvedParams copy2(copy);
  for (const ResolvedParams* p : {&copy, &copy2}) {
    const triad_params_v1* c = p->c_view();
    ASSERT_EQ(c->count, 5u);
    EXPECT_STREQ(c->items[3].name, "impl");
    EXPECT_STREQ(c->items[3].value, "mine");
    EXPECT_EQ(c->items[3].value, p->values().at("impl").c_str());  // its own storage
  }
  EXPECT_NE(copy.c_view()->items, copy2.c_view()->items);
}

}  // namespace
}  // namespace triad
