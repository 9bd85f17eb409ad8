#include "compute/matmul.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "edgellm/error.h"
#include "kernels/kernels.h"
#include "kernels/panel.h"
#include "kernels/x16.h"

namespace edgellm {

namespace {

constexpr size_t kLine = 64;
// The largest tile of tokens and panel of rows a panel kernel has (the GLU's stack tile).
constexpr int kMaxPanelCols = 32;
constexpr int kMaxPanelRows = 16;

size_t round_up(size_t v) {
    return (v + kLine - 1) / kLine * kLine;
}

// Whether a batch of n_rows activation rows for weights of this vec_dot_type takes the
// panel GEMM.
bool panel_batch(TensorType act_type, int64_t n, int64_t n_rows) {
    return n_rows >= kPanelMinTokens && panel_kernel().gemm != nullptr && n % 32 == 0 &&
           panel_act_supported(act_type);
}

// Whether the activation rows for w get panel blocks (the decision quantize_activations
// and matmul_quantized both make): for the panel GEMM, and always for x16 weights.
bool act_blocks(const TensorView& w, int64_t n_rows) {
    const TensorType vdt = type_kernels(w.type).vec_dot_type;
    return w.x16 || panel_batch(vdt, w.ne[0], n_rows);
}

size_t pack_tmp_bytes(int64_t n) {
    return round_up((size_t)n + 2 * sizeof(float) * (size_t)(n / 16) + 16);
}

// The panel GEMM packs a chunk of panels at a time and runs every tile of tokens over the
// whole chunk, so a tile's activations are read from L1 (or L2) once per chunk rather than
// streamed from L3 once per panel: a 512-token batch's activation blocks (1.5 MB for
// 1536 columns) do not fit in L2, a chunk of panels does. Chunks hold about this much.
constexpr size_t kPanelChunkBytes = 384 * 1024;

// Whether a batch over w takes the set's exact x16 GEMM (x16.h, X16TileKernel: the
// GEMV's bits) instead of the panel GEMM, through the same per-thread panels.
bool exact_x16(const TensorView& w) {
    return w.x16 && type_kernels(w.type).x16_tiles.gemm != nullptr &&
           panel_kernel().gemm_tiled != nullptr && panel_kernel().rows == kX16Rows;
}

// Tokens per call of the exact GEMM (it runs them all over each 256-block of the panel),
// and the per-thread results of a call for the feed-forward's up weights.
constexpr int64_t kExactCols = 512;
size_t exact_up_bytes(const TensorView& w) {
    return exact_x16(w) ? round_up(sizeof(float) * kX16Rows * kExactCols) : 0;
}

// Bytes of one panel of w in the per-thread chunk.
size_t panel_stride(const TensorView& w) {
    const size_t one = round_up(panel_bytes_max(panel_kernel().rows, w.ne[0]));
    return exact_x16(w) ? std::max(one, round_up(type_kernels(w.type).x16_tiles.panel_bytes(w.ne[0])))
                        : one;
}

// Panels per chunk for weights w.
int64_t panel_chunk(const TensorView& w) {
    return std::max<int64_t>(1, (int64_t)(kPanelChunkBytes / panel_stride(w)));
}

// Per-thread bytes for one x16 group of w: its rows back in the file's layout, or its panel
// of 16 rows (sliced into smaller panels); 0 for other weights.
size_t x16_group_tmp_bytes(const TensorView& w) {
    if (!w.x16) return 0;
    return round_up(std::max((size_t)kX16Rows * w.row_bytes(), panel_bytes_max(kX16Rows, w.ne[0])));
}

// Per-thread bytes for the panel GEMM: a chunk of panels, the unpacking scratch and, for
// x16 weights, a group of them (x16_group_tmp_bytes).
size_t panel_thread_bytes(const TensorView& w) {
    const int P = panel_kernel().rows;
    if (P == 0) return 0;  // no panel GEMM (x16 weights' blocks only): no panels to size
    const int64_t n = w.ne[0];
    return panel_stride(w) * (size_t)panel_chunk(w) + pack_tmp_bytes(n) + x16_group_tmp_bytes(w) +
           exact_up_bytes(w);
}

// Whether w times a batch of n_tokens takes the panel GEMM.
bool takes_panels(const TensorView& w, int64_t n_tokens) {
    const TypeKernels& k = type_kernels(w.type);
    return k.unpack_i8 && w.ne[0] % k.i8_group == 0 &&
           panel_batch(k.vec_dot_type, w.ne[0], n_tokens) &&
           !(w.x16 && n_tokens <= k.gemv_x16_cols);
}

// Whether the batch's activations also go into tiles of 16 tokens (PanelActTile): for a
// panel kernel that reads them, when the batch takes it.
bool act_tiles(const TensorView& w, int64_t n_rows) {
    return panel_kernel().gemm_tiled != nullptr && takes_panels(w, n_rows);
}

int64_t n_token_tiles(int64_t n_rows) {
    return (n_rows + kPanelTileTokens - 1) / kPanelTileTokens;
}

size_t act_tile_bytes(const TensorView& w, int64_t n_rows) {
    if (!act_tiles(w, n_rows)) return 0;
    return sizeof(PanelActTile) * (size_t)(w.ne[0] / 32) * (size_t)n_token_tiles(n_rows);
}

// The exact x16 GEMM's pair tiles (x16.h) of a batch: per tile of tokens, n / 64 pairs.
size_t act_pair_stride(int64_t n) {
    return kPanelPairBytes * (size_t)(n / 64);
}
size_t act_pair_bytes(const TensorView& w, int64_t n_rows) {
    if (!act_tiles(w, n_rows) || !exact_x16(w)) return 0;
    return act_pair_stride(w.ne[0]) * (size_t)n_token_tiles(n_rows);
}

// The bf16 GEMM (kernels/panel.h): a thread dequantizes a chunk of panels of 16 rows to
// f32 a slice of kBf16Slice elements at a time (the type's to_float) and packs them as
// bf16, then runs every pair of activation tiles over the chunk's pairs of panels.
constexpr size_t kBf16ChunkBytes = 512 * 1024;

int64_t bf16_slice(int64_t n) {
    return n % 256 == 0 ? 256 : 32;
}
int64_t bf16_chunk(const TensorView& w) {
    const size_t one = sizeof(uint16_t) * 16 * (size_t)w.ne[0];
    return std::max<int64_t>(2, (int64_t)(kBf16ChunkBytes / one) / 2 * 2);
}
size_t bf16_tile_bytes(int64_t n, int64_t n_rows) {
    return round_up(sizeof(uint16_t) * 16 * (size_t)n * (size_t)n_token_tiles(n_rows));
}
// Per thread: the chunk's panels, an f32 slice of 16 rows, a group of x16 rows in the
// file's layout, and a block of results for a batch's last, partial tile.
size_t bf16_thread_bytes(const TensorView& w) {
    const int64_t n = w.ne[0];
    return round_up(sizeof(uint16_t) * 16 * (size_t)n) * (size_t)bf16_chunk(w) +
           round_up(sizeof(float) * 16 * (size_t)bf16_slice(n)) +
           (w.x16 ? round_up((size_t)kX16Rows * w.row_bytes()) : 0) + sizeof(float) * 32 * 32;
}

// Where the panel blocks, their tiles and the per-thread panels start in the scratch.
struct PanelScratch {
    PanelActBlock* act;
    PanelActTile* tiles;  // tile t's blocks at tiles + t * (n / 32); null without tiles
    int8_t* pairs;        // tile t's pair tiles at pairs + t * act_pair_stride(n); or null
    uint8_t* threads;
    size_t per_thread;
};
PanelScratch panel_scratch(void* xq, const TensorView& w, int64_t n_rows) {
    const int64_t n = w.ne[0];
    const TensorType act_type = type_kernels(w.type).vec_dot_type;
    const size_t q_bytes = round_up(row_size(act_type, n) * (size_t)n_rows);
    const size_t act_bytes = sizeof(PanelActBlock) * (size_t)(n / 32) * (size_t)n_rows;
    const size_t tile_bytes = act_tile_bytes(w, n_rows), pair_bytes = act_pair_bytes(w, n_rows);
    uint8_t* base = (uint8_t*)(((uintptr_t)xq + kLine - 1) / kLine * kLine);
    uint8_t* tiles = base + q_bytes + act_bytes;
    return {(PanelActBlock*)(base + q_bytes), tile_bytes ? (PanelActTile*)tiles : nullptr,
            pair_bytes ? (int8_t*)(tiles + tile_bytes) : nullptr, tiles + tile_bytes + pair_bytes,
            panel_thread_bytes(w)};
}

}  // namespace

bool takes_exact_x16(const TensorView& w, int64_t n_tokens) {
    return exact_x16(w) && act_tiles(w, n_tokens);
}

bool takes_bf16(const TensorView& w, int64_t n_tokens) {
    const PanelKernel& pk = panel_kernel();
    return pk.bf16_gemm && takes_panels(w, n_tokens) &&
           w.n_rows() % 16 == 0 && w.ne[0] % 32 == 0 && type_kernels(w.type).to_float &&
           w.ne[0] % tensor_type_info(w.type).block_size == 0 &&
           bf16_slice(w.ne[0]) % tensor_type_info(w.type).block_size == 0;
}

static size_t int8_buffer_size(const TensorView& w, int64_t n_rows, int n_threads);

size_t activation_buffer_size(const TensorView& w, int64_t n_rows, int n_threads) {
    // (the larger of both: a context sized at n_batch runs smaller batches, which may take
    // the int8 path with its own per-thread panels)
    const size_t int8 = int8_buffer_size(w, n_rows, n_threads);
    if (takes_bf16(w, n_rows))
        return std::max(int8, kLine + bf16_tile_bytes(w.ne[0], n_rows) +
                                  bf16_thread_bytes(w) * (size_t)std::max(1, n_threads));
    return int8;
}

// The int8 panel GEMM's (or the per-row path's) activations and scratch.
static size_t int8_buffer_size(const TensorView& w, int64_t n_rows, int n_threads) {
    const int64_t n = w.ne[0];
    const TensorType vdt = type_kernels(w.type).vec_dot_type;
    const size_t q_bytes = row_size(vdt, n) * (size_t)n_rows;
    if (!act_blocks(w, n_rows)) return q_bytes;
    const size_t act = sizeof(PanelActBlock) * (size_t)(n / 32) * (size_t)n_rows;
    const size_t threads =
        panel_batch(vdt, n, n_rows) ? panel_thread_bytes(w) * (size_t)std::max(1, n_threads) : 0;
    return kLine + round_up(q_bytes) + act + act_tile_bytes(w, n_rows) + act_pair_bytes(w, n_rows) +
           threads;
}

void quantize_activations(ThreadPool& pool, const TensorView& w, const float* x, int64_t x_stride,
                          int64_t n_rows, void* xq, RowPrep prep) {
    const int64_t n = w.ne[0];
    if (takes_bf16(w, n_rows)) {
        // bf16 tiles of 16 tokens, each row prepared first
        const PanelKernel& pk = panel_kernel();
        uint16_t* tiles = (uint16_t*)(((uintptr_t)xq + kLine - 1) / kLine * kLine);
        pool.run([&](int ith, int nth) {
            int64_t t0, t1;
            ThreadPool::split(n_token_tiles(n_rows), ith, nth, &t0, &t1);
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t r0 = t * 16;
                const int m = (int)std::min<int64_t>(16, n_rows - r0);
                if (prep.fn)
                    for (int i = 0; i < m; ++i) prep.fn(prep.ctx, r0 + i);
                pk.bf16_act(x + r0 * x_stride, (size_t)x_stride, m, n,
                            tiles + (size_t)t * 16 * (size_t)n);
            }
        });
        return;
    }
    const TensorType vdt = type_kernels(w.type).vec_dot_type;
    const TypeKernels& vk = type_kernels(vdt);
    EDGELLM_ASSERT(vk.from_float != nullptr, "activation type has no quantizer");
    const size_t row_bytes = row_size(vdt, n);
    const bool blocks = act_blocks(w, n_rows);
    const PanelScratch ps = blocks ? panel_scratch(xq, w, n_rows) : PanelScratch{};
    PanelActBlock* act = ps.act;
    auto body = [&](int ith, int nth) {
        int64_t r0, r1;
        ThreadPool::split(n_rows, ith, nth, &r0, &r1);
        for (int64_t r = r0; r < r1; ++r) {
            uint8_t* q = (uint8_t*)xq + (size_t)r * row_bytes;
            if (prep.fn) prep.fn(prep.ctx, r);
            vk.from_float(x + r * x_stride, q, n);
            if (act) to_panel_act(vdt, q, n, act + (size_t)r * (size_t)(n / 32));
        }
    };
    if (n_rows == 1)
        body(0, 1);
    else
        pool.run(body);
    if (ps.tiles) {
        // tiles of 16 tokens, once all rows' blocks are there
        const int64_t nb = n / 32;
        pool.run([&](int ith, int nth) {
            int64_t t0, t1;
            ThreadPool::split(n_token_tiles(n_rows), ith, nth, &t0, &t1);
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t r0 = t * kPanelTileTokens;
                to_panel_act_tiles(act + (size_t)r0 * (size_t)nb, (size_t)nb, nb,
                                   (int)std::min<int64_t>(kPanelTileTokens, n_rows - r0),
                                   ps.tiles + (size_t)t * (size_t)nb);
                if (ps.pairs)
                    to_panel_act_pairs(ps.tiles + (size_t)t * (size_t)nb, nb,
                                       ps.pairs + act_pair_stride(n) * (size_t)t);
            }
        });
    }
}

