// Run-time counts turned into template arguments, for SIMD kernels whose register arrays
// are sized at compile time (the columns of a tile, the heads of a group, a panel's group
// size). Each kernel passes its own lambdas, so every instantiation belongs to the one
// translation unit (compiled with its own ISA flags) that made it: nothing here can be
// shared with, or merged into, code compiled for another instruction set.
#pragma once

#include <cstdint>

namespace edgellm {

// f.template operator()<n>() when 1 <= n <= kMax; nothing otherwise.
template <int kMax, typename F>
inline void with_count(int n, F&& f) {
    if constexpr (kMax > 0) {
        if (n == kMax)
            f.template operator()<kMax>();
        else
            with_count<kMax - 1>(n, f);
    }
}

// f.template operator()<kTile>(c) for each full tile of kTile columns starting at c, then
// f.template operator()<n>(c) once for the n < kTile columns left.
template <int kTile, typename F>
inline void over_tiles(int64_t n_cols, F&& f) {
    int64_t c = 0;
    for (; c + kTile <= n_cols; c += kTile) f.template operator()<kTile>(c);
    with_count<kTile - 1>((int)(n_cols - c), [&]<int kN>() { f.template operator()<kN>(c); });
}

// f.template operator()<G, kMin>() for a panel's group size (16 or 32) and whether it has
// offsets (kernels/panel.h).
template <typename F>
inline void with_panel_group(int G, bool has_min, F&& f) {
    if (G == 32)
        has_min ? f.template operator()<32, true>() : f.template operator()<32, false>();
    else
        has_min ? f.template operator()<16, true>() : f.template operator()<16, false>();
}

}  // namespace edgellm
