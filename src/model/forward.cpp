// The forward pass of the llama / qwen2 family over a batch of tokens:
//
//   x = token_embd[tokens]                                    [n, n_embd]
//   per layer:
//     h = rms_norm(x) * attn_norm
//     q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)            [n, n_embd_q / n_embd_kv]
//     q, k = rope(q, pos), rope(k, pos)
//     cache[pos] = k, v                                       (f16 or q8_0)
//     x += attention(q, cache) Wo                             (causal, grouped-query)
//     h = rms_norm(x) * ffn_norm
//     x += (silu(h Wgate) * (h Wup)) Wdown
//   logits = (rms_norm(x) * output_norm) Woutput              [n_out, n_vocab]
//
// The other families are flags of HParams read here: Gemma's norms after each half, GELU
// and sliding windows; Gemma 4's widths per layer (each layer's own head size, KV heads,
// rotation and FFN width), layers attending over an earlier layer's cache (kv_layer), and
// its per-layer embeddings added after the FFN (per_layer_inputs, add_per_layer_embd).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "compute/cpu_topology.h"
#include "compute/matmul.h"
#include "compute/ops.h"
#include "kernels/kernels.h"
#include "kernels/panel.h"
#include "model/forward_step.h"

namespace edgellm {

namespace {

constexpr size_t kMaxSeq = 256;  // sequences of one context


constexpr size_t kAlign = 64;

// Lays out the scratch arena; with base == nullptr it only counts bytes. The same code
// sizes the arena, reports the memory bill and assigns the pointers.
struct Arena {
    uint8_t* base = nullptr;
    size_t used = 0;
    template <typename T>
    T* take(size_t count) {
        used = (used + kAlign - 1) / kAlign * kAlign;
        T* p = base ? (T*)(base + used) : nullptr;
        used += count * sizeof(T);
        return p;
    }
};

// Whether b's matmul can read the activations quantized for a (one vec_dot_type and
// layout), so they are quantized once for both.
bool same_activations(const TensorView& b, const TensorView& a, int64_t n) {
    if (takes_bf16(a, n) || takes_bf16(b, n))  // bf16 tiles: any type's, one width
        return takes_bf16(a, n) && takes_bf16(b, n) && a.ne[0] == b.ne[0];
    return type_kernels(b.type).vec_dot_type == type_kernels(a.type).vec_dot_type &&
           b.x16 == a.x16 && takes_exact_x16(a, n) == takes_exact_x16(b, n);
}

size_t largest_activation_buffer(const Model& m, int64_t n_batch, int64_t n_outputs,
                                 int n_threads) {
    // (both sets when the repacking is left for later: a context made before it outlives it)
    const Model::Impl& w = m.impl();
    size_t most = 0;
    for (const WeightSet* s : std::array<const WeightSet*, 2>{&w.bound, w.later.get()}) {
        if (!s) continue;
        most = std::max(most, activation_buffer_size(s->output, n_outputs, n_threads));
        if (s->pl_model_proj)
            most = std::max(most, activation_buffer_size(s->pl_model_proj, n_batch, n_threads));
        for (const LayerWeights& l : s->layers)
            for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.w_gate, &l.w_up,
                                        &l.w_down, &l.pl_gate, &l.pl_proj, &l.conv_in_proj,
                                        &l.conv_out_proj})
                if (*t) most = std::max(most, activation_buffer_size(*t, n_batch, n_threads));
    }
    return most;
}

void lay_out(Arena& a, const Model& m, const ContextParams& p, int n_threads, Context::Impl* c) {
    const HParams& h = m.hparams();
    const size_t nb = (size_t)p.n_batch;
    Context::Impl tmp;
    Context::Impl& d = c ? *c : tmp;
    const int64_t n_q = h.n_embd_q_max(), n_kv = h.n_embd_kv_max(), n_ff = h.n_ff_max();
    d.x = a.take<float>(nb * h.n_embd);
    d.xn = a.take<float>(nb * std::max(h.n_embd, n_q));
    d.q = a.take<float>(nb * n_q);
    d.k = a.take<float>(nb * n_kv);
    d.v = a.take<float>(nb * n_kv);
    d.attn = a.take<float>(nb * n_q);
    d.gate = a.take<float>(nb * n_ff);
    d.up = a.take<float>(nb * n_ff);
    if (h.n_embd_per_layer > 0) {
        d.pl_in = a.take<float>(nb * (size_t)(h.n_layer * h.n_embd_per_layer));
        d.pl_gate = a.take<float>(nb * (size_t)h.n_embd_per_layer);
        d.pl_row = a.take<float>((size_t)n_threads * (size_t)(h.n_layer * h.n_embd_per_layer));
    }
    int64_t fused = 0, conv_in = 0;  // the widest fused matrix's output, in_proj's
    for (const LayerWeights& l : m.impl().bound.layers) {
        if (l.wqkv) fused = std::max(fused, l.wqkv.ne[1]);
        if (!l.w_gate) fused = std::max(fused, l.w_up.ne[1]);
        if (l.conv_in_proj) conv_in = std::max(conv_in, l.conv_in_proj.ne[1]);
    }
    d.fused = fused ? a.take<float>(nb * (size_t)fused) : nullptr;
    d.conv_in = conv_in ? a.take<float>(nb * (size_t)conv_in) : nullptr;
    d.conv_io = conv_in ? a.take<float>(nb * (size_t)h.conv_channels) : nullptr;
    d.act_q = a.take<uint8_t>(largest_activation_buffer(m, p.n_batch, p.n_outputs, n_threads));
    d.logits = a.take<float>((size_t)p.n_outputs * h.n_vocab);
    d.out_rows = a.take<int64_t>((size_t)std::max(p.n_batch, p.n_outputs));
    d.tokens = a.take<int32_t>((size_t)p.n_batch);
    d.pos = a.take<int32_t>(nb);
    d.attn_scratch_per_thread = 0;
    for (int64_t il = 0; il < h.n_layer; ++il) {
        if (h.is_recurrent(il)) continue;  // (no attention)
        const AttentionShape s{(int)h.n_head, (int)h.n_head_kv_at(il), (int)h.head_dim_at(il), 1.0f};
        d.attn_scratch_per_thread =
            std::max(d.attn_scratch_per_thread, attention_scratch_per_thread(s, p.type_k, p.n_ctx));
    }
    d.attn_scratch = a.take<uint8_t>(d.attn_scratch_per_thread * n_threads);
}

