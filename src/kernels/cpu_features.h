// What the CPU has *and the OS enables*. A flag in cpuid is not enough: the OS must save
// the register state (XCR0, read with xgetbv), or the first instruction dies with SIGILL.
#pragma once

#include <string>

#include "edgellm/kernels.h"

namespace edgellm {

struct CpuFeatures {
    // x86
    bool avx2 = false;  // with FMA and F16C
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false;
    bool avx512bf16 = false, avx_vnni = false;
    // AMX tiles with int8 multiplication: in cpuid, enabled in XCR0 (TILECFG and TILEDATA)
    // and granted to this process by Linux (arch_prctl ARCH_REQ_XCOMP_PERM), without which
    // the first tile instruction kills the process.
    bool amx_int8 = false;
    bool amx_bf16 = false;  // with amx_int8 and avx512bf16
    // arm
    bool neon = false, dotprod = false, i8mm = false;
};

const CpuFeatures& cpu_features();
// (cpu_features_string: edgellm/kernels.h)

}  // namespace edgellm
