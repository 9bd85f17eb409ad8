// Scalar reference kernels: the definition of every block format in code. SIMD kernels are
// tested against these; keep them plain and obviously right rather than fast.
#pragma once

#include <cstdint>

#include "kernels/block_formats.h"
#include "kernels/kernels.h"

namespace edgellm::ref {

// Element-ordered integer values of one K-quant block, with the per-sub-block scales.
// These unpackers are the single description of each bit layout.
void unpack_q2_K(const block_q2_K& b, uint8_t q[QK_K], uint8_t sc[16], uint8_t m[16]);
void unpack_q3_K(const block_q3_K& b, int8_t q[QK_K], int8_t sc[16]);
void unpack_q4_K(const block_q4_K& b, uint8_t q[QK_K], uint8_t sc[8], uint8_t m[8]);
void unpack_q5_K(const block_q5_K& b, uint8_t q[QK_K], uint8_t sc[8], uint8_t m[8]);
void unpack_q6_K(const block_q6_K& b, int8_t q[QK_K]);  // already minus 32

// Round half to even, as ggml's nearest_int.
int nearest_int(float v);

// Fill table[id] for every type with the reference kernels.
void fill_reference(TypeKernels* table);
// The int8 decoders of the panel GEMM (ref/panel_ref.cpp); part of fill_reference.
void fill_reference_unpack(TypeKernels* table);

}  // namespace edgellm::ref