// CPUs this process may run on (its affinity mask).
int usable_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return (int)std::max(1u, std::thread::hardware_concurrency());
    return std::max(1, CPU_COUNT(&set));
}

ContextParams resolve(const Model& m, ContextParams p) {
    if (p.n_ctx <= 0) p.n_ctx = std::min<int64_t>(m.hparams().n_ctx_train, 4096);
    if (p.cpus.empty()) {
        // By default only the big cores of a big.LITTLE SoC, and only when there are enough
        // of them for the threads asked for (two spinning threads on one core are worse).
        std::vector<int> big = big_cores();
        if (p.n_threads <= 0 || p.n_threads <= (int)big.size()) p.cpus = std::move(big);
    }
    if (p.n_threads <= 0)
        p.n_threads = p.cpus.empty() ? (int)std::max(1u, std::thread::hardware_concurrency())
                                     : (int)p.cpus.size();
    // More threads than CPUs this process may run on only makes them wait for each other
    // (a 2-CPU box given -t 4 decodes ~15x slower): use at most that many.
    p.n_threads = std::min(p.n_threads, usable_cpus());
    if (p.n_batch <= 0) p.n_batch = 512;
    p.n_batch = std::min(p.n_batch, p.n_ctx);
    if (p.n_outputs <= 0) p.n_outputs = 1;
    if (p.n_seq <= 0) p.n_seq = 1;
    p.n_outputs = std::max<int64_t>(p.n_outputs, p.n_seq);  // a step of every sequence
    return p;
}

std::string check_params(const Model& m, const ContextParams& p) {
    for (TensorType t : {p.type_k, p.type_v}) {
        const auto& ok = kv_cache_types();
        if (std::find(ok.begin(), ok.end(), t) == ok.end()) {
            std::string names;
            for (TensorType o : ok) names += std::string(names.empty() ? "" : ", ") + tensor_type_name(o);
            return std::string("KV cache type ") + tensor_type_name(t) + " is not supported (" +
                   names + ")";
        }
        const int64_t block = tensor_type_info(t).block_size;
        for (int64_t il = 0; il < m.hparams().n_layer; ++il)
            if (m.hparams().head_dim_at(il) % block != 0)
                return std::string("a ") + tensor_type_name(t) + " KV cache needs a head dimension "
                       "that is a multiple of " + std::to_string(block) + " (this model's is " +
                       std::to_string(m.hparams().head_dim_at(il)) + ")";
    }
    if (p.n_ctx > (int64_t)1 << 30) return "context size " + std::to_string(p.n_ctx) + " is absurd";
    if (p.n_seq > (int)kMaxSeq) return std::to_string(p.n_seq) + " sequences is more than 256";
    return {};
}

}  // namespace

const std::vector<TensorType>& kv_cache_types() {
    using T = TensorType;
    static const std::vector<TensorType> types = {T::F32,  T::F16,  T::BF16, T::Q8_0, T::Q4_0,
                                                  T::Q4_1, T::IQ4_NL, T::Q5_0, T::Q5_1};
    return types;
}

KvRotation kv_rotation(const HParams& h, int64_t il, TensorType k, TensorType v) {
    KvRotation r;
    const int64_t head = h.head_dim_at(il);
    if (head % 64 != 0) return r;
    if (tensor_type_info(k).quantized) {
        r.k = 64;  // the largest power of two that divides the head
        while (head % (r.k * 2) == 0) r.k *= 2;
    }
    if (tensor_type_info(v).quantized) r.v = 64;  // (smaller blocks do better for V)
    return r;
}

// The cache's shape: the layers with K/V of their own (the first ones: the others read
// theirs), each as wide as its heads; sliding-window layers keep a ring of window + batch
// cells.
KvLayout kv_layout(const Model& m, const ContextParams& p) {
    const HParams& h = m.hparams();
    KvLayout l;
    l.n_layer = h.n_layer - h.n_kv_shared;
    l.n_ctx = p.n_ctx;
    l.n_embd_kv = h.n_embd_kv_at(0);
    l.n_head_kv = h.n_head_kv_at(0);
    for (int64_t il = 0; il < l.n_layer; ++il)
        if (h.n_embd_kv_at(il) != l.n_embd_kv || h.n_head_kv_at(il) != l.n_head_kv) {
            for (int64_t j = 0; j < l.n_layer; ++j) {
                l.layer_embd_kv.push_back(h.n_embd_kv_at(j));
                l.layer_head_kv.push_back(h.n_head_kv_at(j));
            }
            break;
        }
    l.type_k = p.type_k;
    l.type_v = p.type_v;
    l.lazy = p.kv_lazy;
    if (h.n_swa > 0 && !p.swa_full) {
        for (int64_t il = 0; il < l.n_layer; ++il) l.ring.push_back(h.is_swa(il));
        l.window = h.n_swa;
        l.ring_cells = h.n_swa + p.n_batch;
    }
    return l;
}

// The RoPE frequency factors for a context of n_ctx positions: Llama 3's, or Phi-3's
// LongRoPE short ones up to the original context and the long ones beyond (as llama.cpp
// chooses them, by the context's size); null: none.
static const float* rope_factors(const Model& m, int64_t n_ctx) {
    const Model::Impl& w = m.impl();
    const HParams& h = m.hparams();
    if (h.longrope && (w.rope_long || w.rope_short))
        return n_ctx > h.n_ctx_orig && w.rope_long ? w.rope_long : w.rope_short;
    return w.rope_freqs;
}

// Layer il's rotation: its rotated dimensions and base, and the frequency factors (Gemma 4:
// the global layers' only).
static void layer_rope(const HParams& h, int64_t il, const float* factors, RopeParams* rp) {
    const bool swa = h.is_swa(il);
    rp->n_rot = (int)h.n_rot_at(il);
    rp->freq_base = swa ? h.rope_freq_base_swa : h.rope_freq_base;
    rp->freq_factors = h.rope_factors_global && swa ? nullptr : factors;
    rp->mscale = h.rope_attn_factor;
}

size_t scratch_bytes(const Model& m, const ContextParams& p, int n_threads) {
    Arena a;
    lay_out(a, m, p, n_threads, nullptr);
    return a.used;
}

