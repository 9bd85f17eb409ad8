// The general.* metadata llama.cpp's converter writes (gguf-py's Metadata): README.md's model
// card (licence, tags, languages, base models, datasets, names), the model's name and what
// its name says (basename, size label, fine-tune, version, organization) from config.json's
// _name_or_path and the directory's name, the size label from the parameter count
// otherwise, and the sampling defaults of generation_config.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "modelfile/convert/pre_tokenizer.h"

namespace edgellm::convert {

struct ModelId {
    std::optional<std::string> name, organization, basename, finetune, version, size_label;
};

// gguf-py's Metadata.get_model_id_components of "org/name-7B-Instruct-v0.2" style ids.
ModelId model_id_components(const std::string& id, int64_t total_params);
// Its id_to_title: "llama-3.2-1b" -> "Llama 3.2 1b".
std::string id_to_title(const std::string& s);
// Its model_weight_count_rounded_notation: 1234567890 -> "1.2B".
std::string size_label(int64_t n_params);

// The general.* keys, in llama.cpp's order (after general.architecture). name_or_path:
// config.json's "_name_or_path" ("" : none).
Kv general_metadata(const std::string& dir, const std::string& name_or_path, int64_t n_params);

}  // namespace edgellm::convert
