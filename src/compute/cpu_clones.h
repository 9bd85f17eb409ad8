// The attribute that compiles a hot loop of the compute layer (swiglu, hadamard, attention)
// for AVX-512 and AVX2 as well as the baseline, the best chosen at load time from the CPU's
// (and OS's) features by the clones' resolver.
//
// The clones are the x86-64 levels v4 and v3, not the targets "avx512f" and "avx2": "avx2"
// leaves out FMA, so its std::fma were calls to fmaf, one per operation, and plain a * b + c
// was not contracted (17 % of a 512-token prompt's time on an AVX2-only EPYC). Empty where
// GCC's clones are not available, and under ThreadSanitizer, whose runtime is not up when
// the resolver runs.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
#define EDGELLM_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EDGELLM_CPU_CLONES
#endif
