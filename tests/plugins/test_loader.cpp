// PluginLoader: search path, discovery, and one clear error per kind of broken plugin.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "test_helpers.hpp"
#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/sdk/attention_v1.h"
#include "triad/sdk/data_v4.h"
#include "triad/sdk/pipeline_v2.h"
#include "triad/sdk/transport_v2.h"

namespace triad {
namespace {

using test::bad_plugin;
using test::user_error;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(PluginLoader, DefaultSearchPathFindsNaive) {
  PluginLoader loader;
  auto p = loader.load("attention", "naive");
  EXPECT_EQ(p->kind(), "attention");
  EXPECT_EQ(p->name(), "naive");
  EXPECT_EQ(p->descriptor().abi_version, 1u);
  EXPECT_EQ(std::filesystem::path(p->path()), std::filesystem::path(TRIAD_NAIVE_PLUGIN));
  auto names = loader.available("attention");
  EXPECT_THAT(names, ::testing::Contains("naive"));
}

TEST(PluginLoader, EnvironmentPathIsSearchedFirst) {
  ASSERT_EQ(setenv("TRIAD_PLUGIN_PATH", "/nonexistent/triad::" TRIAD_BAD_PLUGIN_DIR, 1), 0);
  PluginLoader loader;
  unsetenv("TRIAD_PLUGIN_PATH");
  const auto& sp = loader.search_path();
  ASSERT_EQ(sp.size(), 3u);  // the empty entry is skipped; this test runs from the build tree
  EXPECT_EQ(sp[0].dir, "/nonexistent/triad");
  EXPECT_EQ(sp[0].source, PluginSource::env);
  EXPECT_EQ(sp[1].dir, std::filesystem::weakly_canonical(TRIAD_BAD_PLUGIN_DIR).string());
  EXPECT_EQ(sp[1].source, PluginSource::env);
  EXPECT_EQ(sp[2].dir,
            std::filesystem::weakly_canonical(TRIAD_NAIVE_PLUGIN).parent_path().string());
  EXPECT_EQ(sp[2].source, PluginSource::build_tree);
  auto names = loader.available("attention");
  EXPECT_THAT(names, ::testing::IsSupersetOf({"naive", "kindabi0", "nullslot"}));
}

// A folder of the search path, made for a test; the parent folders too.
std::string made(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::vector<std::pair<std::string, PluginSource>> entries(const std::vector<SearchDir>& path) {
  std::vector<std::pair<std::string, PluginSource>> out;
  for (const auto& d : path) out.emplace_back(d.dir, d.source);
  return out;
}

TEST(PluginSearchPath, EnvironmentThenInstallationThenBuildTreeOnlyFromTheBuildTree) {
  namespace fs = std::filesystem;
  const fs::path root = fs::weakly_canonical(test_tmp_dir() / "search-path");
  fs::remove_all(root);
  const std::string build = made(root / "build"), plugins = made(root / "build/lib/triad");
  const std::string env = made(root / "env1") + ":" + made(root / "env2");
  using P = PluginSource;
  auto path = [&](const std::string& exe) {
    return entries(plugin_search_path(env, exe, "lib/triad", build, plugins));
  };
  const std::vector<std::pair<std::string, P>> envs = {{(root / "env1").string(), P::env},
                                                       {(root / "env2").string(), P::env}};
  auto with = [&](std::vector<std::pair<std::string, P>> rest) {
    auto all = envs;
    all.insert(all.end(), rest.begin(), rest.end());
    return all;
  };

  // Installed elsewhere: its own folder, never the build tree's.
  made(root / "prefix/lib/triad");
  EXPECT_EQ(path((root / "prefix/bin/triad-launch").string()),
            with({{(root / "prefix/lib/triad").string(), P::install}}));
  // The build tree's bin/: its ../lib/triad is the build's plugin folder, said once.
  EXPECT_EQ(path((root / "build/bin/triad-launch").string()), with({{plugins, P::build_tree}}));
  // Elsewhere in the build tree (no installation there): the installation's folder, then the
  // build tree's.
  EXPECT_EQ(
      path((root / "build/tests/x/test_x").string()),
      with({{(root / "build/tests/lib/triad").string(), P::install}, {plugins, P::build_tree}}));
  // Installed inside the build folder (cmake --install build --prefix build/stage): an
  // installation, which never sees the build's plugins.
  made(root / "build/stage/lib/triad");
  EXPECT_EQ(path((root / "build/stage/bin/triad-launch").string()),
            with({{(root / "build/stage/lib/triad").string(), P::install}}));
  // A folder whose name starts like the build folder's is not inside it.
  EXPECT_EQ(path((root / "build2/bin/triad-launch").string()),
            with({{(root / "build2/lib/triad").string(), P::install}}));
  // The build tree reached through a link is still the build tree.
  fs::create_directory_symlink(root / "build", root / "link");
  EXPECT_EQ(path((root / "link/bin/triad-launch").string()), with({{plugins, P::build_tree}}));
  // A folder named twice keeps its first place and source.
  EXPECT_EQ(entries(plugin_search_path(plugins, (root / "build/bin/x").string(), "lib/triad", build,
                                       plugins)),
            (std::vector<std::pair<std::string, P>>{{plugins, P::env}}));
  EXPECT_EQ(std::string(source_name(P::env)), "TRIAD_PLUGIN_PATH");
  EXPECT_EQ(std::string(source_name(P::install)), "install");
  EXPECT_EQ(std::string(source_name(P::build_tree)), "build tree");
  fs::remove_all(root);
}

TEST(PluginLoader, DiscoverListsEveryFileAndAvailableTheDescriptorsNames) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR, TRIAD_BAD_PLUGIN_DIR, TRIAD_TEST_PLUGIN_DIR});
  EXPECT_EQ(loader.search_path().size(), 2u);
  auto files = loader.discover();
  // nine broken plugins, buggy, chatty, three hostile ones, three v1old (data, pipeline,
  // transport), one v2old and one v3old (data)
  EXPECT_EQ(files.size(), 19u);
  EXPECT_EQ(files.front().path, bad_plugin("abi99"));
  EXPECT_EQ(files.front().kind, "attention");
  EXPECT_EQ(files.front().name, "abi99");
  EXPECT_EQ(files.front().source, PluginSource::given);
  // Names as the descriptors say them: not abi99 (no version-1 descriptor), nodesc (none),
  // misnamed (declares 'othername') or wrongkind (declares a transport).
  EXPECT_EQ(loader.available("attention"),
            (std::vector<std::string>{"buggy", "chatty", "kindabi0", "kindabi2", "nulldefault",
                                      "nullname", "nullslot"}));
  EXPECT_EQ(loader.available("tensor"), (std::vector<std::string>{"hostile"}));
  EXPECT_EQ(loader.available("pipeline"), (std::vector<std::string>{"hostile", "v1old"}));
  EXPECT_EQ(loader.available("data"),
            (std::vector<std::string>{"hostile", "v1old", "v2old", "v3old"}));
  EXPECT_EQ(loader.available("transport"), (std::vector<std::string>{"v1old"}));
}