namespace {

// The panel GEMM: each thread unpacks P weight rows at a time into its own panel and
// multiplies it with every token (x16 weights: the rows first back in the file's layout,
// or straight into panels when P is 16). With w2 (the same type and shape, the same
// activations), each thread packs the same rows of both, and for every tile of tokens
// y = glu(w x, w2 x) while both are in its cache: the feed-forward's gate and up.
void panel_matmul(ThreadPool& pool, const TensorView& w, const TensorView* w2, GluFn glu,
                  const void* xq, int64_t n_tokens, float* y, int64_t y_stride) {
    const TypeKernels& k = type_kernels(w.type);
    const int64_t n = w.ne[0];
    const int64_t n_rows = w.n_rows();
    const size_t w_row_bytes = w.row_bytes();
    const PanelKernel& pk = panel_kernel();
    const PanelScratch ps = panel_scratch(const_cast<void*>(xq), w, n_tokens);
    const int P = pk.rows;
    const int64_t n_panels = (n_rows + P - 1) / P;
    // q8_K activations share one scale per 256: the kernel meets it once per run
    const int run = pk.runs && k.vec_dot_type == TensorType::Q8_K ? 256 / k.i8_group : 1;
    // x16 weights become panels of 16 rows directly
    const bool direct = w.x16 && P == kX16Rows;
    // x16 q2_K / q4_K / q6_K with AMX: the exact GEMM, whose panels hold the scaled weights
    const bool exact = exact_x16(w) && ps.pairs != nullptr;
    // small codes with a kernel for them (AVX2): biased panels (panel.h, gemm_small)
    const bool small = pk.gemm_small && !direct && !exact && !ps.tiles &&
                       k.i8_bits <= kPanelSmallBits;
    const int bias = small ? panel_code_bias(k.i8_bits, k.i8_min) : 0;
    // x16 weights in panels of fewer rows (AVX2's 8): each a slice of the group's panel of 16,
    // its bytes moved from x16_to_panel's unsigned form to the kernel's
    const bool sliced = w.x16 && !direct && !exact && kX16Rows % P == 0 && P < kX16Rows &&
                        x16_layout(w.type) && x16_has_panel(w.type);
    const uint8_t slice_add =
        k.i8_min || (pk.unsigned_q && !small) ? 0 : (uint8_t)(128 + bias);
    // with w2, half the chunk's panels are its own
    const int64_t chunk = w2 ? panel_chunk(w) / 2 : panel_chunk(w);
    const size_t panel_stride = edgellm::panel_stride(w);
    pool.run([&](int ith, int nth) {
        int64_t p0, p1;
        ThreadPool::split(n_panels, ith, nth, &p0, &p1);
        uint8_t* panels = ps.threads + ps.per_thread * (size_t)ith;
        uint8_t* panels2 = panels + panel_stride * (size_t)chunk;  // w2's (only with w2)
        uint8_t* tmp = panels + panel_stride * (size_t)(w2 ? 2 * chunk : chunk);
        uint8_t* rows_tmp = tmp + pack_tmp_bytes(n);
        float* exact_up = (float*)(rows_tmp + x16_group_tmp_bytes(w));
        int64_t group_in_tmp = -1;
        auto pack = [&](const TensorView& wt, int64_t p, uint8_t* panel) {
            const int64_t r0 = p * P;
            const int rows = (int)std::min<int64_t>(P, n_rows - r0);
            const uint8_t* src = (const uint8_t*)wt.data + (size_t)r0 * w_row_bytes;
            if (exact) {
                k.x16_tiles.pack(src, n, panel);
                return;
            }
            if (direct) {
                if (k.to_panel_x16)
                    k.to_panel_x16(src, n, panel, pk.unsigned_q);
                else
                    x16_to_panel(wt.type, src, n, panel, pk.unsigned_q);
                return;
            }
            if (wt.x16 && sliced) {
                // the group as one panel of 16 rows (unsigned bytes), this panel its slice
                const int64_t group = r0 / kX16Rows;
                if (group != group_in_tmp) {
                    x16_to_panel(wt.type, (const uint8_t*)wt.data + (size_t)group * kX16Rows * w_row_bytes,
                                 n, rows_tmp, true);
                    group_in_tmp = group;
                }
                panel_slice(rows_tmp, kX16Rows, P, (int)(r0 % kX16Rows) / P, k.i8_group, k.i8_min,
                            n, slice_add, panel);
                return;
            }
            if (wt.x16) {
                // the panel's group back in the file's layout (P divides 16 or is 16; one
                // weight only: matmul_glu takes x16 weights only as direct panels)
                const int64_t group = r0 / kX16Rows;
                EDGELLM_ASSERT((r0 + rows - 1) / kX16Rows == group, "panel across groups");
                if (group != group_in_tmp) {
                    x16_unpack_group(wt.type,
                                     (const uint8_t*)wt.data + (size_t)group * kX16Rows * w_row_bytes,
                                     n, rows_tmp, w_row_bytes);
                    group_in_tmp = group;
                }
                src = rows_tmp + (size_t)(r0 % kX16Rows) * w_row_bytes;
            }
            pack_panel(k, src, w_row_bytes, rows, P, n, panel, tmp, pk.unsigned_q && !small, bias);
        };
        auto gemm = [&](const uint8_t* panel, int64_t c, int64_t nc, float* out, size_t out_stride,
                        int rows) {
            if (exact) {  // (rows is 16: x16 weights have whole groups)
                const size_t nb = (size_t)(n / 32);
                const size_t ps_stride = act_pair_stride(n);
                k.x16_tiles.gemm(panel, n, ps.tiles + (size_t)(c / kPanelTileTokens) * nb, nb,
                                 ps.pairs + ps_stride * (size_t)(c / kPanelTileTokens), ps_stride,
                                 nc, out, out_stride);
                return;
            }
            if (ps.tiles) {  // c is a multiple of 16 (pk.cols is)
                const size_t nb = (size_t)(n / 32);
                pk.gemm_tiled(panel, n / k.i8_group, k.i8_group, k.i8_min, run,
                              ps.tiles + (size_t)(c / kPanelTileTokens) * nb, nb, nc, out,
                              out_stride, rows);
                return;
            }
            if (small) {
                pk.gemm_small(k.i8_bits, panel, n / k.i8_group, k.i8_group, k.i8_min, run,
                              ps.act + (size_t)c * (size_t)(n / 32), (size_t)(n / 32), nc, out,
                              out_stride, rows);
                return;
            }
            pk.gemm(panel, n / k.i8_group, k.i8_group, k.i8_min, run,
                    ps.act + (size_t)c * (size_t)(n / 32), (size_t)(n / 32), nc, out, out_stride,
                    rows);
        };
        for (int64_t pc = p0; pc < p1; pc += chunk) {
            const int64_t pe = std::min(p1, pc + chunk);
            for (int64_t p = pc; p < pe; ++p) {
                pack(w, p, panels + panel_stride * (size_t)(p - pc));
                if (w2) pack(*w2, p, panels2 + panel_stride * (size_t)(p - pc));
            }
            // every tile of tokens over the chunk's panels (the exact GEMM: all of them)
            const int64_t cols = exact ? kExactCols : pk.cols;
            for (int64_t c = 0; c < n_tokens; c += cols) {
                const int64_t nc = std::min<int64_t>(cols, n_tokens - c);
                for (int64_t p = pc; p < pe; ++p) {
                    const int64_t r0 = p * P;
                    const int rows = (int)std::min<int64_t>(P, n_rows - r0);
                    float* out = y + c * y_stride + r0;
                    gemm(panels + panel_stride * (size_t)(p - pc), c, nc, out, (size_t)y_stride,
                         rows);
                    if (!w2) continue;
                    float up_tile[kMaxPanelCols * kMaxPanelRows];
                    float* up = exact ? exact_up : up_tile;
                    gemm(panels2 + panel_stride * (size_t)(p - pc), c, nc, up, (size_t)P, rows);
                    for (int64_t i = 0; i < nc; ++i) glu(out + i * y_stride, up + i * P, rows);
                }
            }
        }
    });
}

void bf16_matmul(ThreadPool& pool, const TensorView& w, const void* xq, int64_t n_tokens,
                 float* y, int64_t y_stride) {
    const PanelKernel& pk = panel_kernel();
    const TypeKernels& k = type_kernels(w.type);
    const auto& info = tensor_type_info(w.type);
    const int64_t n = w.ne[0];
    const int64_t ks = n / kBf16Step;
    const int64_t n_panels = w.n_rows() / 16;
    const int64_t n_tiles = n_token_tiles(n_tokens);
    const size_t w_row_bytes = w.row_bytes();
    const size_t panel_elems = 16 * (size_t)n;
    const int64_t slice = bf16_slice(n);
    const int64_t chunk = bf16_chunk(w);
    const uint16_t* tiles = (const uint16_t*)(((uintptr_t)xq + kLine - 1) / kLine * kLine);
    uint8_t* scratch = (uint8_t*)tiles + bf16_tile_bytes(n, n_tokens);
    const size_t per_thread = bf16_thread_bytes(w);
    const int64_t n_pairs = (n_panels + 1) / 2;
    pool.run([&](int ith, int nth) {
        int64_t q0, q1;
        ThreadPool::split(n_pairs, ith, nth, &q0, &q1);
        const int64_t p0 = 2 * q0, p1 = std::min(n_panels, 2 * q1);
        uint8_t* mine = scratch + per_thread * (size_t)ith;
        uint16_t* panels = (uint16_t*)mine;
        float* rows_f32 = (float*)(mine + round_up(sizeof(uint16_t) * panel_elems) * (size_t)chunk);
        uint8_t* rows_tmp = (uint8_t*)rows_f32 + round_up(sizeof(float) * 16 * (size_t)slice);
        float* part = (float*)(rows_tmp + (w.x16 ? round_up((size_t)kX16Rows * w_row_bytes) : 0));
        for (int64_t pc = p0; pc < p1; pc += chunk) {
            const int64_t pe = std::min(p1, pc + chunk);
            for (int64_t p = pc; p < pe; ++p) {
                const uint8_t* src = (const uint8_t*)w.data + (size_t)p * 16 * w_row_bytes;
                if (w.x16) {  // the group back in the file's layout first
                    x16_unpack_group(w.type, src, n, rows_tmp, w_row_bytes);
                    src = rows_tmp;
                }
                uint16_t* panel = panels + panel_elems * (size_t)(p - pc);
                for (int64_t s0 = 0; s0 < n; s0 += slice) {
                    const size_t at = (size_t)(s0 / info.block_size) * info.type_size;
                    for (int r = 0; r < 16; ++r)
                        k.to_float(src + (size_t)r * w_row_bytes + at, rows_f32 + (size_t)r * (size_t)slice,
                                   slice);
                    pk.bf16_pack(rows_f32, (size_t)slice, slice,
                                 panel + (size_t)(s0 / kBf16Step) * kBf16StepElems);
                }
            }
            for (int64_t c = 0; c < n_tiles; c += 2) {
                const int nt = (int)std::min<int64_t>(2, n_tiles - c);
                const int64_t m = std::min<int64_t>(16 * nt, n_tokens - 16 * c);
                for (int64_t p = pc; p < pe; p += 2) {
                    const int np = (int)std::min<int64_t>(2, pe - p);
                    const uint16_t* pp = panels + panel_elems * (size_t)(p - pc);
                    const uint16_t* tt = tiles + panel_elems * (size_t)c;
                    float* out = y + 16 * c * y_stride + 16 * p;
                    if (m == 16 * nt) {
                        pk.bf16_gemm(pp, panel_elems, np, tt, panel_elems, nt, ks, out, (size_t)y_stride);
                        continue;
                    }
                    pk.bf16_gemm(pp, panel_elems, np, tt, panel_elems, nt, ks, part, 32);
                    for (int64_t i = 0; i < m; ++i)
                        std::memcpy(out + i * y_stride, part + 32 * i, sizeof(float) * 16 * (size_t)np);
                }
            }
        }
    });
}

}  // namespace

