// Weight quantizers: float rows to the GGUF block formats, bit for bit as llama.cpp's
// quantizer writes them without an importance matrix (llama-quantize with no --imatrix).
// These are for making model files; the activation quantizers used while computing
// (TypeKernels::from_float: q8_0 / q8_1 / q8_K with round-to-nearest-even) are separate
// and round differently.
#pragma once

#include <cstdint>

#include "edgellm/tensor_type.h"

namespace edgellm {

// Quantize n floats (multiple of the block size) into dst, as llama.cpp's quantizer does.
// dst holds row_size(type, n) bytes. F32 / F16 / BF16 are plain conversions (round to
// nearest even). Returns false, writing nothing, for a type that has no quantizer here or
// when n is not a multiple of its block size.
bool quantize_row(TensorType type, const float* src, void* dst, int64_t n);

// (can_quantize: edgellm/tensor_type.h)

}  // namespace edgellm