// Two folders holding a copy of the same plugin, for the shadowing tests.
struct TwoCopies {
  std::filesystem::path first, second;
  TwoCopies() {
    const auto root = test_tmp_dir() / "two-copies";
    first = root / "first" / "libtriad-attention-naive.so";
    second = root / "second" / "libtriad-attention-naive.so";
    for (const auto& f : {first, second}) {
      std::filesystem::create_directories(f.parent_path());
      std::filesystem::copy_file(TRIAD_NAIVE_PLUGIN, f,
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  ~TwoCopies() { std::filesystem::remove_all(first.parent_path().parent_path()); }
};

TEST(PluginLoader, ThePluginFoundTwiceIsOneErrorNamingBothFiles) {
  TwoCopies copies;
  PluginLoader loader({copies.first.parent_path().string(), copies.second.parent_path().string()});
  unsetenv("TRIAD_PLUGIN_OVERRIDE");
  std::string msg = user_error([&] { loader.load("attention", "naive"); });
  EXPECT_EQ(msg, "attention plugin 'naive' is found twice on the plugin search path: " +
                     copies.first.string() + " (given) and " + copies.second.string() +
                     " (given); remove one of them, or set TRIAD_PLUGIN_OVERRIDE=1 to use the "
                     "first");
}

TEST(PluginLoader, OverrideLoadsTheFirstWithANoticeNamingBoth) {
  TwoCopies copies;
  PluginLoader loader({copies.first.parent_path().string(), copies.second.parent_path().string()});
  ASSERT_EQ(setenv("TRIAD_PLUGIN_OVERRIDE", "1", 1), 0);
  ::testing::internal::CaptureStderr();
  std::string path = loader.load("attention", "naive")->path();
  const std::string notice = ::testing::internal::GetCapturedStderr();
  unsetenv("TRIAD_PLUGIN_OVERRIDE");
  EXPECT_EQ(path, copies.first.string());
  EXPECT_EQ(notice, "triad: notice: attention plugin 'naive': using " + copies.first.string() +
                        " (given), which shadows " + copies.second.string() +
                        " (given) (TRIAD_PLUGIN_OVERRIDE=1)\n");
  // The same search path the other way round loads the other copy.
  ASSERT_EQ(setenv("TRIAD_PLUGIN_OVERRIDE", "1", 1), 0);
  ::testing::internal::CaptureStderr();
  path = PluginLoader({copies.second.parent_path().string(), copies.first.parent_path().string()})
             .load("attention", "naive")
             ->path();
  ::testing::internal::GetCapturedStderr();
  unsetenv("TRIAD_PLUGIN_OVERRIDE");
  EXPECT_EQ(path, copies.second.string());
}

TEST(PluginLoader, OneFileLinkedIntoTwoFoldersIsNoShadow) {
  TwoCopies copies;
  std::filesystem::remove(copies.second);
  std::filesystem::create_symlink(copies.first, copies.second);
  PluginLoader loader({copies.first.parent_path().string(), copies.second.parent_path().string()});
  unsetenv("TRIAD_PLUGIN_OVERRIDE");
  EXPECT_EQ(loader.load("attention", "naive")->path(), copies.first.string());
}

TEST(PluginLoader, UnknownNameListsWhatExistsAndTheClosest) {
  PluginLoader loader;
  std::string msg = user_error([&] { loader.load("attention", "naiv"); });
  EXPECT_THAT(msg,
              AllOf(HasSubstr("no attention plugin named 'naiv'"),
                    HasSubstr("libtriad-attention-naiv.so"), HasSubstr("did you mean 'naive'"),
                    HasSubstr("available attention plugins: "), HasSubstr("naive"),
                    HasSubstr(loader.search_path().front().dir), HasSubstr("TRIAD_PLUGIN_PATH")));
  msg = user_error([&] { loader.load("nosuchkind", "x"); });
  EXPECT_THAT(msg, HasSubstr("no nosuchkind plugins were found"));
}

TEST(PluginLoader, MissingDescriptor) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR});
  std::string msg = user_error([&] { loader.load("attention", "nodesc"); });
  EXPECT_THAT(msg, AllOf(HasSubstr(bad_plugin("nodesc")),
                         HasSubstr("does not export triad_plugin_descriptor_v1"),
                         HasSubstr("is it a Triad plugin built with TRIAD_ATTENTION_PLUGIN")));
}

