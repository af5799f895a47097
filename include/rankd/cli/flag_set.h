// rankd/cli: what the command-line programs (rankd, rankd-client, rankd-bench) share: the flag
// parser (this header, library rankd_flags) and the request-line JSON (request_line.h).
//
// A small per-command flag parser: `--name=value`, `--name value`, `--bool` / `--no-bool`, and
// --help. Each command of rankd, rankd-client and rankd-bench has its own set, so a flag means one
// thing per command and an unknown or misspelt flag is an error that names it.
// Threading: a FlagSet is used from one thread (set up, parsed, then read).
#ifndef RANKD_CLI_FLAG_SET_H_
#define RANKD_CLI_FLAG_SET_H_

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace rankd::cli {

class FlagSet {
 public:
  explicit FlagSet(std::string usage) : usage_(std::move(usage)) {}

  void String(const std::string& name, std::string* value, std::string help);
  void Int(const std::string& name, int* value, std::string help);
  void Double(const std::string& name, double* value, std::string help);
  void Bool(const std::string& name, bool* value, std::string help);
  // A repeatable flag: its first occurrence replaces `values` (e.g. the config file's list), each
  // one appends its value.
  void Strings(const std::string& name, std::vector<std::string>* values, std::string help);

  // Parses argv[first..argc). Non-flag arguments go to `positional` (an error if null).
  // Returns Cancelled after printing the help for --help / -h.
  absl::Status Parse(int argc, char** argv, int first, std::vector<std::string>* positional);
  bool WasSet(const std::string& name) const;
  std::string Help() const;

 private:
  enum class Type { kString, kInt, kDouble, kBool, kStrings };
  struct Flag {
    Type type;
    void* value;
    std::string help;
    std::string default_text;
    bool set = false;
  };
  void Add(const std::string& name, Type type, void* value, std::string help, std::string dflt);
  absl::Status Assign(const std::string& name, Flag& flag, const std::string& text);

  std::string usage_;
  std::map<std::string, Flag> flags_;
};

// The flag parsing every command starts with, so that --help and a bad flag end each one the same
// way. Parses argv[first..argc) into `flags` (no positional arguments). Returns nullopt when the
// command should go on, else the exit code to return at once: 0 after --help (the help is
// printed), 2 after printing "<command>: <error>" to stderr.
std::optional<int> ParseCommandFlags(FlagSet& flags, int argc, char** argv, int first,
                                     const char* command);

// The range check of numeric flags: InvalidArgument "--NAME must be >= MINIMUM (got V)" for the
// first {NAME, V} of `flags` below `minimum`.
absl::Status CheckFlagsAtLeast(std::initializer_list<std::pair<const char*, int>> flags,
                               int minimum);

}  // namespace rankd::cli

#endif  // RANKD_CLI_FLAG_SET_H_
