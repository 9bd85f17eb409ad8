// Row-interleaved weights (src/kernels/x16.h): the layout, described once as a list of
// segments per type, the packing both ways, and the scalar GEMV that defines the result.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/block_formats.h"
#include "kernels/fp16.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref_kernels.h"
#include "kernels/x16.h"

// The SIMD kernels do (d_r * d_act) and the fma as separate steps; so does this file.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace edgellm {

namespace {

// One segment of an x16 block:
//   Half:  32 bytes, row r's two bytes at src + 0, 1 -> 2r, 2r + 1
//   Chunk: 64 bytes, row r's four bytes at src + j -> 4r + j, each XOR `flip`
//   QhMask: 16 bytes, two 64-bit masks: bit 4r + j = bit (src + j) of row r's 32-bit qh
//          (the first mask), bit (src + 16 + j) (the second); the qh field is at byte 2
enum class Seg : uint8_t { Half, Chunk, QhMask };
struct Segment {
    Seg kind;
    uint16_t src;
    uint8_t flip = 0;
};

constexpr int kMaxSegments = 64;
struct Layout {
    int n = 0;
    Segment seg[kMaxSegments];
    void add(Seg k, int src, uint8_t flip = 0) { seg[n++] = {k, (uint16_t)src, flip}; }
};

Layout make_layout(TensorType t) {
    Layout l;
    switch (t) {
        case TensorType::Q4_0:
            l.add(Seg::Half, 0);
            for (int k = 0; k < 4; ++k) l.add(Seg::Chunk, 2 + 4 * k);
            break;
        case TensorType::Q5_0:
            l.add(Seg::Half, 0);
            for (int k = 0; k < 4; ++k) l.add(Seg::QhMask, 4 * k);
            for (int k = 0; k < 4; ++k) l.add(Seg::Chunk, 6 + 4 * k);
            break;
        case TensorType::Q8_0:
            l.add(Seg::Half, 0);
            for (int k = 0; k < 8; ++k) l.add(Seg::Chunk, 2 + 4 * k, 0x80);
            break;
        case TensorType::Q2_K:
            l.add(Seg::Half, 80);
            l.add(Seg::Half, 82);
            for (int p = 0; p < 4; ++p) l.add(Seg::Chunk, 4 * p);
            for (int c = 0; c < 16; ++c) l.add(Seg::Chunk, 16 + 4 * c);
            break;
        case TensorType::Q4_K:
            l.add(Seg::Half, 0);
            l.add(Seg::Half, 2);
            for (int p = 0; p < 3; ++p) l.add(Seg::Chunk, 4 + 4 * p);
            for (int c = 0; c < 32; ++c) l.add(Seg::Chunk, 16 + 4 * c);
            break;
        case TensorType::Q6_K:
            l.add(Seg::Half, 208);
            for (int p = 0; p < 4; ++p) l.add(Seg::Chunk, 192 + 4 * p);
            for (int h = 0; h < 2; ++h)
                for (int k = 0; k < 8; ++k) {
                    l.add(Seg::Chunk, 64 * h + 4 * k);
                    l.add(Seg::Chunk, 64 * h + 32 + 4 * k);
                    l.add(Seg::Chunk, 128 + 32 * h + 4 * k);
                }
            break;
        default:
            break;
    }
    return l;
}

size_t seg_bytes(Seg k);

// A layout as flat lists of moves for x16_pack, which runs over every weight at load (a
// segment interpreter per row was 0.55 s of the 1.5B's start-up): each segment's bytes for
// row 0 at dst (row r: + 4r for chunks, + 2r for halves, the masks once per block).
struct PackPlan {
    struct Move {
        uint16_t src, dst;
        uint32_t flip;
    };
    Move m32[kMaxSegments], m16[kMaxSegments], qh[kMaxSegments];
    int n32 = 0, n16 = 0, nqh = 0;
};

PackPlan make_plan(const Layout& l) {
    PackPlan p;
    size_t off = 0;
    for (int s = 0; s < l.n; ++s) {
        const Segment& g = l.seg[s];
        const PackPlan::Move m{g.src, (uint16_t)off, 0x01010101u * g.flip};
        if (g.kind == Seg::Chunk) p.m32[p.n32++] = m;
        if (g.kind == Seg::Half) p.m16[p.n16++] = m;
        if (g.kind == Seg::QhMask) p.qh[p.nqh++] = m;
        off += seg_bytes(g.kind);
    }
    return p;
}

// The chunk moves as runs of consecutive source words (x16.h, X16PackRuns).
X16PackRuns make_runs(const PackPlan& plan) {
    // the chunk moves by source offset, then runs of consecutive words with one flip
    std::vector<PackPlan::Move> m(plan.m32, plan.m32 + plan.n32);
    std::sort(m.begin(), m.end(), [](const auto& a, const auto& b) { return a.src < b.src; });
    X16PackRuns out;
    for (size_t i = 0; i < m.size();) {
        X16ChunkRun& r = out.run[out.n++];
        r.src = m[i].src;
        r.flip = m[i].flip;
        r.count = 0;
        while (i < m.size() && r.count < 16 && m[i].src == r.src + 4 * r.count && m[i].flip == r.flip)
            r.dst[r.count++] = m[i++].dst;
    }
    return out;
}

// A type's layout, its plan and runs, made once.
struct TypeLayout {
    Layout layout;
    PackPlan plan;
    X16PackRuns runs;  // the chunk moves as SIMD packing takes them
    explicit TypeLayout(TensorType t)
        : layout(make_layout(t)), plan(make_plan(layout)), runs(make_runs(plan)) {}
};

const TypeLayout& type_layout(TensorType t) {
    static const TypeLayout q4_0(TensorType::Q4_0), q5_0(TensorType::Q5_0), q8_0(TensorType::Q8_0),
        q2_K(TensorType::Q2_K), q4_K(TensorType::Q4_K), q6_K(TensorType::Q6_K),
        none(TensorType::F32);
    switch (t) {
        case TensorType::Q4_0:
            return q4_0;
        case TensorType::Q5_0:
            return q5_0;
        case TensorType::Q8_0:
            return q8_0;
        case TensorType::Q2_K:
            return q2_K;
        case TensorType::Q4_K:
            return q4_K;
        case TensorType::Q6_K:
            return q6_K;
        default:
            return none;
    }
}

const Layout& layout(TensorType t) {
    return type_layout(t).layout;
}
const PackPlan& pack_plan(TensorType t) {
    return type_layout(t).plan;
}

size_t seg_bytes(Seg k) {
    return k == Seg::Half ? 32 : k == Seg::Chunk ? 64 : 16;
}

uint32_t qh_bits(const uint8_t* block) {
    uint32_t h;
    std::memcpy(&h, block + 2, 4);
    return h;
}

// The 16 rows' blocks back from one x16 block (the inverse of pack_block, as fast).
void unpack_block_all(const Layout& l, const uint8_t* src, uint8_t* const blocks[16]) {
    bool qh_started = false;  // the masks OR their bits into a qh field cleared first
    for (int s = 0; s < l.n; ++s) {
        const Segment& g = l.seg[s];
        switch (g.kind) {
            case Seg::Half:
                for (int r = 0; r < 16; ++r) std::memcpy(blocks[r] + g.src, src + 2 * r, 2);
                break;
            case Seg::Chunk: {
                const uint32_t flip = 0x01010101u * g.flip;
                for (int r = 0; r < 16; ++r) {
                    uint32_t v;
                    std::memcpy(&v, src + 4 * r, 4);
                    v ^= flip;
                    std::memcpy(blocks[r] + g.src, &v, 4);
                }
                break;
            }
            case Seg::QhMask: {
                uint64_t lo, hi;
                std::memcpy(&lo, src, 8);
                std::memcpy(&hi, src + 8, 8);
                for (int r = 0; r < 16; ++r) {
                    uint32_t h = qh_started ? qh_bits(blocks[r]) : 0;
                    h |= (uint32_t)((lo >> (4 * r)) & 0xF) << g.src;
                    h |= (uint32_t)((hi >> (4 * r)) & 0xF) << (g.src + 16);
                    std::memcpy(blocks[r] + 2, &h, 4);
                }
                qh_started = true;
                break;
            }
        }
        src += seg_bytes(g.kind);
    }
}

// Row r's block back from one x16 block.
void unpack_block(const Layout& l, const uint8_t* src, int r, uint8_t* block) {
    uint32_t qh = 0;
    bool has_qh = false;
    for (int s = 0; s < l.n; ++s) {
        const Segment& g = l.seg[s];
        switch (g.kind) {
            case Seg::Half:
                std::memcpy(block + g.src, src + 2 * r, 2);
                break;
            case Seg::Chunk:
                for (int j = 0; j < 4; ++j) block[g.src + j] = src[4 * r + j] ^ g.flip;
                break;
            case Seg::QhMask: {
                uint64_t lo, hi;
                std::memcpy(&lo, src, 8);
                std::memcpy(&hi, src + 8, 8);
                for (int j = 0; j < 4; ++j) {
                    qh |= (uint32_t)((lo >> (4 * r + j)) & 1) << (g.src + j);
                    qh |= (uint32_t)((hi >> (4 * r + j)) & 1) << (g.src + 16 + j);
                }
                has_qh = true;
                break;
            }
        }
        src += seg_bytes(g.kind);
    }
    if (has_qh) std::memcpy(block + 2, &qh, 4);
}

// ---------------------------------------------------------------------------------------
// The scalar GEMV: each row's block unpacked back to the file's format, its integer sums
// exactly, then the float steps of x16.h in order.

float half_at(const uint8_t* p) {
    fp16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_f32(h);
}

// Legacy 32-element blocks: isum = sum of q * a with q the signed value.
template <TensorType T>
float row_dot_legacy(const uint8_t* group, int r, int64_t nb, const PanelActBlock* a) {
    const TypeKernels& k = reference_kernels(T);
    uint8_t block[64];
    int8_t q[32];
    float scale, offset;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        x16_unpack_block(T, group, r, b, block);
        k.unpack_i8(block, 32, q, &scale, &offset);
        int32_t isum = 0;
        for (int j = 0; j < 32; ++j) isum += (int32_t)q[j] * a[b].qs[j];
        const float s = half_at(block) * a[b].d;
        acc = std::fma(s, (float)isum, acc);
    }
    return acc;
}