TEST(PluginLoader, OtherAbiVersion) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR});
  std::string msg = user_error([&] { loader.load("attention", "abi99"); });
  EXPECT_THAT(msg, AllOf(HasSubstr(bad_plugin("abi99")), HasSubstr("ABI version 99"),
                         HasSubstr("expects descriptor ABI version 1"), HasSubstr("rebuild")));
}

TEST(PluginLoader, EveryKindHasItsOwnAbiVersion) {
  std::vector<std::string> kinds;
  for (const auto& k : kind_abis()) {
    kinds.push_back(k.kind);
    // data is at version 4 (ZeRO-2/3, ZeRO-1 by unit, then deferred gathers) and adapts
    // versions 1 to 3;
    // pipeline (split backwards) and transport (progress, all_to_all) are at version 2 and adapt
    // version 1; the others are at version 1.
    const std::string kind = k.kind;
    const unsigned want = kind == "data" ? 4u : kind == "pipeline" || kind == "transport" ? 2u : 1u;
    EXPECT_EQ(k.current, want) << k.kind;
    EXPECT_EQ(k.adapters.size(), want - 1) << k.kind;
  }
  EXPECT_EQ(kinds,
            (std::vector<std::string>{"attention", "transport", "data", "tensor", "pipeline"}));
  EXPECT_EQ(current_kind_abi("attention"), unsigned(TRIAD_ATTENTION_ABI_VERSION));
  EXPECT_EQ(current_kind_abi("pipeline"), unsigned(TRIAD_PIPELINE_ABI_VERSION));
  EXPECT_EQ(current_kind_abi("nosuchkind"), 0u);
  auto p = PluginLoader().load("attention", "naive");
  EXPECT_EQ(p->descriptor().kind_abi_version, unsigned(TRIAD_ATTENTION_ABI_VERSION));
  EXPECT_EQ(p->kind_abi_version(), 1u);
  EXPECT_FALSE(p->adapted());
}

