// README.md's model card: the YAML front matter between its first two "---" lines, read as
// far as llama.cpp's converter uses it (gguf-py's Metadata.load_model_card): top-level
// scalars (plain or quoted: YAML 1.1's booleans, integers, null), lists (block "- x" or flow
// "[x, y]"); nested mappings and block scalars (> |) are passed over. Not a YAML parser:
// what it does not read it leaves out.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace edgellm::convert {

// The front matter as a JSON object (nothing: no README.md, or no front matter).
std::optional<nlohmann::json> read_model_card(const std::string& readme_path);

// Parse front matter text (the lines between the "---" lines).
nlohmann::json parse_front_matter(const std::string& yaml);

}  // namespace edgellm::convert
