// Output prefixing: every line, whole, with its rank, however the bytes arrive.
#include <gtest/gtest.h>
#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "output.hpp"

namespace {

// Runs feed() over chunks into a file and returns what came out.
std::string prefixed(const std::vector<std::string>& chunks, bool finish = true,
                     triad::launch::LinePrefixer::Filter filter = {}) {
  FILE* f = std::tmpfile();
  EXPECT_NE(f, nullptr);
  {
    triad::launch::LinePrefixer pre("[rank 3] ", fileno(f), std::move(filter));
    for (const auto& c : chunks) pre.feed(c);
    if (finish) pre.finish();
  }
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

}  // namespace

TEST(LinePrefixer, PrefixesEveryLine) {
  EXPECT_EQ(prefixed({"a\nb\n"}), "[rank 3] a\n[rank 3] b\n");
  EXPECT_EQ(prefixed({"\n\n"}), "[rank 3] \n[rank 3] \n");
}

TEST(LinePrefixer, JoinsLinesSplitAcrossReads) {
  EXPECT_EQ(prefixed({"hel", "lo\nwor", "ld\n"}), "[rank 3] hello\n[rank 3] world\n");
}

TEST(LinePrefixer, EndsAPartialLastLine) {
  EXPECT_EQ(prefixed({"a\nno newline"}), "[rank 3] a\n[rank 3] no newline\n");
  EXPECT_EQ(prefixed({"a\nno newline"}, false), "[rank 3] a\n");
}

TEST(LinePrefixer, CutsEndlessLines) {
  std::string big(70 * 1024, 'x');
  std::string out = prefixed({big});
  EXPECT_EQ(out.rfind("[rank 3] ", 0), 0u);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2);
  EXPECT_EQ(std::count(out.begin(), out.end(), 'x'), long(big.size()));
}

// The filter sees each whole line once, without prefix or newline, however it arrived, and
// drops the lines it refuses (the launcher drops the same error line from a second rank).
TEST(LinePrefixer, FilterSeesWholeLinesAndDropsRefusedOnes) {
  std::vector<std::string> seen;
  auto keep_all_but_drop = [&](std::string_view line) {
    seen.emplace_back(line);
    return line != "drop";
  };
  EXPECT_EQ(prefixed({"ke", "ep\ndr", "op\nlast"}, true, keep_all_but_drop),
            "[rank 3] keep\n[rank 3] last\n");
  EXPECT_EQ(seen, (std::vector<std::string>{"keep", "drop", "last"}));
  EXPECT_EQ(prefixed({"drop"}, true, keep_all_but_drop), "");
}
