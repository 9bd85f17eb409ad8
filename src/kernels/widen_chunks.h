// V rows widened to floats once for many heads (the x86 vec_mad_n kernels): the rows go in
// chunks of as many as `floats` widened floats hold, row r of a chunk at buf + hd * r.
// Like count_dispatch.h, every kernel passes its own lambdas, so each instantiation belongs
// to the translation unit (compiled for its own instruction set) that made it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace edgellm {

// widen(row, dst) writes one row's hd floats at dst; then sum(c0, n) weighs the chunk's n
// rows, rows c0 .. c0 + n - 1 of the n_rows, from buf. Chunks go in row order.
template <typename Widen, typename Sum>
inline void over_widened_chunks(int64_t hd, int64_t n_rows, const uint8_t* x, size_t bx,
                                float* buf, int64_t floats, Widen&& widen, Sum&& sum) {
    const int64_t chunk = floats / hd;
    for (int64_t c0 = 0; c0 < n_rows; c0 += chunk) {
        const int64_t n = std::min(chunk, n_rows - c0);
        for (int64_t r = 0; r < n; ++r) widen(x + bx * (size_t)(c0 + r), buf + hd * r);
        sum(c0, n);
    }
}

}  // namespace edgellm