Result<MemoryBill> Context::memory_bill(const Model& m, const ContextParams& params) {
    const ContextParams p = resolve(m, params);
    const std::string err = check_params(m, p);
    if (!err.empty()) return Result<MemoryBill>::fail(err);
    MemoryBill b;
    b.weights_lazy = m.lazy_bytes();
    b.weights = m.weight_bytes() - b.weights_lazy;
    b.weights_repacked = m.repacked_bytes();
    const KvLayout kl = kv_layout(m, p);
    b.kv_cache = KvCache::bytes_needed(kl) * (size_t)p.n_seq;
    b.kv_layers = 0;
    for (int64_t il = 0; il < kl.n_layer; ++il) {
        if (m.hparams().is_recurrent(il)) continue;  // (no K/V)
        ++b.kv_layers;
        if (kl.cells(il) < kl.n_ctx) {
            ++b.kv_ring_layers;
            b.kv_ring_cells = kl.cells(il);
        }
    }
    const RecurrentLayout rl = recurrent_layout(m.hparams());
    b.recurrent = rl.bytes() * (size_t)p.n_seq;
    b.recurrent_layers = rl.n_recurrent();
    b.scratch = scratch_bytes(m, p, p.n_threads);
    return b;
}

Context::~Context() = default;

Result<std::unique_ptr<Context>> Context::create(const Model& m, const ContextParams& params) {
    using R = Result<std::unique_ptr<Context>>;
    const ContextParams p = resolve(m, params);
    const std::string err = check_params(m, p);
    if (!err.empty()) return R::fail(err);
    std::unique_ptr<Context> c(new Context());
    const int asked = params.n_threads;
    c->params_ = p;
    c->impl_ = std::make_unique<Impl>();
    Impl& d = *c->impl_;
    d.model = &m;
    try {
        for (int i = 0; i < p.n_seq; ++i)
            d.kv.push_back(std::make_unique<KvCache>(kv_layout(m, p)));
        if (m.hparams().has_recurrent()) {
            for (int i = 0; i < p.n_seq; ++i)
                d.rs.push_back(std::make_unique<RecurrentState>(recurrent_layout(m.hparams())));
            d.recurrent_why = "this " + m.hparams().arch + " model is a hybrid: its recurrent "
                              "layers keep one fixed-size state that has folded in every "
                              "position seen, so no position can be dropped from it";
        }
    } catch (const std::bad_alloc&) {
        return R::fail("out of memory allocating the KV cache for " + std::to_string(p.n_ctx) +
                       " positions");
    }
    d.panel_rows = panel_kernel().rows;
    d.panel_bf16 = panel_kernel().bf16_gemm != nullptr;
    d.arena_bytes = scratch_bytes(m, p, p.n_threads);
    void* mem = std::aligned_alloc(kAlign, (d.arena_bytes + kAlign - 1) / kAlign * kAlign);
    if (!mem) return R::fail("out of memory allocating scratch buffers");
    d.arena = {(uint8_t*)mem, std::free};
    Arena a{d.arena.get(), 0};
    lay_out(a, m, p, p.n_threads, &d);
    d.pool = std::make_unique<ThreadPool>(p.n_threads, p.cpus);
    d.threads_asked = asked;
    d.rope_factors = rope_factors(m, p.n_ctx);
    return c;
}

std::string Context::affinity_report() const {
    const ThreadPool& pool = *impl_->pool;
    std::string n = std::to_string(pool.size()) + " thread" + (pool.size() > 1 ? "s" : "");
    if (impl_->threads_asked > pool.size())
        n += " (" + std::to_string(impl_->threads_asked) + " asked for; this process may use " +
             std::to_string(usable_cpus()) + " CPUs)";
    if (pool.cpus().empty()) return n + ", not pinned (all CPUs alike)";
    if (!pool.affinity_ok())
        return n + ": pinning to CPUs " + cpu_list_string(pool.cpus()) +
               " was NOT applied by the OS; threads may land on slow cores";
    return n + " pinned to CPUs " + cpu_list_string(pool.cpus());
}

int64_t Context::n_vocab() const {
    return impl_->model->hparams().n_vocab;
}

int64_t Context::shift(int64_t n_keep, int64_t n_discard, int seq) {
    EDGELLM_ASSERT(seq >= 0 && seq < n_seq(), "sequence index in range");
    if (recurrent_reason()) return 0;  // (a recurrent state cannot drop positions)
    KvCache& kv = *impl_->kv[(size_t)seq];
    const HParams& h = impl_->model->hparams();
    const TypeKernels& tk = type_kernels(kv.type_k());
    std::vector<float> row((size_t)h.n_embd_q_max());
    RopeParams rp;
    rp.freq_scale = h.rope_freq_scale;
    rp.neox = h.rope_neox;
    // RoPE turns by an angle proportional to the position, so a key rotated for position p
    // becomes the key of p - n_discard when turned by -n_discard.
    const int64_t before = kv.n_used();
    kv.shift(n_keep, n_discard, [&](int64_t layer, uint8_t* k) {
        if (!h.uses_rope(layer)) return;
        layer_rope(h, layer, impl_->rope_factors, &rp);
        rp.mscale = 1.0f;  // (a turn, not a scaling)
        const int64_t head = h.head_dim_at(layer);
        // A key turned by the Hadamard matrix is turned back first (H H = I), then again.
        const KvRotation rot = kv_rotation(h, layer, kv.type_k(), kv.type_v());
        tk.to_float(k, row.data(), head);
        if (rot.k) hadamard(row.data(), head, rot.k);
        rope(row.data(), -n_discard, rp);
        if (rot.k) hadamard(row.data(), head, rot.k);
        tk.from_float(row.data(), k, head);
    });
    return before - kv.n_used();
}

Result<std::monostate> Context::set_lora(
    int seq, std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> adapters) {
    using R = Result<std::monostate>;
    if (seq < 0 || seq >= n_seq()) return R::fail("sequence " + std::to_string(seq) + " does not exist");
    for (const auto& [a, scale] : adapters) {
        if (!a) return R::fail("no adapter");
        if (&a->base() != impl_->model) return R::fail(a->path() + " was loaded for another model");
    }
    Impl& c = *impl_;
    std::lock_guard<std::mutex> lk(c.lora_mu);
    if (c.lora.size() != (size_t)n_seq()) c.lora.resize((size_t)n_seq());
    c.lora[(size_t)seq] = std::move(adapters);
    bool any = false;
    for (const auto& l : c.lora)
        for (const auto& [a, scale] : l) any = any || scale != 0.0f;
    c.any_lora = any;
    return std::monostate{};
}

