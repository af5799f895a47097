// Runs the built rankd binary through the shell, for the tests of its commands.
#ifndef RANKD_TESTS_MAIN_RUN_RANKD_H_
#define RANKD_TESTS_MAIN_RUN_RANKD_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace rankd::cli {

struct RunResult {
  int exit_code;
  std::string out;
  std::string err;
};

// The contents of `path`, which is then removed.
inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::filesystem::remove(path);
  return ss.str();
}

// `bin/rankd ARGS` (ARGS may redirect stdin: "tokenize ... < FILE"), its exit code and output.
inline RunResult RunRankd(const std::string& args) {
  const std::string base =
      std::filesystem::temp_directory_path() / ("rankd_cli_" + std::to_string(::getpid()));
  const std::string cmd = std::string(RANKD_BINARY_DIR) + "/bin/rankd " + args + " > " + base +
                          ".out 2> " + base + ".err";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(base + ".out"), Slurp(base + ".err")};
}

}  // namespace rankd::cli

#endif  // RANKD_TESTS_MAIN_RUN_RANKD_H_
