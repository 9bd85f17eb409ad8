// Compare one kernel table entry with the scalar reference on random blocks. Used by the
// start-up self-test (few blocks) and by the kernel unit tests (many blocks, many seeds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace edgellm {

// Error budgets, relative to the magnitude sum(|x_i * y_i|) of the dot product.
// Integer kernels differ from the reference only in the order of float scale sums;
// float kernels (f32/f16/bf16) accumulate in f32 lanes where the reference uses double.
double vec_dot_error_budget(TensorType t);

// Random, valid data of type t for n elements (scales finite and of realistic size).
std::vector<uint8_t> random_tensor_data(TensorType t, int64_t n, uint64_t seed);

// Empty when every function of `cand` for type t that differs from `ref` agrees with it
// within budget on n_blocks worth of random rows; otherwise what disagreed, and by how much.
std::string check_type_kernels(TensorType t, const TypeKernels& cand, const TypeKernels& ref,
                               int64_t n_elements, uint64_t seed);

// Empty when the panel kernel gives the same bits as panel_gemm_ref on random panels of
// every group shape, row count and column count; otherwise what differed.
std::string check_panel_kernel(const PanelKernel& k, uint64_t seed);
// Empty when the bf16 GEMM's functions (when the kernel has them) give the bits of
// bf16_pack_ref, bf16_act_ref and bf16_gemm_ref (check_panel_kernel runs it too).
std::string check_bf16_kernels(const PanelKernel& k, uint64_t seed);

}  // namespace edgellm
