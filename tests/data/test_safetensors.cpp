// safetensors: write→read round trip, an independent parse of what write_f32 produced, the
// dtype conversions, every way a file can be corrupt, and atomic writes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "triad/core/io/safetensors.hpp"

namespace triad {
namespace {

namespace st = safetensors;
using test::user_error;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A file built by hand: 8-byte length, header text as given, then the data bytes.
void craft(const std::string& path, const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  test::write_vector(path, out);
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 6; ++i) a_.push_back(0.25f * i - 1.0f);
    b_ = {std::numeric_limits<float>::infinity(), -0.0f, std::numeric_limits<float>::denorm_min(),
          3.4e38f};
    path_ = dir_.file("model.safetensors");
  }
  void write_sample(const std::string& path) {
    st::write_f32(path,
                  {{"h.0.weight", {2, 3}, a_.data()},
                   {"bias", {4}, b_.data()},
                   {"scalar", {}, &c_},
                   {"empty", {0, 5}, nullptr}},
                  {{"format", "pt"}, {"step", "12"}});
  }
  std::string error() const {
    return user_error([&] { st::read(path_); });
  }

  test::ScratchDir dir_;
  std::string path_;
  std::vector<float> a_, b_;
  float c_ = std::nanf("");
};

TEST_F(Safetensors, RoundTrip) {
  write_sample(path_);
  EXPECT_THAT(dir_.listing(), UnorderedElementsAre("model.safetensors"));  // no .tmp left
  const st::File f = st::read(path_);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}}));
  ASSERT_EQ(f.tensors.size(), 4u);
  auto check = [&](const std::string& name, std::vector<int64_t> shape,
                   const std::vector<float>& want) {
    const auto& t = f.tensors.at(name);
    EXPECT_EQ(t.dtype, "F32");
    EXPECT_EQ(t.shape, shape);
    auto got = t.to_f32();
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(bits(got[i]), bits(want[i])) << name;
  };
  check("h.0.weight", {2, 3}, a_);
  check("bias", {4}, b_);
  check("scalar", {}, {c_});
  check("empty", {0, 5}, {});
}

TEST_F(Safetensors, WrittenLayoutMatchesTheFormat) {
  write_sample(path_);
  const auto raw = test::read_bytes(path_);
  uint64_t n;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // padded so the data starts aligned
  const std::string text(raw.begin() + 8, raw.begin() + 8 + n);
  const size_t json_end = text.find_last_of('}') + 1;
  EXPECT_EQ(text.substr(json_end), std::string(n - json_end, ' '));
  EXPECT_LT(n - json_end, 8u);
  const auto h = nlohmann::ordered_json::parse(text);
  std::vector<std::string> keys;
  for (const auto& [k, v] : h.items()) keys.push_back(k);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"__metadata__", "h.0.weight", "bias", "scalar", "empty"}));
  EXPECT_EQ(h["h.0.weight"]["data_offsets"], nlohmann::ordered_json::array({0, 24}));
  EXPECT_EQ(h["bias"]["data_offsets"], nlohmann::ordered_json::array({24, 40}));
  EXPECT_EQ(h["scalar"]["data_offsets"], nlohmann::ordered_json::array({40, 44}));
  EXPECT_EQ(h["empty"]["data_offsets"], nlohmann::ordered_json::array({44, 44}));
  EXPECT_EQ(raw.size(), 8 + n + 44);
  float v;
  std::memcpy(&v, raw.data() + 8 + n + 24 + 12, 4);
  EXPECT_EQ(v, 3.4e38f);
}

TEST_F(Safetensors, HalfAndBfloatConversions) {
  st::TensorData h{"F16", {9}, {}};
  for (uint16_t v : {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0xFC00, 0x3555, 0x03FF})
    h.bytes.insert(h.bytes.end(), {uint8_t(v & 0xff), uint8_t(v >> 8)});
  const auto f = h.to_f32();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> want = {1.0f, -2.0f, 65504.0f,        std::ldexp(1.0f, -24),       -0.0f,
                                   inf,  -inf,  0.333251953125f, 1023 * std::ldexp(1.0f, -24)};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(bits(f[i]), bits(want[i])) << i;
  st::TensorData nan{"F16", {1}, {0x00, 0x7E}};
  EXPECT_TRUE(std::isnan(nan.to_f32()[0]));

  st::TensorData b{"BF16", {3}, {0x80, 0x3F, 0x49, 0xC0, 0x80, 0x7F}};
  EXPECT_EQ(b.to_f32(), (std::vector<float>{1.0f, -3.140625f, inf}));

  st::TensorData i{"I32", {1}, {1, 0, 0, 0}};
  EXPECT_THAT(user_error([&] { i.to_f32(); }), HasSubstr("I32 tensor cannot be read as float32"));
}