bool matmul_glu(ThreadPool& pool, const TensorView& w_gate, const TensorView& w_up, GluFn glu,
                const void* xq, int64_t n_tokens, float* y, int64_t y_stride) {
    const PanelKernel& pk = panel_kernel();
    if (takes_bf16(w_gate, n_tokens)) return false;  // (the bf16 GEMM takes each alone)
    if (w_gate.type != w_up.type || w_gate.ne[0] != w_up.ne[0] || w_gate.ne[1] != w_up.ne[1] ||
        w_gate.x16 != w_up.x16 || !takes_panels(w_gate, n_tokens) || panel_chunk(w_gate) < 2 ||
        pk.cols > kMaxPanelCols || pk.rows > kMaxPanelRows ||
        (w_gate.x16 && pk.rows != kX16Rows))
        return false;
    panel_matmul(pool, w_gate, &w_up, glu, xq, n_tokens, y, y_stride);
    return true;
}

void matmul_quantized(ThreadPool& pool, const TensorView& w, const void* xq, int64_t n_tokens,
                      float* y, int64_t y_stride) {
    const TypeKernels& k = type_kernels(w.type);
    EDGELLM_ASSERT(k.vec_dot != nullptr, "weight type has no dot product");
    const int64_t n = w.ne[0];
    const int64_t n_rows = w.n_rows();
    const size_t x_row_bytes = row_size(k.vec_dot_type, n);
    const size_t w_row_bytes = w.row_bytes();
    if (takes_bf16(w, n_tokens)) {
        bf16_matmul(pool, w, xq, n_tokens, y, y_stride);
        return;
    }
    if (takes_panels(w, n_tokens)) {
        panel_matmul(pool, w, nullptr, nullptr, xq, n_tokens, y, y_stride);
        return;
    }
    if (w.x16) {
        // GEMV over groups of 16 interleaved rows; each thread takes whole groups.
        EDGELLM_ASSERT(k.gemv_x16 != nullptr, "x16 weights without a GEMV");
        const PanelScratch ps = panel_scratch(const_cast<void*>(xq), w, n_tokens);
        const int64_t n_groups = n_rows / kX16Rows;
        const size_t group_bytes = kX16Rows * w_row_bytes;
        pool.run([&](int ith, int nth) {
            int64_t g0, g1;
            ThreadPool::split(n_groups, ith, nth, &g0, &g1);
            for (int64_t g = g0; g < g1; ++g)
                k.gemv_x16(n, (const uint8_t*)w.data + (size_t)g * group_bytes, ps.act,
                           (size_t)(n / 32), n_tokens, y + g * kX16Rows, (size_t)y_stride);
        });
        return;
    }
    // Rows in blocks of 16 so threads write separate cache lines of y.
    constexpr int64_t kRowBlock = 16;
    const int64_t n_blocks = (n_rows + kRowBlock - 1) / kRowBlock;
    pool.run([&](int ith, int nth) {
        int64_t b0, b1;
        ThreadPool::split(n_blocks, ith, nth, &b0, &b1);
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t r_end = std::min(n_rows, (b + 1) * kRowBlock);
            int64_t t = 0;
            if (k.vec_dot_4) {
                // Four tokens at a time: each weight row's blocks are decoded once for four.
                float s4[4];
                for (; t + 4 <= n_tokens; t += 4) {
                    const uint8_t* xt = (const uint8_t*)xq + (size_t)t * x_row_bytes;
                    for (int64_t r = b * kRowBlock; r < r_end; ++r) {
                        k.vec_dot_4(n, s4, (const uint8_t*)w.data + (size_t)r * w_row_bytes, xt,
                                    x_row_bytes);
                        for (int c = 0; c < 4; ++c) y[(t + c) * y_stride + r] = s4[c];
                    }
                }
            }
            for (; t < n_tokens; ++t) {
                const uint8_t* xt = (const uint8_t*)xq + (size_t)t * x_row_bytes;
                float* yt = y + t * y_stride;
                for (int64_t r = b * kRowBlock; r < r_end; ++r)
                    k.vec_dot(n, &yt[r], (const uint8_t*)w.data + (size_t)r * w_row_bytes, xt);
            }
        }
    });
}

