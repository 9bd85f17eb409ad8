// What every SIMD dot_rows_q8 (kernels.h) reads of its q8_0 queries once, before its loop
// over the keys: the kernels keep their keys' codes for head sizes up to kMaxQ8Hd on the
// stack and take the queries kQ8Queries at a time.
//
// Internal linkage (an anonymous namespace): each kernel set's translation unit is compiled
// for its own ISA, and one shared out-of-line copy could be the wrong ISA's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/block_formats.h"
#include "kernels/fp16.h"

namespace edgellm {
namespace {

constexpr int64_t kMaxQ8Hd = 256;
constexpr int kQ8Queries = 64;

// For queries g < n (query g at q + q_stride * g) and their blocks b < nb: the scale in
// dq[nb * g + b] and, when code_sum is not null, the sum of the block's 32 codes there.
inline void read_q8_queries(const uint8_t* q, size_t q_stride, int n, int64_t nb, float* dq,
                            int32_t* code_sum) {
    for (int g = 0; g < n; ++g)
        for (int64_t b = 0; b < nb; ++b) {
            const block_q8_0* qb = (const block_q8_0*)(q + q_stride * (size_t)g) + b;
            dq[nb * g + b] = fp16_to_f32(qb->d);
            if (code_sum) {
                int32_t sum = 0;
                for (int i = 0; i < 32; ++i) sum += qb->qs[i];
                code_sum[nb * g + b] = sum;
            }
        }
}

}  // namespace
}  // namespace edgellm
