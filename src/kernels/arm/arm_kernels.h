// Entry points of the aarch64 kernel sets. Each fill function lives in a translation unit
// compiled with that set's -march flags and is only called after cpu_features() says the
// CPU has the extension (HWCAP / HWCAP2 from the kernel).
//
//   neon     ARMv8.0 Advanced SIMD (every aarch64 CPU): float rows, the activation
//            quantizers, and the integer dot products by widening multiplies (smull).
//   dotprod  ARMv8.2 DotProd (Cortex-A55/A76 and later, Raspberry Pi 5): the same
//            integer dot products with sdot, 4 products per int32 lane per instruction,
//            the panel GEMM for prefill (kernels/panel.h) and the GEMV over
//            row-interleaved weights for decode (kernels/x16.h).
//   i8mm     ARMv8.6 I8MM (smmla, usdot): the panel GEMM with smmla (two rows x two
//            columns per instruction); see neon_i8mm.cpp.
#pragma once

#include "kernels/kernels.h"

namespace edgellm {

void fill_neon(TypeKernels* table);
void fill_neon_dotprod(TypeKernels* table);
void fill_panel_dotprod(PanelKernel* panel);  // the panel GEMM (prefill) with sdot
// Int8 compute limits (Int8PeakFn): sdot (neon_dotprod.cpp), smmla (neon_i8mm.cpp).
uint64_t int8_peak_dotprod(uint64_t iters, const int8_t* buf, int64_t* lanes_sum);
uint64_t int8_peak_i8mm(uint64_t iters, const int8_t* buf, int64_t* lanes_sum);
void fill_x16_dotprod(TypeKernels* table);  // GEMV over row-interleaved weights (decode)
void fill_neon_i8mm(TypeKernels* table);
void fill_panel_i8mm(PanelKernel* panel);  // the panel GEMM (prefill) with smmla

}  // namespace edgellm