// The test plugin "v<version>old" of `kind`, of an older kind ABI, loaded through the adapter to
// `current`: the core sees the current table.
namespace {
std::shared_ptr<const LoadedPlugin> old_through_adapter(const std::string& kind, unsigned current,
                                                        unsigned version = 1) {
  const std::string name = std::string(1, 'v').append(std::to_string(version)).append("old");
  auto p = PluginLoader({TRIAD_TEST_PLUGIN_DIR}).load(kind, name);
  EXPECT_EQ(p->kind_abi_version(), version) << kind;
  EXPECT_TRUE(p->adapted()) << kind;
  EXPECT_EQ(p->descriptor().kind_abi_version, current) << kind;
  EXPECT_GT(current, version) << kind;
  return p;
}
}  // namespace

// Data plugins of kind ABI 1, 2 and 3 load through the adapters: the core sees a version-4 table,
// and none partitions by unit or defers its gathers; plugins built with the SDK's C++ layer are
// of version 4.
TEST(PluginLoader, DataVersionsOneToThreeAreAdapted) {
  EXPECT_EQ(TRIAD_DATA_ABI_VERSION, 4);
  for (unsigned version : {1u, 2u, 3u}) {
    auto p = old_through_adapter("data", TRIAD_DATA_ABI_VERSION, version);
    const auto& ops = *static_cast<const triad_data_ops_v4*>(p->descriptor().ops);
    uint32_t flags = ~0u;
    EXPECT_EQ(ops.partitioning(nullptr, &flags), TRIAD_OK);
    EXPECT_EQ(flags, 0u) << version;
  }
  auto zero = PluginLoader().load("data", "zero");
  EXPECT_EQ(zero->kind_abi_version(), 4u);
  EXPECT_FALSE(zero->adapted());
}

// A pipeline plugin of kind ABI 1 loads through the adapter (the same table; its streams never
// split a backward), and plugins built with the SDK's C++ layer are of version 2.
TEST(PluginLoader, PipelineVersionOneIsAdapted) {
  old_through_adapter("pipeline", TRIAD_PIPELINE_ABI_VERSION);
  auto hostile = PluginLoader({TRIAD_TEST_PLUGIN_DIR}).load("pipeline", "hostile");
  EXPECT_EQ(hostile->kind_abi_version(), 2u);
  EXPECT_FALSE(hostile->adapted());
}