// K-quants with scales and mins (q2_K: 16 sub-blocks of 16, q4_K: 8 of 32): per 256-block
// isum = sum sc_s * (q . a over s), msum = sum m_s * sum(a over s), then x16.h's steps.
// Unpack(block, q, sc, m) is the reference's decoder of the block.
template <typename Block, TensorType T, int kSub,
          void (*Unpack)(const Block&, uint8_t*, uint8_t*, uint8_t*)>
float row_dot_scale_min(const uint8_t* group, int r, int64_t nb, const PanelActBlock* a) {
    constexpr int kLen = QK_K / kSub;  // elements per sub-block
    Block blk;
    uint8_t q[QK_K], sc[kSub], m[kSub];
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        x16_unpack_block(T, group, r, b, (uint8_t*)&blk);
        Unpack(blk, q, sc, m);
        const PanelActBlock* ab = a + 8 * b;
        int32_t isum = 0, msum = 0;
        for (int s = 0; s < kSub; ++s) {
            int32_t d = 0, t = 0;
            for (int j = 0; j < kLen; ++j) {
                const int e = kLen * s + j;  // element: panel block e / 32, byte e % 32
                const int8_t av = ab[e / 32].qs[e % 32];
                d += (int32_t)q[e] * av;
                t += av;
            }
            isum += (int32_t)sc[s] * d;
            msum += (int32_t)m[s] * t;
        }
        const float da = ab[0].d;
        acc = std::fma(fp16_to_f32(blk.d) * da, (float)isum, acc);
        acc = std::fma(fp16_to_f32(blk.dmin) * da, (float)(-msum), acc);
    }
    return acc;
}