void Context::set_abort_flag(const std::atomic<bool>* flag) {
    impl_->abort = flag;
}

const Model& Context::model() const { return *impl_->model; }

void Context::set_trace(TraceFn fn) {
    impl_->trace = std::move(fn);
}

namespace {

// y[rows][n_out] += scale * (alpha / rank) * B (A x[rows][n_in]) for each LoRA adapter of a
// segment's sequence that changes this matrix (`rows` maps an output row to its batch row,
// for the output projection; null: the same).
void apply_lora(Context::Impl& c, std::span<const Segment> segs, int64_t layer, LoraSite site,
                const float* x, int64_t n_in, float* y, int64_t n_out, int64_t n_rows,
                const int64_t* rows = nullptr) {
    if (!c.lora_on_step) return;
    ThreadPool& pool = *c.pool;
    auto seq_of_row = [&](int64_t t) {
        size_t i = 0;
        while (i + 1 < segs.size() && t >= segs[i + 1].row0) ++i;
        return segs[i].seq;
    };
    for_each_row(pool, n_rows, [&](int64_t r) {
        const int seq = seq_of_row(rows ? rows[r] : r);
        for (const auto& [adapter, user_scale] : c.lora_step[(size_t)seq]) {
            if (user_scale == 0.0f) continue;
            const LoraAdapter::Impl::Pair* p = adapter->impl().find(layer, site);
            if (!p) continue;
            const float s = user_scale * (adapter->alpha() != 0.0f ? adapter->alpha() / (float)p->rank : 1.0f);
            float t[512];
            std::vector<float> big;
            float* tmp = t;
            if (p->rank > 512) {
                big.resize((size_t)p->rank);
                tmp = big.data();
            }
            const float* xr = x + r * n_in;
            for (int64_t k = 0; k < p->rank; ++k) {
                const float* a = p->a.data() + k * n_in;
                float acc = 0.0f;
                for (int64_t i = 0; i < n_in; ++i) acc += a[i] * xr[i];
                tmp[k] = acc * s;
            }
            float* yr = y + r * n_out;
            for (int64_t o = 0; o < n_out; ++o) {
                const float* b = p->b.data() + o * p->rank;
                float acc = 0.0f;
                for (int64_t k = 0; k < p->rank; ++k) acc += b[k] * tmp[k];
                yr[o] += acc;
            }
        }
    });
}

// Gemma 4's per-layer inputs of a step's tokens into c.pl_in (llama.cpp's
// build_inp_per_layer and project_per_layer_inputs): for each token and layer,
//   (rms_norm(x P / sqrt(n_embd)) * proj_norm + sqrt(n_embd_per_layer) * table[token]) / sqrt(2)
// with x the token's scaled embedding (c.x) and P the embedding's projection. The table is
// read from the file's mapping, the token's row only.
void per_layer_inputs(Context::Impl& c, const WeightSet& w, const int32_t* tokens, int64_t n) {
    const Model::Impl& mw = c.model->impl();
    const HParams& h = c.model->hparams();
    const int64_t npl = h.n_embd_per_layer, width = npl * h.n_layer;
    ThreadPool& pool = *c.pool;
    matmul(pool, w.pl_model_proj, c.x, h.n_embd, n, c.act_q, c.pl_in, width);
    const float proj_scale = 1.0f / std::sqrt((float)h.n_embd);
    const float table_scale = std::sqrt((float)npl), in_scale = 1.0f / std::sqrt(2.0f);
    pool.run([&](int ith, int nth) {
        int64_t t0, t1;
        ThreadPool::split(n, ith, nth, &t0, &t1);
        float* row = c.pl_row + (size_t)ith * (size_t)width;
        for (int64_t t = t0; t < t1; ++t) {
            row_to_float(mw.pl_tok_embd, tokens[t], row);
            for (int64_t il = 0; il < h.n_layer; ++il) {
                float* p = c.pl_in + t * width + il * npl;
                const float* r = row + il * npl;
                scale(p, npl, proj_scale);
                rms_norm(p, mw.pl_proj_norm, p, npl, h.rms_eps);
                for (int64_t i = 0; i < npl; ++i) p[i] = (p[i] + r[i] * table_scale) * in_scale;
            }
        }
    });
    if (c.trace) c.trace("inp_per_layer", -1, c.pl_in, n, width);
}

// Layer il's per-layer embedding added to the residual stream (Gemma 4):
//   x += rms_norm((gelu(x G) * in_il) Proj) * post_norm
// with in_il the layer's per-layer input (per_layer_inputs).
void add_per_layer_embd(Context::Impl& c, const LayerWeights& l, int64_t il, int64_t n) {
    const HParams& h = c.model->hparams();
    const int64_t npl = h.n_embd_per_layer, width = npl * h.n_layer, n_embd = h.n_embd;
    ThreadPool& pool = *c.pool;
    matmul(pool, l.pl_gate, c.x, n_embd, n, c.act_q, c.pl_gate, npl);
    // (gelu(g) * in: ggml's gelu and mul, as the FFN's GELU gate computes them)
    for_each_row(pool, n, [&](int64_t t) {
        geglu(c.pl_gate + t * npl, c.pl_in + t * width + il * npl, npl);
    });
    matmul(pool, l.pl_proj, c.pl_gate, npl, n, c.act_q, c.xn, n_embd);
    for_each_row(pool, n, [&](int64_t t) {
        float* o = c.xn + t * n_embd;
        rms_norm(o, l.pl_post_norm, o, n_embd, h.rms_eps);
        add(c.x + t * n_embd, o, n_embd);
    });
    if (c.trace) c.trace("per_layer_embd_out", (int)il, c.x, n, n_embd);
}

// Layer il's feed-forward block (SwiGLU, or GELU-gated for Gemma) from the residual stream
// back to it, and what follows it (Gemma 4's per-layer embedding and output scale).
void feed_forward_block(Context::Impl& c, std::span<const Segment> segs, const LayerWeights& l,
                        int64_t il, int64_t n) {
    const HParams& h = c.model->hparams();
    ThreadPool& pool = *c.pool;
    const int64_t n_embd = h.n_embd;
    const int64_t n_ff = h.n_ff_at(il);
    for_each_row(pool, n, [&](int64_t t) {
        rms_norm(c.x + t * n_embd, l.ffn_norm, c.xn + t * n_embd, n_embd, h.rms_eps);
    });
    if (!l.w_gate) {  // gate and up in one matrix: its rows' halves apart
        matmul(pool, l.w_up, c.xn, n_embd, n, c.act_q, c.fused, 2 * n_ff);
        apply_lora(c, segs, il, LoraSite::Up, c.xn, n_embd, c.fused, 2 * n_ff, n);
        for_each_row(pool, n, [&](int64_t t) {
            const float* r = c.fused + t * 2 * n_ff;
            std::copy(r, r + n_ff, c.gate + t * n_ff);
            std::copy(r + n_ff, r + 2 * n_ff, c.up + t * n_ff);
        });
    } else {
        quantize_activations(pool, l.w_gate, c.xn, n_embd, n, c.act_q);
    }
    // Gate and up at once, joined tile by tile (h never makes a pass of its own), when
    // they take the panel GEMM alike and no adapter changes them in between.
    const GluFn glu_fn = h.gelu_ffn ? geglu : swiglu;
    const bool joined = l.w_gate && !c.lora_on_step && same_activations(l.w_up, l.w_gate, n) &&
                        matmul_glu(pool, l.w_gate, l.w_up, glu_fn, c.act_q, n, c.gate, n_ff);
    if (!joined && l.w_gate) {
        matmul_quantized(pool, l.w_gate, c.act_q, n, c.gate, n_ff);
        apply_lora(c, segs, il, LoraSite::Gate, c.xn, n_embd, c.gate, n_ff, n);
        if (!same_activations(l.w_up, l.w_gate, n))
            quantize_activations(pool, l.w_up, c.xn, n_embd, n, c.act_q);
        matmul_quantized(pool, l.w_up, c.act_q, n, c.up, n_ff);
        apply_lora(c, segs, il, LoraSite::Up, c.xn, n_embd, c.up, n_ff, n);
    }
    // Otherwise the gate's rows become h = glu(gate, up) as the down matmul quantizes
    // them.
    struct Glu {
        GluFn fn;
        float* gate;
        const float* up;
        int64_t n_ff;
    } glu{glu_fn, c.gate, c.up, n_ff};
    const RowPrep glu_row{joined ? nullptr : +[](void* p, int64_t t) {
                              const Glu& g = *(const Glu*)p;
                              g.fn(g.gate + t * g.n_ff, g.up + t * g.n_ff, g.n_ff);
                          },
                          &glu};
    quantize_activations(pool, l.w_down, c.gate, n_ff, n, c.act_q, glu_row);
    matmul_quantized(pool, l.w_down, c.act_q, n, c.xn, n_embd);
    apply_lora(c, segs, il, LoraSite::Down, c.gate, n_ff, c.xn, n_embd, n);
    for_each_row(pool, n, [&](int64_t t) {
        float* o = c.xn + t * n_embd;
        if (l.post_ffn_norm) rms_norm(o, l.post_ffn_norm, o, n_embd, h.rms_eps);
        add(c.x + t * n_embd, o, n_embd);
    });
    if (l.pl_gate) add_per_layer_embd(c, l, il, n);
    if (l.out_scale)
        for_each_row(pool, n, [&](int64_t t) { scale(c.x + t * n_embd, n_embd, l.out_scale[0]); });
    if (c.trace) c.trace("l_out", (int)il, c.x, n, n_embd);
}

// One forward step over n tokens made of segments (one per sequence, in row order). Writes
// the logits of the rows listed in out_rows, in that order, to `logits`. Returns false
// when the abort flag stopped it between layers.
bool forward_step(Context::Impl& c, std::span<const Segment> segs, const int32_t* tokens,
                  int64_t n, std::span<const int64_t> out_rows, float* logits,
                  float* hidden = nullptr) {
    const Model& m = *c.model;
    const HParams& h = m.hparams();
    const Model::Impl& mw = m.impl();
    // Running on the model (a repacking left for later waits meanwhile), and the one set of
    // weights this step reads.
    struct Running {
        const Model::Impl& w;
        explicit Running(const Model::Impl& m) : w(m) { w.steps_running.fetch_add(1); }
        ~Running() {
            w.last_step_end_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now().time_since_epoch())
                                         .count(),
                                     std::memory_order_release);
            w.steps_running.fetch_sub(1);
        }
    } running(mw);
    const WeightSet& w = mw.weights();
    ThreadPool& pool = *c.pool;
    c.steps.fetch_add(1, std::memory_order_relaxed);
    // this step's adapters (set_lora may change them meanwhile; the copy reuses its storage)
    c.lora_on_step = c.any_lora.load();
    if (c.lora_on_step) {
        std::lock_guard<std::mutex> lk(c.lora_mu);
        c.lora_step = c.lora;
    }
    if (n > c.most_tokens.load(std::memory_order_relaxed))
        c.most_tokens.store(n, std::memory_order_relaxed);
    const int64_t n_embd = h.n_embd;
    auto trace = [&](const char* name, int layer, const float* data, int64_t rows, int64_t width) {
        if (c.trace) c.trace(name, layer, data, rows, width);
    };
    // The segment of a row (few segments: a scan).
    auto seg_of = [&](int64_t t) -> const Segment& {
        size_t i = 0;
        while (i + 1 < segs.size() && t >= segs[i + 1].row0) ++i;
        return segs[i];
    };
    const KvCache& kv0 = *segs[0].kv;  // every sequence's cache has the same layout

    for (const Segment& sg : segs)
        for (int64_t t = 0; t < sg.n; ++t) c.pos[sg.row0 + t] = (int32_t)(sg.first_cell + t);
    for_each_row(pool, n, [&](int64_t t) {
        row_to_float(w.tok_embd, tokens[t], c.x + t * n_embd);
        if (h.embd_scale != 1.0f) scale(c.x + t * n_embd, n_embd, h.embd_scale);
    });
    trace("inp_embd", -1, c.x, n, n_embd);

    if (h.n_embd_per_layer > 0) per_layer_inputs(c, w, tokens, n);

    RopeParams rope_p;
    rope_p.freq_scale = h.rope_freq_scale;
    rope_p.neox = h.rope_neox;
    const TypeKernels& kv_k = type_kernels(kv0.type_k());
    const TypeKernels& kv_v = type_kernels(kv0.type_v());

    for (int64_t il = 0; il < h.n_layer; ++il) {
        if (c.abort && c.abort->load(std::memory_order_relaxed)) return false;
        const LayerWeights& l = w.layers[(size_t)il];
        const int L = (int)il;
        if (h.is_recurrent(il)) {  // no attention: a block with a state of its own
            for_each_row(pool, n, [&](int64_t t) {
                rms_norm(c.x + t * n_embd, l.attn_norm, c.xn + t * n_embd, n_embd, h.rms_eps);
            });
            trace("attn_norm", L, c.xn, n, n_embd);
            short_conv_block(c, segs, l, il, n);
            for_each_row(pool, n, [&](int64_t t) { add(c.x + t * n_embd, c.xn + t * n_embd, n_embd); });
            trace("ffn_inp", L, c.x, n, n_embd);
            feed_forward_block(c, segs, l, il, n);
            continue;
        }
        const bool swa = h.is_swa(il);
        const bool roped = h.uses_rope(il);
        layer_rope(h, il, c.rope_factors, &rope_p);
        // This layer's widths, and the cache layer it writes (when it has K/V of its own)
        // and reads: its own, or the earlier layer's it shares (of its kind: the same
        // widths).
        const int64_t head = h.head_dim_at(il), n_head_kv = h.n_head_kv_at(il);
        const int64_t n_q = h.n_embd_q_at(il), n_kv = h.n_embd_kv_at(il);
        const bool own_kv = h.has_kv(il);
        const int64_t kl = h.kv_layer(il);
        // Queries scaled before attention (Gemma's query_pre_attn_scalar, as llama.cpp does
        // it; Gemma 4 scales nothing) or the scores scaled inside it.
        const AttentionShape layer_shape{(int)h.n_head, (int)n_head_kv, (int)head,
                                         h.q_scale > 0.0f ? 1.0f : 1.0f / std::sqrt((float)head),
                                         swa ? h.n_swa : 0};
        const KvRotation rot = kv_rotation(h, il, kv0.type_k(), kv0.type_v());
        const size_t k_head_bytes = row_size(kv0.type_k(), head);
        const size_t v_head_bytes = row_size(kv0.type_v(), head);
        EDGELLM_ASSERT(k_head_bytes * (size_t)n_head_kv == kv0.k_row_bytes(kl) &&
                           v_head_bytes * (size_t)n_head_kv == kv0.v_row_bytes(kl),
                       "KV rows split into whole blocks per head");
        // (head-major: each KV head's cells of this layer contiguous)
        const size_t k_head_stride = k_head_bytes * (size_t)kv0.n_cells(kl);
        const size_t v_head_stride = v_head_bytes * (size_t)kv0.n_cells(kl);

        // Attention block.
        for_each_row(pool, n, [&](int64_t t) {
            rms_norm(c.x + t * n_embd, l.attn_norm, c.xn + t * n_embd, n_embd, h.rms_eps);
        });
        trace("attn_norm", L, c.xn, n, n_embd);
        if (l.wqkv) {  // one matrix, its rows' q, k and v parts apart
            const int64_t n_qkv = n_q + 2 * n_kv;
            matmul(pool, l.wqkv, c.xn, n_embd, n, c.act_q, c.fused, n_qkv);
            for_each_row(pool, n, [&](int64_t t) {
                const float* r = c.fused + t * n_qkv;
                std::copy(r, r + n_q, c.q + t * n_q);
                std::copy(r + n_q, r + n_q + n_kv, c.k + t * n_kv);
                std::copy(r + n_q + n_kv, r + n_qkv, c.v + t * n_kv);
            });
        } else {
            matmul(pool, l.wq, c.xn, n_embd, n, c.act_q, c.q, n_q);
            apply_lora(c, segs, il, LoraSite::Q, c.xn, n_embd, c.q, n_q, n);
            if (own_kv) {
                if (!same_activations(l.wk, l.wq, n))
                    quantize_activations(pool, l.wk, c.xn, n_embd, n, c.act_q);
                matmul_quantized(pool, l.wk, c.act_q, n, c.k, n_kv);
                apply_lora(c, segs, il, LoraSite::K, c.xn, n_embd, c.k, n_kv, n);
            }
            if (own_kv && l.wv) {
                if (!same_activations(l.wv, l.wk, n))
                    quantize_activations(pool, l.wv, c.xn, n_embd, n, c.act_q);
                matmul_quantized(pool, l.wv, c.act_q, n, c.v, n_kv);
                apply_lora(c, segs, il, LoraSite::V, c.xn, n_embd, c.v, n_kv, n);
            } else if (own_kv) {  // no V of its own (Gemma 4): the keys, before their norm
                std::copy(c.k, c.k + n * n_kv, c.v);
            }
        }
        for_each_row(pool, n, [&](int64_t t) {
            float* qt = c.q + t * n_q;
            if (l.bq) add(qt, l.bq, n_q);
            for (int64_t hh = 0; hh < h.n_head; ++hh) {
                float* qh = qt + hh * head;
                if (l.q_norm) rms_norm(qh, l.q_norm, qh, head, h.rms_eps);
                if (roped) rope(qh, c.pos[t], rope_p);
                if (h.q_scale > 0.0f && h.q_scale != 1.0f) scale(qh, head, h.q_scale);
                if (rot.k) hadamard(qh, head, rot.k);
            }
            if (!own_kv) return;
            float* kt = c.k + t * n_kv;
            float* vt = c.v + t * n_kv;
            if (l.bk) add(kt, l.bk, n_kv);
            if (l.bv) add(vt, l.bv, n_kv);
            for (int64_t hh = 0; hh < n_head_kv; ++hh) {
                float* kh = kt + hh * head;
                if (l.k_norm) rms_norm(kh, l.k_norm, kh, head, h.rms_eps);
                if (roped) rope(kh, c.pos[t], rope_p);
                if (rot.k) hadamard(kh, head, rot.k);
                if (h.v_norm) rms_norm(vt + hh * head, nullptr, vt + hh * head, head, h.rms_eps);
            }
            if (rot.v) hadamard(vt, n_kv, rot.v);
            // Head-major cache: each KV head's rows are contiguous over the cells, so
            // attention streams one block of memory per head.
            const Segment& sg = seg_of(t);
            KvCache& kv = *sg.kv;
            const size_t cell = (size_t)kv.cell_of(il, sg.first_cell + (t - sg.row0));
            for (int64_t hh = 0; hh < n_head_kv; ++hh) {
                kv_k.from_float(kt + hh * head,
                                kv.k_rows(il) + (size_t)hh * k_head_stride + cell * k_head_bytes, head);
                kv_v.from_float(vt + hh * head,
                                kv.v_rows(il) + (size_t)hh * v_head_stride + cell * v_head_bytes, head);
            }
        });
        trace("q", L, c.q, n, n_q);
        if (own_kv) {
            trace("k", L, c.k, n, n_kv);
            trace("v", L, c.v, n, n_kv);
        }
        for (const Segment& sg : segs) {
            KvCache& kv = *sg.kv;
            const KvLayerView view{kv.type_k(),  kv.type_v(),   kv.k_rows(kl), kv.v_rows(kl),
                                   k_head_bytes,  v_head_bytes,  k_head_stride, v_head_stride};
            attention(pool, layer_shape, c.q + sg.row0 * n_q, c.pos + sg.row0, sg.n, view,
                      kv.cell_pos(kl), kv.n_cells_used(kl), c.attn + sg.row0 * n_q,
                      c.attn_scratch, c.attn_scratch_per_thread);
        }
        if (rot.v)  // the values were turned: turn the weighted sums back
            for_each_row(pool, n, [&](int64_t t) { hadamard(c.attn + t * n_q, n_q, rot.v); });
        trace("attn_out", L, c.attn, n, n_q);
        matmul(pool, l.wo, c.attn, n_q, n, c.act_q, c.xn, n_embd);
        apply_lora(c, segs, il, LoraSite::O, c.attn, n_q, c.xn, n_embd, n);
        for_each_row(pool, n, [&](int64_t t) {
            float* o = c.xn + t * n_embd;
            if (l.post_attn_norm) rms_norm(o, l.post_attn_norm, o, n_embd, h.rms_eps);
            add(c.x + t * n_embd, o, n_embd);
        });
        trace("ffn_inp", L, c.x, n, n_embd);

        feed_forward_block(c, segs, l, il, n);
    }

    // Output rows only.
    const int64_t n_out = (int64_t)out_rows.size();
    if (n_out <= 0) return true;
    for_each_row(pool, n_out, [&](int64_t r) {
        rms_norm(c.x + out_rows[(size_t)r] * n_embd, mw.output_norm, c.xn + r * n_embd, n_embd,
                 h.rms_eps);
    });
    trace("result_norm", -1, c.xn, n_out, n_embd);
    if (hidden) {  // embeddings: the normalized hidden states, no output projection
        std::copy(c.xn, c.xn + n_out * n_embd, hidden);
        return true;
    }
    matmul(pool, w.output, c.xn, n_embd, n_out, c.act_q, logits, h.n_vocab);
    apply_lora(c, segs, h.n_layer, LoraSite::Output, c.xn, n_embd, logits, h.n_vocab, n_out, out_rows.data());
    if (h.final_softcap > 0.0f)
        for_each_row(pool, n_out, [&](int64_t r) {
            softcap(logits + r * h.n_vocab, h.n_vocab, h.final_softcap);
        });
    trace("result_output", -1, logits, n_out, h.n_vocab);
    return true;
}

}  // namespace