// A transport plugin of kind ABI 1 loads through the adapter: progress does nothing, all-to-all
// is not offered (and refused by name), and its world-1 all_reduce works through the wrapper.
TEST(PluginLoader, TransportVersionOneIsAdapted) {
  auto p = old_through_adapter("transport", TRIAD_TRANSPORT_ABI_VERSION);
  const auto& ops = *static_cast<const triad_transport_ops_v2*>(p->descriptor().ops);
  EXPECT_EQ(ops.all_to_all(nullptr, nullptr, nullptr, nullptr, 0, dl_float32(), dl_cpu(), nullptr),
            TRIAD_ERR_UNSUPPORTED);

  CoreServices services;
  Transport t(p, resolve_params(p->descriptor(), {}, "transport"), services.c_services());
  EXPECT_EQ(t.capabilities().ops & TRIAD_TRANSPORT_OP_ALL_TO_ALL, 0u);
  t.progress();
  RendezvousServer server("127.0.0.1", 0, "t");
  server.start();
  RendezvousClient store("127.0.0.1", server.port(), "t", std::chrono::seconds(5));
  Communicator world = t.init_world(0, 1, store, "transport/v1old/");
  float send[3] = {1, 2, 3}, recv[3] = {0, 0, 0};
  auto req = world.all_reduce(send, recv, 3, dl_float32());
  t.progress();
  req.wait(std::chrono::seconds(5));
  EXPECT_EQ(recv[0], 1.0f);
  EXPECT_EQ(recv[2], 3.0f);
  EXPECT_THAT(
      user_error([&] { world.all_to_all(send, recv, 1, dl_float32()); }),
      AllOf(HasSubstr("transport 'v1old' has no all-to-all"), HasSubstr("set transport: ucx")));
}

TEST(PluginLoader, OlderKindAbiWithoutAdapterIsRefusedWithTheFix) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR});
  std::string msg = user_error([&] { loader.load("attention", "kindabi0"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("plugin " + bad_plugin("kindabi0") + " "),
                         HasSubstr("has attention ABI version 0"),
                         HasSubstr("this Triad expects attention ABI version 1"),
                         HasSubstr("no adapter for version 0"),
                         HasSubstr("rebuild the plugin against this Triad's SDK")));
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line";
  EXPECT_FALSE(test::is_loaded(bad_plugin("kindabi0")));
}

TEST(PluginLoader, NewerKindAbiIsRefusedWithTheFix) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR});
  std::string msg = user_error([&] { loader.load_file(bad_plugin("kindabi2"), "attention"); });
  EXPECT_THAT(msg,
              AllOf(HasSubstr(bad_plugin("kindabi2")), HasSubstr("has attention ABI version 2"),
                    HasSubstr("newer than the attention ABI version 1 this Triad expects"),
                    HasSubstr("rebuild the plugin against this Triad's SDK")));
}

TEST(PluginLoader, KindDoesNotMatchFileName) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR});
  std::string msg = user_error([&] { loader.load("attention", "wrongkind"); });
  EXPECT_THAT(msg,
              AllOf(HasSubstr(bad_plugin("wrongkind")), HasSubstr("does not match filename"),
                    HasSubstr("kind 'transport'"), HasSubstr("libtriad-transport-wrongkind.so")));
}

TEST(PluginLoader, NameDoesNotMatchFileName) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR});
  std::string msg = user_error([&] { loader.load("attention", "misnamed"); });
  EXPECT_THAT(msg, AllOf(HasSubstr(bad_plugin("misnamed")), HasSubstr("does not match filename"),
                         HasSubstr("name 'othername'"), HasSubstr("name 'misnamed'")));
}

