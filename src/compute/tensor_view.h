// A typed view of a weight matrix in memory: rows of ne[0] elements of `type`, ne[1] rows.
// (Higher dimensions are flattened into rows by the model layer.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "edgellm/tensor_type.h"

namespace edgellm {

struct TensorView {
    TensorType type = TensorType::F32;
    int64_t ne[4] = {1, 1, 1, 1};
    const void* data = nullptr;
    // Rows in the row-interleaved layout (kernels/x16.h) instead of one after another:
    // row(i) is not a row then; matmul and row_to_float read both layouts.
    bool x16 = false;

    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    size_t row_bytes() const { return row_size(type, ne[0]); }
    const uint8_t* row(int64_t i) const { return (const uint8_t*)data + (size_t)i * row_bytes(); }
    explicit operator bool() const { return data != nullptr; }
};

}  // namespace edgellm