float row_dot_q6_K(const uint8_t* group, int r, int64_t nb, const PanelActBlock* a) {
    block_q6_K blk;
    int8_t q[QK_K];
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        x16_unpack_block(TensorType::Q6_K, group, r, b, (uint8_t*)&blk);
        ref::unpack_q6_K(blk, q);
        const PanelActBlock* ab = a + 8 * b;
        int32_t isum = 0;
        for (int s = 0; s < 16; ++s) {
            int32_t d = 0;
            for (int j = 0; j < 16; ++j)
                d += (int32_t)q[16 * s + j] * ab[s / 2].qs[16 * (s % 2) + j];
            isum += (int32_t)blk.scales[s] * d;
        }
        acc = std::fma(fp16_to_f32(blk.d) * ab[0].d, (float)isum, acc);
    }
    return acc;
}

template <float (*RowDot)(const uint8_t*, int, int64_t, const PanelActBlock*), int kBlock>
void gemv_ref(int64_t n, const uint8_t* group, const PanelActBlock* act, size_t act_stride,
              int64_t n_cols, float* y, size_t y_stride) {
    for (int64_t c = 0; c < n_cols; ++c)
        for (int r = 0; r < kX16Rows; ++r)
            y[(size_t)c * y_stride + r] =
                RowDot(group, r, n / kBlock, act + (size_t)c * act_stride);
}

}  // namespace

void set_x16_gemvs(TypeKernels* table, const X16Gemvs& g) {
    using T = TensorType;
    const std::pair<T, GemvX16Fn> fns[] = {{T::Q4_0, g.q4_0}, {T::Q5_0, g.q5_0}, {T::Q8_0, g.q8_0},
                                           {T::Q2_K, g.q2_K}, {T::Q4_K, g.q4_K}, {T::Q6_K, g.q6_K}};
    for (const auto& [t, fn] : fns) {
        table[(uint32_t)t].gemv_x16 = fn;
        const bool kquant = t == T::Q2_K || t == T::Q4_K || t == T::Q6_K;
        table[(uint32_t)t].gemv_x16_cols =
            kquant && g.max_cols_kquants > 0 ? g.max_cols_kquants : g.max_cols;
    }
}

