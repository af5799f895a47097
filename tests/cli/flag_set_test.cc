// FlagSet, the flag parser of rankd, rankd-client and rankd-bench: the spellings it accepts, the
// errors it names, and ParseCommandFlags' exit codes.
#include "rankd/cli/flag_set.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rankd::cli {
namespace {

struct Values {
  std::string name = "x";
  int count = 1;
  double ratio = 0.5;
  bool graphs = true;
};

FlagSet Flags(Values& v) {
  FlagSet flags("usage: test [flags]");
  flags.String("name", &v.name, "a name");
  flags.Int("max-count", &v.count, "a count");
  flags.Double("ratio", &v.ratio, "a ratio");
  flags.Bool("graphs", &v.graphs, "a switch");
  return flags;
}

absl::Status Parse(FlagSet& flags, std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, nullptr);
}

TEST(FlagSetTest, Spellings) {
  Values v;
  FlagSet flags = Flags(v);
  ASSERT_TRUE(Parse(flags, {"--name=a", "--max_count", "7", "--ratio=0.25", "--no-graphs"}).ok());
  EXPECT_EQ(v.name, "a");
  EXPECT_EQ(v.count, 7);
  EXPECT_EQ(v.ratio, 0.25);
  EXPECT_FALSE(v.graphs);
  EXPECT_TRUE(flags.WasSet("max-count"));
  ASSERT_TRUE(Parse(flags, {"--graphs"}).ok());
  EXPECT_TRUE(v.graphs);
}

TEST(FlagSetTest, ErrorsNameTheFlag) {
  Values v;
  FlagSet flags = Flags(v);
  EXPECT_EQ(Parse(flags, {"--nmae=a"}).message(), "unknown flag --nmae (see --help)");
  EXPECT_EQ(Parse(flags, {"--max-count=seven"}).message(), "--max-count: bad value 'seven'");
  EXPECT_EQ(Parse(flags, {"--name"}).message(), "--name needs a value");
  EXPECT_EQ(Parse(flags, {"stray"}).message(), "unexpected argument 'stray'");
  EXPECT_FALSE(flags.WasSet("name"));
}

TEST(FlagSetTest, HelpListsEveryFlagWithItsDefault) {
  Values v;
  FlagSet flags = Flags(v);
  const std::string help = flags.Help();
  EXPECT_NE(help.find("usage: test [flags]"), std::string::npos);
  EXPECT_NE(help.find("--max-count=N"), std::string::npos);
  EXPECT_NE(help.find("(default \"x\")"), std::string::npos);
  EXPECT_NE(help.find("(default true)"), std::string::npos);
  EXPECT_TRUE(absl::IsCancelled(Parse(flags, {"--help"})));
}

TEST(ParseCommandFlagsTest, ExitCodes) {
  Values v;
  FlagSet flags = Flags(v);
  std::vector<std::string> args = {"prog", "cmd", "--name=b"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  EXPECT_EQ(ParseCommandFlags(flags, 3, argv.data(), 2, "cmd"), std::nullopt);
  EXPECT_EQ(v.name, "b");
  std::string bad = "--bad";
  argv[2] = bad.data();
  EXPECT_EQ(ParseCommandFlags(flags, 3, argv.data(), 2, "cmd"), 2);
  std::string help = "-h";
  argv[2] = help.data();
  EXPECT_EQ(ParseCommandFlags(flags, 3, argv.data(), 2, "cmd"), 0);
}

}  // namespace
}  // namespace rankd::cli
