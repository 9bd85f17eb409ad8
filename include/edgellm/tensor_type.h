// Tensor element types, numbered as GGUF files number them (the ggml_type enum), so a
// type id read from a file indexes these tables directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace edgellm {

enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ4_NL = 20,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
};

// One past the largest id we know; tables are indexed by the raw id.
inline constexpr uint32_t kTensorTypeCount = 31;

struct TensorTypeInfo {
    const char* name;    // "q4_K", as llama.cpp prints it; nullptr for an unknown id
    int64_t block_size;  // elements per block
    size_t type_size;    // bytes per block
    bool quantized;      // stored in blocks with scales
};

// Size/layout facts for a raw type id; nullopt when the id is not a type we know.
std::optional<TensorTypeInfo> tensor_type_info(uint32_t id);
const TensorTypeInfo& tensor_type_info(TensorType t);
inline const char* tensor_type_name(TensorType t) {
    return tensor_type_info(t).name;
}
std::optional<TensorType> tensor_type_from_name(std::string_view name);  // case-insensitive

// Bytes of one row of n elements; n must be a multiple of the block size.
size_t row_size(TensorType t, int64_t n);

// Whether edgellm can quantize to `type` (quantize_row, `edgellm quantize`): F32, F16,
// BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool can_quantize(TensorType type);

}  // namespace edgellm