Result<std::span<const float>> Context::eval(std::span<const int32_t> tokens, bool all_logits,
                                             int seq) {
    using R = Result<std::span<const float>>;
    Impl& c = *impl_;
    if (seq < 0 || seq >= n_seq())
        return R::fail("sequence " + std::to_string(seq) + " does not exist (the context has " +
                       std::to_string(n_seq()) + ")");
    KvCache& kv = *c.kv[(size_t)seq];
    const HParams& h = c.model->hparams();
    const int64_t n = (int64_t)tokens.size();
    if (n == 0) return R::fail("no tokens to evaluate");
    if (panel_kernel().rows != c.panel_rows || (panel_kernel().bf16_gemm != nullptr) != c.panel_bf16)
        return R::fail("the kernel set changed after this context was created (its scratch "
                       "was sized for the previous one); create a new context");
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= h.n_vocab)
            return R::fail("token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) +
                           ", outside the vocabulary of " + std::to_string(h.n_vocab));
    if (kv.n_used() + n > params_.n_ctx)
        return R::fail("context full: " + std::to_string(kv.n_used()) + " positions used + " +
                       std::to_string(n) + " new > context size " + std::to_string(params_.n_ctx));
    if (all_logits && n > params_.n_outputs)
        return R::fail("asked for logits of " + std::to_string(n) + " positions, context holds " +
                       std::to_string(params_.n_outputs));

    for (int64_t start = 0; start < n; start += params_.n_batch) {
        const int64_t nb = std::min(params_.n_batch, n - start);
        if (c.abort && c.abort->load(std::memory_order_relaxed)) return R::fail(kAborted);
        const int64_t first_cell = kv.n_used();
        kv.append(nb);
        const bool last = start + nb == n;
        const int64_t out_begin = all_logits ? 0 : (last ? nb - 1 : nb);
        for (int64_t r = out_begin; r < nb; ++r) c.out_rows[(size_t)(r - out_begin)] = r;
        float* dst = all_logits ? c.logits + start * h.n_vocab : c.logits;
        const Segment seg{&kv, 0, nb, first_cell, seq, c.rs_of(seq)};
        if (!forward_step(c, std::span<const Segment>(&seg, 1), tokens.data() + start, nb,
                          std::span<const int64_t>(c.out_rows, (size_t)(nb - out_begin)), dst)) {
            // Some layers hold the unfinished step's K/V (a recurrent state has folded it in:
            // the sequence starts again).
            c.cut(seq, first_cell);
            return R::fail(kAborted);
        }
    }
    const size_t n_out = all_logits ? (size_t)n : 1;
    return std::span<const float>(c.logits, n_out * (size_t)h.n_vocab);
}

