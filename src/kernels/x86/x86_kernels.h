// Entry points of the x86 kernel sets. Each fill function lives in a translation unit
// compiled with that ISA's flags and is only called after cpu_features() says the CPU
// and OS support it.
#pragma once

#include "kernels/kernels.h"

namespace edgellm {

// AVX2 + FMA + F16C.
void fill_avx2(TypeKernels* table);
void fill_avx2_legacy(TypeKernels* table);   // f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0
void fill_avx2_kquants(TypeKernels* table);  // q2_K .. q6_K, q8_K
void fill_panel_avx2(PanelKernel* panel);     // the panel GEMM without VNNI (avx2_panel.cpp)
void fill_x16_avx2(TypeKernels* table);       // GEMV over row-interleaved weights (avx2_x16.cpp)

// AVX-512 F/BW/VL + VNNI, on top of AVX2: the q4_0, q5_0, q8_0 and q2_K .. q6_K dot
// products (vec_dot and vec_dot_4) and the q8_0 / q8_K activation quantizers.
void fill_avx512(TypeKernels* table);
// Its GEMV over row-interleaved weights (x86/avx512_x16.cpp), part of fill_avx512.
void fill_x16_avx512(TypeKernels* table);
// Its panel GEMM (x86/avx512_panel.cpp).
void fill_panel_avx512(PanelKernel* panel);

// AMX int8 tiles, on top of AVX-512: the panel GEMM only (x86/amx_panel.cpp).
void fill_panel_amx(PanelKernel* panel);
void fill_amx(TypeKernels* table);  // the exact x16 batch GEMMs (X16TileKernel): q2_K, q4_K, q6_K
// The same with the bf16 GEMM (AMX-BF16, AVX512-BF16) for batches that take panels.
void fill_panel_amx_bf16(PanelKernel* panel);

// Their int8 compute limits (Int8PeakFn): vpmaddubsw + vpmaddwd (avx2.cpp), vpdpbusd zmm
// (avx512.cpp).
uint64_t int8_peak_avx2(uint64_t iters, const int8_t* buf, int64_t* lanes_sum);
uint64_t int8_peak_avx512(uint64_t iters, const int8_t* buf, int64_t* lanes_sum);
uint64_t int8_peak_amx(uint64_t iters, const int8_t* buf, int64_t* lanes_sum);  // tdpbsud

}  // namespace edgellm
