// Quantizing a model: the file types llama.cpp's quantizer offers (Q4_K_M and friends),
// the per-tensor type each one chooses, and the conversion of a GGUF file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/error.h"
#include "edgellm/gguf.h"
#include "edgellm/tensor_type.h"

namespace edgellm {

// general.file_type values (llama.cpp's llama_ftype).
enum class FileType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q8_0 = 7,
    Q5_0 = 8,
    Q5_1 = 9,
    Q2_K = 10,
    Q3_K_S = 11,
    Q3_K_M = 12,
    Q3_K_L = 13,
    Q4_K_S = 14,
    Q4_K_M = 15,
    Q5_K_S = 16,
    Q5_K_M = 17,
    Q6_K = 18,
    Q2_K_S = 21,
    BF16 = 32,
};

std::optional<FileType> file_type_from_name(std::string_view name);  // "Q4_K_M", case-insensitive
const char* file_type_name(FileType t);
std::vector<FileType> all_file_types();
// The type most tensors get (Q4_K for Q4_K_M).
TensorType file_type_base(FileType t);

struct QuantizeOptions {
    FileType ftype = FileType::Q4_K_M;
    bool pure = false;                               // every quantizable tensor gets the base type
    std::optional<TensorType> output_type;           // override for output.weight
    std::optional<TensorType> token_embedding_type;  // override for token_embd.weight
    // The file's family (general.architecture): its table entry says each tensor's role
    // (edgellm/arch.h); "" or a family edgellm does not run: llama.cpp's name patterns.
    std::string arch;
};

// What the plan needs to know of a tensor.
struct TensorSpec {
    std::string name;
    int n_dims = 1;
    int64_t ne[4] = {1, 1, 1, 1};
    TensorType type = TensorType::F32;  // its type now
};

// The specs of every tensor of a file, in order.
std::vector<TensorSpec> tensor_specs(const GgufFile& f);

// The type each tensor should have after quantizing with `opts`, following the rules of
// llama.cpp's quantizer so that files come out with the same per-tensor types and size as
// the files people download: higher precision for the output and embeddings, more bits
// for attn_v / ffn_down in some layers, a fallback type when a row is not a multiple of
// the type's block. n_gqa = n_head / n_head_kv. Tensors that are not quantized (norms,
// biases, 1-D tensors) keep their type.
std::vector<TensorType> plan_tensor_types(const std::vector<TensorSpec>& tensors, int64_t n_gqa,
                                          const QuantizeOptions& opts,
                                          std::vector<std::string>* notes = nullptr);

struct QuantizeProgress {
    size_t index, count;  // tensor index (0-based) and how many there are
    const std::string& name;
    TensorType from, to;
    size_t bytes_in, bytes_out;
};

struct QuantizeRunOptions {
    QuantizeOptions opts;
    int n_threads = 0;  // 0: all cores
    bool allow_requantize = false;
    std::function<void(const QuantizeProgress&)> progress;
};

struct QuantizeStats {
    size_t bytes_in = 0, bytes_out = 0;  // tensor bytes
    size_t n_quantized = 0, n_copied = 0;
    double seconds = 0.0;
};

// Read `in`, write `out` (through a temporary file and a rename). Refuses to overwrite
// the input, to requantize an already quantized tensor unless allowed, and types we
// cannot write.
Result<QuantizeStats> quantize_file(const std::string& in, const std::string& out,
                                    const QuantizeRunOptions& opts);

}  // namespace edgellm