TEST(PluginLoader, MisnamedFileIsNamedWhenItsDescriptorsNameIsAskedFor) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR});
  std::string msg = user_error([&] { loader.load("attention", "othername"); });
  EXPECT_THAT(msg,
              AllOf(HasSubstr("no attention plugin named 'othername'"),
                    HasSubstr(bad_plugin("misnamed") +
                              " declares attention plugin 'othername' but its file name says "
                              "'misnamed': rename the file to libtriad-attention-othername.so"),
                    ::testing::Not(HasSubstr("did you mean"))));
  // "misnamed" is a file name no descriptor declares: never suggested.
  msg = user_error([&] { loader.load("attention", "misname"); });
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("did you mean")));
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line";
}

TEST(PluginLoader, NullParameterFieldIsRefusedNamingTheField) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR});
  std::string msg = user_error([&] { loader.load("attention", "nulldefault"); });
  EXPECT_EQ(msg, "plugin " + bad_plugin("nulldefault") +
                     ": parameter 1 ('block') of its parameter table has a NULL default_value; "
                     "give every parameter a name, a default (\"\" for none) and a help text");
  msg = user_error([&] { loader.load("attention", "nullname"); });
  EXPECT_THAT(msg, AllOf(HasSubstr("plugin " + bad_plugin("nullname") + ": parameter 1 of"),
                         HasSubstr("has a NULL name")));
}

TEST(PluginLoader, NullOpsSlot) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR});
  std::string msg = user_error([&] { loader.load("attention", "nullslot"); });
  EXPECT_THAT(msg, AllOf(HasSubstr(bad_plugin("nullslot")),
                         HasSubstr("ops slot 'backward' is NULL"), HasSubstr("UNSUPPORTED")));
}

TEST(PluginLoader, RejectedLibraryIsUnloaded) {
  PluginLoader loader({TRIAD_BAD_PLUGIN_DIR});
  user_error([&] { loader.load("attention", "nullslot"); });
  EXPECT_FALSE(test::is_loaded(bad_plugin("nullslot")));
}