#ifdef __FLT16_MAX__
TEST_F(Safetensors, HalfConversionMatchesTheCompilerForEveryPattern) {
  st::TensorData h{"F16", {65536}, std::vector<uint8_t>(2 * 65536)};
  for (uint32_t v = 0; v < 65536; ++v) std::memcpy(h.bytes.data() + 2 * v, &v, 2);
  const auto f = h.to_f32();
  for (uint32_t v = 0; v < 65536; ++v) {
    _Float16 x;
    std::memcpy(&x, &v, 2);
    const float want = static_cast<float>(x);
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(f[v])) << std::hex << v;
    else
      ASSERT_EQ(bits(f[v]), bits(want)) << std::hex << v;
  }
}
#endif

TEST_F(Safetensors, MissingShortOrBadHeaderLength) {
  auto msg = error();
  EXPECT_THAT(msg, HasSubstr("safetensors file '" + path_ + "' cannot be opened"));
  EXPECT_THAT(msg, HasSubstr("No such file"));

  test::write_bytes(path_, "\x10\0\0\0\0", 5);
  EXPECT_THAT(error(), HasSubstr("is 5 bytes, shorter than its 8-byte header length"));

  write_sample(path_);
  auto raw = test::read_bytes(path_);
  const uint64_t huge = raw.size();  // one more than could fit after the 8 length bytes
  std::memcpy(raw.data(), &huge, 8);
  test::write_vector(path_, raw);
  EXPECT_THAT(error(),
              HasSubstr("has header length " + std::to_string(huge) +
                        ", past the end of the file (" + std::to_string(raw.size()) + " bytes)"));
}

TEST_F(Safetensors, CorruptJson) {
  write_sample(path_);
  auto raw = test::read_bytes(path_);
  *std::find(raw.begin() + 8, raw.end(), ':') = ';';
  test::write_vector(path_, raw);
  EXPECT_THAT(error(), HasSubstr("has a header that is not valid JSON ("));
  craft(path_, "[1, 2]", 0);
  EXPECT_THAT(error(), HasSubstr("not a JSON object"));
  craft(path_, R"({"__metadata__": {"step": 12}})", 0);
  EXPECT_THAT(error(), HasSubstr("__metadata__ 'step' is 12, not a string"));
}

TEST_F(Safetensors, TensorEntryFields) {
  const std::string ok = R"("dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16])";
  craft(path_, "{\"w\": {" + ok + "}}", 16);
  EXPECT_EQ(st::read(path_).tensors.at("w").shape, (std::vector<int64_t>{2, 2}));

  craft(path_, R"({"w": {"shape": [2, 2], "data_offsets": [0, 16]}})", 16);
  EXPECT_THAT(error(), HasSubstr("tensor 'w' has no \"dtype\""));
  craft(path_, R"({"w": {"dtype": "F32", "data_offsets": [0, 16]}})", 16);
  EXPECT_THAT(error(), HasSubstr("tensor 'w' has no \"shape\""));
  craft(path_, R"({"w": {"dtype": "F32", "shape": [2, 2]}})", 16);
  EXPECT_THAT(error(), HasSubstr("tensor 'w' has no \"data_offsets\""));
  craft(path_, R"({"w": {"dtype": "F33", "shape": [2, 2], "data_offsets": [0, 16]}})", 16);
  EXPECT_THAT(error(), HasSubstr("tensor 'w' has unknown dtype 'F33'"));
  craft(path_, R"({"w": {"dtype": "F32", "shape": [2, -2], "data_offsets": [0, 16]}})", 16);
  EXPECT_THAT(error(), HasSubstr("shape entry is -2, not a non-negative integer"));
  craft(path_, R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [16, 0]}})", 16);
  EXPECT_THAT(error(), HasSubstr("data_offsets [16, 0] end before they begin"));
  craft(path_, R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})", 16);
  EXPECT_THAT(error(), HasSubstr("tensor 'w' (F32, shape [2,3]) needs 24 bytes but its "
                                 "data_offsets [0, 16] hold 16"));
  craft(path_, R"({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 16]}})", 16);
  EXPECT_THAT(error(), HasSubstr("needs 8 bytes"));
}