void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t x_stride,
            int64_t n_tokens, void* xq, float* y, int64_t y_stride) {
    quantize_activations(pool, w, x, x_stride, n_tokens, xq);
    matmul_quantized(pool, w, xq, n_tokens, y, y_stride);
}

void row_to_float(const TensorView& w, int64_t r, float* dst) {
    const TypeKernels& k = type_kernels(w.type);
    if (!w.x16) {
        k.to_float(w.row(r), dst, w.ne[0]);
        return;
    }
    // Block by block back into the file's format, then dequantized.
    const auto& info = tensor_type_info(w.type);
    const uint8_t* group =
        (const uint8_t*)w.data + (size_t)(r / kX16Rows) * kX16Rows * w.row_bytes();
    alignas(64) uint8_t block[512];
    EDGELLM_ASSERT(info.type_size <= sizeof block, "block larger than expected");
    for (int64_t b = 0; b < w.ne[0] / info.block_size; ++b) {
        x16_unpack_block(w.type, group, (int)(r % kX16Rows), b, block);
        k.to_float(block, dst + b * info.block_size, info.block_size);
    }
}

int64_t x16_gemv_max_tokens(TensorType t) {
    return type_kernels(t).gemv_x16_cols;
}

bool x16_pays(const TensorView& w) {
    const TypeKernels& k = type_kernels(w.type);
    return x16_layout(w.type) && k.gemv_x16 && std::string(k.gemv_x16_isa) != "ref" &&
           w.n_rows() % kX16Rows == 0 && w.ne[0] % tensor_type_info(w.type).block_size == 0 &&
           w.ne[0] % 32 == 0 && panel_act_supported(k.vec_dot_type);
}

TensorView repack_x16(ThreadPool* pool, const TensorView& w, uint8_t* dst) {
    const int64_t n_groups = w.n_rows() / kX16Rows;
    const size_t group_bytes = kX16Rows * w.row_bytes();
    const X16PackFn pack = type_kernels(w.type).pack_x16 ? type_kernels(w.type).pack_x16 : x16_pack;
    auto body = [&](int ith, int nth) {
        int64_t g0, g1;
        ThreadPool::split(n_groups, ith, nth, &g0, &g1);
        for (int64_t g = g0; g < g1; ++g)
            pack(w.type, (const uint8_t*)w.data + (size_t)g * group_bytes, w.row_bytes(),
                 w.ne[0], dst + (size_t)g * group_bytes);
    };
    if (pool)
        pool->run(body);
    else
        body(0, 1);
    TensorView v = w;
    v.data = dst;
    v.x16 = true;
    return v;
}

}  // namespace edgellm
