// Command-line options in llama.cpp's style: short and long names, multi-letter short
// names (-ngl, -np), "--name value" and "--name=value". Unknown options are errors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace edgellm::cli {

class ArgParser {
  public:
    ArgParser(std::string command, std::string usage)
        : command_(std::move(command)), usage_(std::move(usage)) {}

    void flag(std::vector<std::string> names, std::string help);
    void option(std::vector<std::string> names, std::string metavar, std::string help);

    // False with a one-line reason in *err on an unknown option or a missing value.
    // Reasons do not repeat the command name: the caller prefixes it.
    bool parse(const std::vector<std::string>& args, std::string* err);

    bool has(const std::string& name) const;
    std::optional<std::string> get(const std::string& name) const;  // the last one given
    std::vector<std::string> get_all(const std::string& name) const;  // each one given, in order
    std::string get_or(const std::string& name, const std::string& def) const;
    // Parsed integer; false with a reason when present but not an integer in [lo, hi].
    bool get_int(const std::string& name, int64_t lo, int64_t hi, int64_t* out,
                 std::string* err) const;
    // Parsed finite number; false with a reason when present but not a number in [lo, hi].
    bool get_float(const std::string& name, double lo, double hi, float* out,
                   std::string* err) const;
    const std::vector<std::string>& positional() const { return positional_; }
    bool help_requested() const { return help_; }
    const std::string& command() const { return command_; }
    std::string help() const;
    // The first name of the option `name` is one of ("" when unknown), and whether it takes a
    // value.
    std::string canonical(const std::string& name, bool* has_value = nullptr) const {
        const Spec* s = find(name);
        if (has_value) *has_value = s && s->has_value;
        return s ? s->names[0] : std::string();
    }

  private:
    struct Spec {
        std::vector<std::string> names;
        bool has_value;
        std::string metavar, help;
    };
    const Spec* find(const std::string& name) const;
    std::string command_, usage_;
    std::vector<Spec> specs_;
    std::map<std::string, std::string> values_;  // by the first name of the spec
    std::map<std::string, std::vector<std::string>> all_;  // every value given, by the same
    std::vector<std::string> positional_;
    bool help_ = false;
};

}  // namespace edgellm::cli
