// Command-line options in llama.cpp's style: short and long names, multi-letter short
// names (-ngl, -np), "--name value" and "--name=value". Unknown options are errors. The
// names come from the option table (options.h), which also writes the help.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace edgellm::cli {

class ArgParser {
  public:
    explicit ArgParser(std::string command) : command_(std::move(command)) {}

    // An option: its names, and the metavar of its value ("" for a flag).
    void add(std::vector<std::string> names, std::string metavar);

    // False with a one-line reason in *err on an unknown option or a missing value.
    // Reasons do not repeat the command name: the caller prefixes it.
    bool parse(const std::vector<std::string>& args, std::string* err);

    bool has(const std::string& name) const;
    std::optional<std::string> get(const std::string& name) const;  // the last one given
    // Each value given, in order, and where each was in the arguments.
    std::vector<std::string> get_all(const std::string& name) const;
    std::vector<size_t> positions(const std::string& name) const;
    const std::vector<std::string>& positional() const { return positional_; }
    bool help_requested() const { return help_; }
    const std::string& command() const { return command_; }

  private:
    struct Spec {
        std::vector<std::string> names;
        std::string metavar;  // "" for a flag
    };
    const Spec* find(const std::string& name) const;
    std::string command_;
    std::vector<Spec> specs_;
    std::map<std::string, std::string> values_;  // by the first name of the spec
    struct Given {
        std::string value;
        size_t position;
    };
    std::map<std::string, std::vector<Given>> all_;  // every value given, by the same
    std::vector<std::string> positional_;
    bool help_ = false;
};

}  // namespace edgellm::cli