bool x16_layout(TensorType t) {
    return layout(t).n > 0;
}

void x16_pack_block_rest(TensorType t, const uint8_t* rows, size_t row_bytes, int64_t b,
                         uint8_t* dst) {
    const PackPlan& plan = pack_plan(t);
    const size_t bs = tensor_type_info(t).type_size;
    for (int r = 0; r < 16; ++r) {
        const uint8_t* blk = rows + (size_t)r * row_bytes + (size_t)b * bs;
        for (int i = 0; i < plan.n16; ++i)
            std::memcpy(dst + plan.m16[i].dst + 2 * r, blk + plan.m16[i].src, 2);
    }
    for (int i = 0; i < plan.nqh; ++i) {  // q5_0's high-bit masks gather from all 16 rows
        uint64_t lo = 0, hi = 0;
        for (int r = 0; r < 16; ++r) {
            const uint32_t h = qh_bits(rows + (size_t)r * row_bytes + (size_t)b * bs);
            lo |= (uint64_t)((h >> plan.qh[i].src) & 0xF) << (4 * r);
            hi |= (uint64_t)((h >> (plan.qh[i].src + 16)) & 0xF) << (4 * r);
        }
        std::memcpy(dst + plan.qh[i].dst, &lo, 8);
        std::memcpy(dst + plan.qh[i].dst + 8, &hi, 8);
    }
}

void x16_pack(TensorType t, const uint8_t* rows, size_t row_bytes, int64_t n, uint8_t* group) {
    const PackPlan& plan = pack_plan(t);
    const auto& info = tensor_type_info(t);
    const int64_t nb = n / info.block_size;
    const size_t bs = info.type_size;
    for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dst = group + (size_t)b * 16 * bs;
        // row by row: each row's block is read in order, the x16 block (in L1) written
        for (int r = 0; r < 16; ++r) {
            const uint8_t* blk = rows + (size_t)r * row_bytes + (size_t)b * bs;
            for (int i = 0; i < plan.n32; ++i) {
                uint32_t v;
                std::memcpy(&v, blk + plan.m32[i].src, 4);
                v ^= plan.m32[i].flip;
                std::memcpy(dst + plan.m32[i].dst + 4 * r, &v, 4);
            }
        }
        x16_pack_block_rest(t, rows, row_bytes, b, dst);
    }
}


const X16PackRuns& x16_pack_runs(TensorType t) {
    return type_layout(t).runs;
}

void x16_unpack_block(TensorType t, const uint8_t* group, int r, int64_t b, uint8_t* block) {
    const size_t bs = tensor_type_info(t).type_size;
    unpack_block(layout(t), group + (size_t)b * 16 * bs, r, block);
}

void x16_unpack_group(TensorType t, const uint8_t* group, int64_t n, uint8_t* rows,
                      size_t row_bytes) {
    const Layout& l = layout(t);
    const auto& info = tensor_type_info(t);
    const size_t bs = info.type_size;
    for (int64_t b = 0; b < n / info.block_size; ++b) {
        uint8_t* blocks[16];
        for (int r = 0; r < 16; ++r) blocks[r] = rows + (size_t)r * row_bytes + (size_t)b * bs;
        unpack_block_all(l, group + (size_t)b * 16 * bs, blocks);
    }
}

void x16_unpack_row(TensorType t, const uint8_t* group, int r, int64_t n, uint8_t* row) {
    const auto& info = tensor_type_info(t);
    for (int64_t b = 0; b < n / info.block_size; ++b)
        x16_unpack_block(t, group, r, b, row + (size_t)b * info.type_size);
}

GemvX16Fn gemv_x16_ref(TensorType t) {
    switch (t) {
        case TensorType::Q4_0:
            return gemv_ref<row_dot_legacy<TensorType::Q4_0>, 32>;
        case TensorType::Q5_0:
            return gemv_ref<row_dot_legacy<TensorType::Q5_0>, 32>;
        case TensorType::Q8_0:
            return gemv_ref<row_dot_legacy<TensorType::Q8_0>, 32>;
        case TensorType::Q2_K:
            return gemv_ref<row_dot_scale_min<block_q2_K, TensorType::Q2_K, 16, ref::unpack_q2_K>,
                            QK_K>;
        case TensorType::Q4_K:
            return gemv_ref<row_dot_scale_min<block_q4_K, TensorType::Q4_K, 8, ref::unpack_q4_K>,
                            QK_K>;
        case TensorType::Q6_K:
            return gemv_ref<row_dot_q6_K, QK_K>;
        default:
            return nullptr;
    }
}

}  // namespace edgellm