uint64_t Context::n_steps() const {
    return impl_->steps.load(std::memory_order_relaxed);
}

int64_t Context::most_tokens_per_step() const {
    return impl_->most_tokens.load(std::memory_order_relaxed);
}

Result<std::vector<float>> Context::embed(std::span<const int32_t> tokens, Pooling pooling,
                                          int seq) {
    using R = Result<std::vector<float>>;
    Impl& c = *impl_;
    if (seq < 0 || seq >= n_seq())
        return R::fail("sequence " + std::to_string(seq) + " does not exist");
    KvCache& kv = *c.kv[(size_t)seq];
    const HParams& h = c.model->hparams();
    const int64_t n = (int64_t)tokens.size(), n_embd = h.n_embd;
    if (n == 0) return R::fail("no tokens to embed");
    if (panel_kernel().rows != c.panel_rows || (panel_kernel().bf16_gemm != nullptr) != c.panel_bf16)
        return R::fail("the kernel set changed after this context was created; create a new "
                       "context");
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= h.n_vocab)
            return R::fail("token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) +
                           ", outside the vocabulary of " + std::to_string(h.n_vocab));
    if (n > params_.n_ctx)
        return R::fail("input of " + std::to_string(n) + " tokens is larger than the context "
                       "size " + std::to_string(params_.n_ctx));
    c.cut(seq, 0);
    const bool every_row = pooling == Pooling::None || pooling == Pooling::Mean;
    std::vector<float> out(every_row && pooling == Pooling::None ? (size_t)(n * n_embd)
                                                                 : (size_t)n_embd, 0.0f);
    std::vector<float> rows((size_t)(params_.n_batch * n_embd));
    for (int64_t start = 0; start < n; start += params_.n_batch) {
        const int64_t nb = std::min(params_.n_batch, n - start);
        if (c.abort && c.abort->load(std::memory_order_relaxed)) {
            c.cut(seq, 0);
            return R::fail(kAborted);
        }
        // Rows wanted from this step: all of them, the first token's, or the last one's.
        int64_t r0 = 0, r1 = 0;
        if (every_row) r1 = nb;
        else if (pooling == Pooling::Cls) { if (start == 0) r1 = 1; }
        else if (start + nb == n) { r0 = nb - 1; r1 = nb; }
        for (int64_t r = r0; r < r1; ++r) c.out_rows[(size_t)(r - r0)] = r;
        const int64_t first_cell = kv.n_used();
        kv.append(nb);
        const Segment seg{&kv, 0, nb, first_cell, seq, c.rs_of(seq)};
        if (!forward_step(c, std::span<const Segment>(&seg, 1), tokens.data() + start, nb,
                          std::span<const int64_t>(c.out_rows, (size_t)(r1 - r0)), c.logits,
                          rows.data())) {
            c.cut(seq, 0);
            return R::fail(kAborted);
        }
        if (pooling == Pooling::None)
            std::copy(rows.begin(), rows.begin() + nb * n_embd, out.begin() + start * n_embd);
        else if (pooling == Pooling::Mean)
            for (int64_t r = 0; r < nb; ++r)
                for (int64_t i = 0; i < n_embd; ++i) out[(size_t)i] += rows[(size_t)(r * n_embd + i)];
        else if (r1 > r0)
            std::copy(rows.begin(), rows.begin() + n_embd, out.begin());
    }
    if (pooling == Pooling::Mean)
        for (float& v : out) v /= (float)n;
    return out;
}

