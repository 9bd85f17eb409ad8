// Hugging Face checkpoints to GGUF (`edgellm convert`, llama.cpp's convert_hf_to_gguf.py):
// config.json, the safetensors (one file, or shards with their index), the tokenizer
// (tokenizer.json / tokenizer.model, tokenizer_config.json) and generation_config.json
// become a GGUF with llama.cpp's tensor names, metadata keys, tokenizer encoding and chat
// template, for every family of the architecture table (edgellm/arch.h), tensor for tensor
// the bytes llama.cpp's converter writes. The shards are memory-mapped and streamed: about
// one tensor is resident at a time. The output is written atomically.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/error.h"
#include "edgellm/quantize.h"
#include "edgellm/tensor_type.h"

namespace edgellm {

// --outtype: the matrices' type (vectors are f32); auto: bf16 when the checkpoint's first
// matrix in bf16 or f16 is bf16, else f16 (llama.cpp's rule).
enum class OutType { F32, F16, BF16, Q8_0, Auto };
std::optional<OutType> out_type_from_name(std::string_view name);  // f32 f16 bf16 q8_0 auto
const char* out_type_names();                                       // "f32, f16, bf16, q8_0, auto"

struct ConvertProgress {
    size_t index, count;  // tensor (0-based) and how many
    const std::string& name;
    TensorType type;
    size_t bytes_done, bytes_total;  // output bytes written so far (this tensor's included)
};

struct ConvertOptions {
    OutType outtype = OutType::Auto;
    // The file to write; "" or a directory: llama.cpp's name for the model
    // (Name-Size-Finetune-Version-TYPE.gguf) in the checkpoint's directory or that one.
    // "{ftype}" / "{FTYPE}" in a name become the type chosen (q8_0 / Q8_0).
    std::string outfile;
    int n_threads = 0;  // 0: all cores
    std::function<void(const ConvertProgress&)> progress;
};

struct ConvertStats {
    std::string path;     // what was written
    std::string arch;     // the family (general.architecture)
    std::string hf_arch;  // config.json's architecture
    FileType file_type = FileType::F16;
    size_t n_tensors = 0, bytes = 0;
    int64_t n_params = 0;
    std::vector<std::string> notes;  // how the tokenizer was read, what was left out
    double seconds = 0.0;
};

// An architecture convert does not take, a shard that is missing or truncated (its file and
// offset), a config.json field that is absent or of the wrong type (by name), a tokenizer
// edgellm cannot run, or a result edgellm's loader would refuse: an error, nothing written.
Result<ConvertStats> convert_hf(const std::string& hf_dir, const ConvertOptions& opts);

}  // namespace edgellm
