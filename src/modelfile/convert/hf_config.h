// A checkpoint's config.json as llama.cpp's converter sees it: text_config's fields over the
// top level's, and the rope parameters gathered from rope_parameters or rope_scaling and the
// top-level rope_theta, partial_rotary_factor, original_max_position_embeddings (its
// TextModel). Fields are read by path ("a.b"; "rope.X" and "rope_swa.X" for the rope
// parameters of the full-attention and sliding-window layers) and a field of the wrong type
// is an error that names it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "edgellm/arch.h"

namespace edgellm::convert {

// A JSON file of the checkpoint: nothing when absent; throws edgellm::Error naming the file
// when it is not JSON.
std::optional<nlohmann::json> read_json(const std::string& path);
// The value at "a.b.c" (null when absent).
const nlohmann::json* json_at(const nlohmann::json& j, std::string_view path);

class HfConfig {
  public:
    // Throws edgellm::Error (no config.json, not JSON, no "architectures").
    static HfConfig load(const std::string& dir);
    // Fill in what the family's transformers config fills in, as llama.cpp reads it.
    void fill_defaults(const std::vector<HfDefault>& defaults);

    const std::string& architecture() const { return arch_; }  // architectures[0]
    const nlohmann::json& root() const { return root_; }

    // nullptr when absent or null
    const nlohmann::json* find(std::string_view path) const;
    bool has(std::string_view path) const;  // present, null included
    std::optional<double> number(std::string_view path) const;
    std::optional<int64_t> integer(std::string_view path) const;
    std::optional<std::string> string(std::string_view path) const;
    std::optional<std::vector<double>> numbers(std::string_view path) const;
    std::optional<std::vector<std::string>> strings(std::string_view path) const;
    std::optional<bool> flag(std::string_view path) const;

  private:
    void gather_rope();
    std::string arch_;
    nlohmann::json root_;
    nlohmann::json rope_, rope_swa_;
};

}  // namespace edgellm::convert