Result<std::span<const float>> Context::eval_batch(std::span<const SeqTokens> parts) {
    using R = Result<std::span<const float>>;
    Impl& c = *impl_;
    const HParams& h = c.model->hparams();
    if (parts.empty()) return R::fail("no tokens to evaluate");
    int64_t n_rows_out = 0;
    for (const SeqTokens& p : parts)
        n_rows_out += p.all_logits ? (int64_t)p.tokens.size() : 1;
    if (n_rows_out > params_.n_outputs)
        return R::fail("logits of " + std::to_string(n_rows_out) + " positions in one step, the "
                       "context returns at most " + std::to_string(params_.n_outputs));
    if (panel_kernel().rows != c.panel_rows || (panel_kernel().bf16_gemm != nullptr) != c.panel_bf16)
        return R::fail("the kernel set changed after this context was created; create a new "
                       "context");
    if (parts.size() > kMaxSeq) return R::fail("more than 256 sequences in one step");
    int64_t n = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
        const SeqTokens& p = parts[i];
        if (p.seq < 0 || p.seq >= n_seq())
            return R::fail("sequence " + std::to_string(p.seq) + " does not exist");
        for (size_t j = 0; j < i; ++j)
            if (parts[j].seq == p.seq)
                return R::fail("sequence " + std::to_string(p.seq) + " appears twice in one step");
        if (p.tokens.empty()) return R::fail("a sequence with no tokens in the step");
        for (int32_t t : p.tokens)
            if (t < 0 || t >= h.n_vocab)
                return R::fail("token id " + std::to_string(t) + " outside the vocabulary of " +
                               std::to_string(h.n_vocab));
        const KvCache& kv = *c.kv[(size_t)p.seq];
        if (kv.n_used() + (int64_t)p.tokens.size() > params_.n_ctx)
            return R::fail("context full for sequence " + std::to_string(p.seq));
        n += (int64_t)p.tokens.size();
    }
    if (n > params_.n_batch)
        return R::fail(std::to_string(n) + " tokens in one step, more than the batch of " +
                       std::to_string(params_.n_batch));
    // Gather the tokens (the scratch's token buffer) and lay out the segments (no
    // allocation: this is the token loop of several slots).
    std::array<Segment, kMaxSeq> seg_store;
    const std::span<Segment> segs(seg_store.data(), parts.size());
    int64_t row = 0;
    size_t n_out = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
        KvCache& kv = *c.kv[(size_t)parts[i].seq];
        const int64_t k = (int64_t)parts[i].tokens.size();
        std::copy(parts[i].tokens.begin(), parts[i].tokens.end(), c.tokens + row);
        segs[i] = Segment{&kv, row, k, kv.n_used(), parts[i].seq, c.rs_of(parts[i].seq)};
        kv.append(k);
        for (int64_t r = parts[i].all_logits ? row : row + k - 1; r < row + k; ++r)
            c.out_rows[n_out++] = r;
        row += k;
    }
    if (!forward_step(c, segs, c.tokens, n, std::span<const int64_t>(c.out_rows, n_out),
                      c.logits)) {
        for (const Segment& sg : segs) c.cut(sg.seq, sg.first_cell);
        return R::fail(kAborted);
    }
    return std::span<const float>(c.logits, n_out * (size_t)h.n_vocab);
}

}  // namespace edgellm