TEST(PluginLoader, LoadFileChecksExistenceFormatAndKind) {
  PluginLoader loader{std::vector<std::string>{}};
  EXPECT_THAT(user_error([&] { loader.load_file("/nonexistent/libtriad-attention-x.so"); }),
              HasSubstr("/nonexistent/libtriad-attention-x.so does not exist"));

  auto text = test_tmp_dir() / "libtriad-attention-text.so";
  std::ofstream(text) << "not a shared object\n";
  EXPECT_THAT(user_error([&] { loader.load_file(text.string()); }),
              HasSubstr("cannot load plugin " + text.string() + ": "));
  std::filesystem::remove(text);

  EXPECT_THAT(user_error([&] { loader.load_file(TRIAD_NAIVE_PLUGIN, "transport"); }),
              HasSubstr("has kind 'attention', but a plugin of kind 'transport' is needed"));
  EXPECT_EQ(loader.load_file(TRIAD_NAIVE_PLUGIN, "attention")->name(), "naive");

  // A plugin copied under a name that breaks the convention.
  auto odd = test_tmp_dir() / "naive-copy.so";
  std::filesystem::copy_file(TRIAD_NAIVE_PLUGIN, odd,
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_THAT(user_error([&] { loader.load_file(odd.string()); }),
              AllOf(HasSubstr("file name must be libtriad-<kind>-<name>.so"),
                    HasSubstr("libtriad-attention-naive.so")));
  std::filesystem::remove(odd);
}

TEST(ClosestName, SuggestsOnlyNearMisses) {
  EXPECT_EQ(closest_name("blok_q", {"block_q", "block_k", "causal"}), "block_q");
  EXPECT_EQ(closest_name("flash", {"flash1", "flash2", "naive"}), "flash1");
  EXPECT_EQ(closest_name("NAIVE", {"naive"}), "naive");
  EXPECT_EQ(closest_name("zzzz", {"naive", "flash2"}), "");
  EXPECT_EQ(closest_name("x", {}), "");
}

int exit_code(const std::string& cmd) {
  int st = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(PluginTestTool, UserErrorsExitWithTwo) {
  const std::string tool = TRIAD_PLUGIN_TEST_EXE;
  auto text = test_tmp_dir() / "triad-not-a-plugin.txt";
  std::ofstream(text) << "hello\n";
  EXPECT_EQ(exit_code(tool + " attention " + text.string()), 2);
  std::filesystem::remove(text);
  EXPECT_EQ(exit_code(tool + " attention " + bad_plugin("nodesc")), 2);
  EXPECT_EQ(exit_code(tool + " attention /nonexistent/libtriad-attention-x.so"), 2);
  EXPECT_EQ(exit_code(tool + " transport " TRIAD_NAIVE_PLUGIN), 2);
  EXPECT_EQ(exit_code(tool + " attention " TRIAD_NAIVE_PLUGIN " --param nope=1"), 2);
  EXPECT_EQ(exit_code(tool + " attention"), 2);
}

TEST(PluginTestTool, FailingPluginExitsWithOne) {
  EXPECT_EQ(exit_code(std::string(TRIAD_PLUGIN_TEST_EXE) +
                      " attention " TRIAD_TEST_PLUGIN_DIR
                      "/libtriad-attention-buggy.so --quick --param bug=no_scale"),
            1);
}

TEST(InfoTool, ListsPluginsWithParametersAndFlagsBrokenOnes) {
  std::string text;
  // Exit 1: some plugins are broken (each is listed, and so is every good one).
  EXPECT_EQ(test::run_command("TRIAD_PLUGIN_PATH=" TRIAD_TEST_PLUGIN_DIR ":" TRIAD_BAD_PLUGIN_DIR
                              " " TRIAD_INFO_EXE " --kind attention",
                              &text),
            1);
  EXPECT_THAT(text, AllOf(HasSubstr("attention naive\n"), HasSubstr("attention buggy\n"),
                          HasSubstr("head dims 1..256"), HasSubstr("bug "),
                          HasSubstr("string  default none"), HasSubstr("BROKEN"),
                          HasSubstr("ABI version 99"), HasSubstr("has attention ABI version 0")));
  // Where each came from: the search-path entry and its folder.
  const std::string test_dir = std::filesystem::weakly_canonical(TRIAD_TEST_PLUGIN_DIR).string();
  EXPECT_THAT(text, AllOf(HasSubstr("\n  " + test_dir + "  (TRIAD_PLUGIN_PATH)\n"),
                          HasSubstr("  origin:       TRIAD_PLUGIN_PATH (" + test_dir + ")\n"),
                          HasSubstr("  origin:       build tree (")));
  // Each plugin's descriptor and kind ABI, and the ones this Triad speaks.
  EXPECT_THAT(text,
              AllOf(HasSubstr("kind ABIs attention 1, transport 2, data 4, tensor 1, pipeline 2\n"),
                    HasSubstr("  abi:          plugin 1, attention 1\n")));
}

TEST(InfoTool, ListsTensorPluginsWithCapabilities) {
  auto out = test_tmp_dir() / "triad-info-tensor.txt";
  std::string cmd = std::string(TRIAD_INFO_EXE) + " --kind tensor > " + out.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(out);
  EXPECT_THAT(text, AllOf(HasSubstr("tensor megatron\n"), HasSubstr("tensor none\n"),
                          HasSubstr("abi:          plugin 1, tensor 1\n"),
                          HasSubstr("capabilities: any tp, sequence parallelism\n"),
                          HasSubstr("capabilities: tp 1 only, no sequence parallelism\n")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("\nattention ")));
}

}  // namespace
}  // namespace triad