TEST_F(Safetensors, OffsetsMustTileTheData) {
  const std::string a = R"("a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})";
  craft(path_, "{" + a + R"(, "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 24);
  EXPECT_THAT(error(), HasSubstr("tensors 'a' [0, 16] and 'b' [8, 24] overlap"));
  craft(path_, "{" + a + R"(, "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]}})", 40);
  EXPECT_THAT(error(), HasSubstr("data bytes [16, 24) before tensor 'b' belong to no tensor"));
  craft(path_, "{" + a + "}", 20);
  EXPECT_THAT(error(), HasSubstr("has 4 bytes after the last tensor's data"));
  craft(path_, "{" + a + R"(, "b": {"dtype": "I8", "shape": [4], "data_offsets": [16, 20]}})", 20);
  EXPECT_EQ(st::read(path_).tensors.at("b").bytes.size(), 4u);
}

TEST_F(Safetensors, TruncatedData) {
  write_sample(path_);
  auto raw = test::read_bytes(path_);
  raw.resize(raw.size() - 4);  // the scalar's bytes
  test::write_vector(path_, raw);
  auto msg = error();
  EXPECT_THAT(msg, HasSubstr("'" + path_ + "' is truncated"));
  EXPECT_THAT(msg, HasSubstr("file is " + std::to_string(raw.size()) + " bytes, its header needs " +
                             std::to_string(raw.size() + 4)));
}

TEST_F(Safetensors, WriteReplacesAnExistingFile) {
  write_sample(path_);
  const float one = 1.0f;
  st::write_f32(path_, {{"only", {1}, &one}});
  const auto f = st::read(path_);
  EXPECT_TRUE(f.metadata.empty());
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors.at("only").to_f32(), std::vector<float>{1.0f});
  EXPECT_THAT(dir_.listing(), UnorderedElementsAre("model.safetensors"));
}

TEST_F(Safetensors, WriteIntoMissingFolderLeavesNothing) {
  const auto path = dir_.file("no-such-folder/model.safetensors");
  auto msg = user_error([&] { write_sample(path); });
  EXPECT_THAT(msg, HasSubstr("cannot write safetensors file '" + path + "'"));
  EXPECT_THAT(msg, HasSubstr("No such file or directory"));
  EXPECT_TRUE(dir_.listing().empty());
}

TEST_F(Safetensors, BadTensorListIsRejected) {
  const float one = 1.0f;
  EXPECT_THAT(user_error([&] {
                st::write_f32(path_, {{"x", {1}, &one}, {"x", {1}, &one}});
              }),
              HasSubstr("tensor name 'x' is empty, reserved or repeated"));
  EXPECT_THAT(user_error([&] {
                st::write_f32(path_, {{"x", {-1}, &one}});
              }),
              HasSubstr("negative dimension"));
  EXPECT_TRUE(dir_.listing().empty());
}

// A write that fails halfway (here: the file-size limit) leaves the old file intact and no
// temporary behind. Runs in a child process because it lowers a process-wide limit.
TEST_F(Safetensors, FailedWriteLeavesTheOldFileIntact) {
  write_sample(path_);
  const auto before = test::read_bytes(path_);
  const std::vector<float> big(64 * 1024, 2.0f);
  auto write_big_under_a_size_limit = [&] {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int code = 3;
    try {
      st::write_f32(path_, {{"big", {int64_t(big.size())}, big.data()}});
    } catch (const UserError& e) {
      code = std::string(e.what()).find("File too large") != std::string::npos ? 0 : 4;
    }
    if (dir_.listing().size() != 1) code = 5;
    std::_Exit(code);
  };
  EXPECT_EXIT(write_big_under_a_size_limit(), ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(test::read_bytes(path_), before);
  EXPECT_THAT(dir_.listing(), UnorderedElementsAre("model.safetensors"));
}

}  // namespace
}  // namespace triad
