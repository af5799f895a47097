#include "rankd/cli/flag_set.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rankd::cli {

void FlagSet::Add(const std::string& name, Type type, void* value, std::string help,
                  std::string dflt) {
  flags_[name] = Flag{type, value, std::move(help), std::move(dflt)};
}
void FlagSet::String(const std::string& name, std::string* value, std::string help) {
  Add(name, Type::kString, value, std::move(help), value->empty() ? "" : "\"" + *value + "\"");
}
void FlagSet::Int(const std::string& name, int* value, std::string help) {
  Add(name, Type::kInt, value, std::move(help), absl::StrCat(*value));
}
void FlagSet::Double(const std::string& name, double* value, std::string help) {
  Add(name, Type::kDouble, value, std::move(help), absl::StrCat(*value));
}
void FlagSet::Bool(const std::string& name, bool* value, std::string help) {
  Add(name, Type::kBool, value, std::move(help), *value ? "true" : "false");
}

void FlagSet::Strings(const std::string& name, std::vector<std::string>* values, std::string help) {
  std::string dflt;
  for (const std::string& v : *values)
    absl::StrAppend(&dflt, dflt.empty() ? "" : " ", "\"", v, "\"");
  Add(name, Type::kStrings, values, std::move(help), std::move(dflt));
}

absl::Status FlagSet::Assign(const std::string& name, Flag& flag, const std::string& text) {
  bool ok = true;
  switch (flag.type) {
    case Type::kString:
      *static_cast<std::string*>(flag.value) = text;
      break;
    case Type::kInt:
      ok = absl::SimpleAtoi(text, static_cast<int*>(flag.value));
      break;
    case Type::kDouble:
      ok = absl::SimpleAtod(text, static_cast<double*>(flag.value));
      break;
    case Type::kBool:
      ok = absl::SimpleAtob(text, static_cast<bool*>(flag.value));
      break;
    case Type::kStrings: {
      auto* values = static_cast<std::vector<std::string>*>(flag.value);
      if (!flag.set) values->clear();  // the first occurrence replaces the default list
      values->push_back(text);
      break;
    }
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("--", name, ": bad value '", text, "'"));
  flag.set = true;
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(int argc, char** argv, int first,
                            std::vector<std::string>* positional) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(Help().c_str(), stdout);
      return absl::CancelledError("help");
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      if (positional == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
      }
      positional->push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    for (char& c : name) c = c == '_' ? '-' : c;  // --max_batch_tokens == --max-batch-tokens
    auto it = flags_.find(name);
    if (it == flags_.end() && !has_value && name.rfind("no-", 0) == 0) {
      auto neg = flags_.find(name.substr(3));
      if (neg != flags_.end() && neg->second.type == Type::kBool) {
        absl::Status s = Assign(neg->first, neg->second, "false");
        if (!s.ok()) return s;
        continue;
      }
    }
    if (it == flags_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value) {
      if (it->second.type == Type::kBool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
    }
    absl::Status s = Assign(name, it->second, value);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

bool FlagSet::WasSet(const std::string& name) const {
  auto it = flags_.find(name);
  return it != flags_.end() && it->second.set;
}

std::string FlagSet::Help() const {
  std::string out = usage_ + "\n\nFlags:\n";
  for (const auto& [name, flag] : flags_) {
    std::string head = absl::StrCat("  --", name);
    if (flag.type != Type::kBool)
      absl::StrAppend(&head, "=",
                      flag.type == Type::kString    ? "STR"
                      : flag.type == Type::kStrings ? "STR..."
                                                    : "N");
    absl::StrAppendFormat(&out, "%-28s %s", head, flag.help);
    if (!flag.default_text.empty()) absl::StrAppend(&out, " (default ", flag.default_text, ")");
    out += "\n";
  }
  return out;
}

std::optional<int> ParseCommandFlags(FlagSet& flags, int argc, char** argv, int first,
                                     const char* command) {
  absl::Status s = flags.Parse(argc, argv, first, nullptr);
  if (s.ok()) return std::nullopt;
  if (absl::IsCancelled(s)) return 0;  // --help, already printed
  std::fprintf(stderr, "%s: %s\n", command, std::string(s.message()).c_str());
  return 2;
}

absl::Status CheckFlagsAtLeast(std::initializer_list<std::pair<const char*, int>> flags,
                               int minimum) {
  for (const auto& [flag, value] : flags) {
    if (value < minimum) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " must be >= ", minimum, " (got ", value, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace rankd::cli
