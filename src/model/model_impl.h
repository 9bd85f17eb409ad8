// Internals of Model and Context shared by the model layer's translation units.
#pragma once

#include <array>
#include <atomic>
#include <string>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "compute/attention.h"
#include "compute/tensor_view.h"
#include "compute/thread_pool.h"
#include "edgellm/model.h"
#include "model/kv_cache.h"
#include "model/recurrent_state.h"
#include "model/repack_cache.h"

namespace edgellm {

// Read the hyper-parameters of a supported architecture from GGUF metadata.
Result<HParams> read_hparams(const GgufFile& f);

// Weights of one transformer block. Vectors (norms, biases) are f32; matrices keep the
// file's type. Shapes as GGUF stores them: ne[0] is the input width.
struct LayerWeights {
    const float* attn_norm = nullptr;  // [n_embd]
    TensorView wq;                     // [n_embd, n_embd_q]
    TensorView wk;                     // [n_embd, n_embd_kv]
    TensorView wv;                     // [n_embd, n_embd_kv]
    TensorView wqkv;                   // [n_embd, n_embd_q + 2 n_embd_kv] (phi3: q, k, v fused)
    const float* bq = nullptr;         // [n_embd_q]   (qwen2)
    const float* bk = nullptr;         // [n_embd_kv]  (qwen2)
    const float* bv = nullptr;         // [n_embd_kv]  (qwen2)
    TensorView wo;                     // [n_embd_q, n_embd]
    const float* ffn_norm = nullptr;   // [n_embd]
    TensorView w_gate;                 // [n_embd, n_ff]
    TensorView w_up;                   // [n_embd, n_ff] ([n_embd, 2 n_ff] without w_gate: phi3's
                                       // gate and up fused, the gate first)
    TensorView w_down;                 // [n_ff, n_embd]
    const float* q_norm = nullptr;     // [head_dim]   (qwen3, gemma3)
    const float* k_norm = nullptr;     // [head_dim]   (qwen3, gemma3)
    const float* post_attn_norm = nullptr;  // [n_embd] (gemma3)
    const float* post_ffn_norm = nullptr;   // [n_embd] (gemma3)
    // Gemma 4: the per-layer embedding's gate and projection, the norm after it, and the
    // scalar the layer's output is multiplied by (null: none)
    TensorView pl_gate;                     // [n_embd, n_embd_per_layer]
    TensorView pl_proj;                     // [n_embd_per_layer, n_embd]
    const float* pl_post_norm = nullptr;    // [n_embd]
    const float* out_scale = nullptr;       // [1]
    // LFM2's short convolution block (recurrent layers): B, C and x from one projection, the
    // depthwise convolution's taps per channel, the output projection
    TensorView conv_in_proj;                // [n_embd, 3 n_embd]
    const float* conv_kernel = nullptr;     // [conv_kernel, n_embd] (ne0: the taps)
    TensorView conv_out_proj;               // [n_embd, n_embd]
};

// The matrices a forward step reads: the file's (or a mapped repack cache's), or once a
// repacking left for later is done (LoadOptions::repack_later), the repacked copies. A step
// takes one set at its start (Model::Impl::weights) and keeps it to its end.
struct WeightSet {
    TensorView tok_embd;  // [n_embd, n_vocab]
    TensorView output;    // [n_embd, n_vocab] (tok_embd when tied)
    TensorView pl_model_proj;  // [n_embd, n_embd_per_layer x n_layer] (Gemma 4)
    std::vector<LayerWeights> layers;
};

struct Model::Impl {
    WeightSet bound;                     // as load bound them (and repacked them, unless later)
    std::unique_ptr<WeightSet> later;    // the views once the later repack is done
    std::atomic<const WeightSet*> live{&bound};
    const WeightSet& weights() const { return *live.load(std::memory_order_acquire); }
    const float* output_norm = nullptr;  // [n_embd]
    const float* rope_freqs = nullptr;   // [n_rot / 2] or null
    const float* rope_long = nullptr;    // [n_rot / 2] or null (phi3's LongRoPE factors)
    const float* rope_short = nullptr;
    // Gemma 4's per-layer token table, read row by row from the file's mapping (never
    // repacked, locked or warmed: a step reads the rows of its tokens), and the norm of
    // the embedding's projection.
    TensorView pl_tok_embd;              // [n_embd_per_layer x n_layer, n_vocab]
    const float* pl_proj_norm = nullptr; // [n_embd_per_layer]
    std::vector<std::unique_ptr<float[]>> owned;  // vectors converted to f32 at load
    double repack_ms = 0;  // load's time repacking
    std::string repack_note;  // what became of the repack cache ("" : none)
    Model::RepackCache repack_cache = Model::RepackCache::None;
    // Matrices repacked at load into the row-interleaved layout (kernels/x16.h): their
    // buffers, and the file's byte ranges they replace (released from the mapping).
    struct Buffer {  // anonymous memory (huge pages where the kernel gives them) or a
                     // cache file (model/repack_cache.h), mapped at map
        uint8_t* map = nullptr;
        size_t mapped = 0;
        uint8_t* data = nullptr;
        size_t bytes = 0;
        bool from_file = false;  // mapped from a cache file: maybe not resident
        ~Buffer();
        Buffer(uint8_t* m, size_t mb, uint8_t* d, size_t b, bool f)
            : map(m), mapped(mb), data(d), bytes(b), from_file(f) {}
        Buffer(const Buffer&) = delete;
        Buffer& operator=(const Buffer&) = delete;
    };
    std::unique_ptr<Buffer> repacked;
    // (guarded by released_mu: the later repack adds to it while the server serves)
    std::vector<std::pair<const uint8_t*, size_t>> released;
    mutable std::mutex released_mu;
    size_t repacked_bytes() const {
        std::lock_guard<std::mutex> lock(released_mu);
        size_t n = 0;
        for (const auto& r : released) n += r.second;
        return n;
    }
    // A repacking left for later: the views of `later` to fill, from the file's tensors,
    // where each goes in the buffer, and its size.
    struct PendingRepack {
        std::vector<TensorView*> views;  // into *later
        std::vector<TensorView> src;
        std::vector<RepackEntry> entries;
        size_t total = 0;
        bool tied = false;  // the output projection is the embedding
    };
    std::unique_ptr<PendingRepack> pending_repack;  // (under saver.mu)
    std::atomic<bool> repack_left{false};           // pending_repack is set
    bool locked = false;  // lock_memory succeeded: the later copies are locked too
    // Forward steps running on any context of the model, and when the last one ended
    // (steady-clock ns): the later repack waits while the model serves.
    mutable std::atomic<int> steps_running{0};
    mutable std::atomic<int64_t> last_step_end_ns{0};
    // A repack cache file to write (load found none usable): where, and what it holds.
    struct PendingCache {
        std::string path;
        std::string why_new;  // why an existing file was not used ("" : there was none)
        RepackKey key;
        std::vector<RepackEntry> entries;
    };
    std::unique_ptr<PendingCache> pending_cache;
    // The thread repacking later and writing the cache in the background (last: stopped and
    // joined before the buffers it reads and writes go).
    struct Saver {
        std::mutex mu;  // one writer at a time
        std::atomic<bool> stop{false};
        std::thread thread;
        ~Saver() {
            stop = true;
            if (thread.joinable()) thread.join();
        }
    };
    mutable Saver saver;
};

struct Context::Impl {
    const Model* model = nullptr;
    std::unique_ptr<ThreadPool> pool;
    int threads_asked = 0;  // ContextParams::n_threads as given (the pool may have fewer)
    std::vector<std::unique_ptr<KvCache>> kv;  // one per sequence
    // Hybrids: each sequence's recurrent state beside its KV cache (empty: the model has
    // attention layers only).
    std::vector<std::unique_ptr<RecurrentState>> rs;
    RecurrentState* rs_of(int seq) const { return rs.empty() ? nullptr : rs[(size_t)seq].get(); }
    std::string recurrent_why;  // Context::recurrent_reason ("" : none)
    // Sequence seq cut to its first n_keep positions (Context::truncate's rule: a recurrent
    // state only keeps all it holds, or starts again). Returns the positions it holds.
    int64_t cut(int seq, int64_t n_keep);
    const std::atomic<bool>* abort = nullptr;
    TraceFn trace;

    // Scratch, sized at creation for n_batch tokens (see ScratchLayout in forward.cpp).
    std::unique_ptr<uint8_t[], void (*)(void*)> arena{nullptr, nullptr};
    size_t arena_bytes = 0;
    float* x = nullptr;               // [n_batch][n_embd]   residual stream
    float* xn = nullptr;              // [n_batch][n_embd]   normalized
    float* q = nullptr;               // [n_batch][n_embd_q]
    float* k = nullptr;               // [n_batch][n_embd_kv]
    float* v = nullptr;               // [n_batch][n_embd_kv]
    float* attn = nullptr;            // [n_batch][n_embd_q]
    float* gate = nullptr;            // [n_batch][n_ff]
    float* up = nullptr;              // [n_batch][n_ff]
    float* fused = nullptr;           // [n_batch][n_embd_q + 2 n_embd_kv or 2 n_ff] (phi3's
                                      // fused matrices' outputs; null: none)
    float* pl_in = nullptr;           // [n_batch][n_layer][n_embd_per_layer] each layer's
                                      // per-layer input (Gemma 4; null: none)
    float* pl_gate = nullptr;         // [n_batch][n_embd_per_layer]
    float* pl_row = nullptr;          // [n_threads][n_layer x n_embd_per_layer] a token's
                                      // row of the per-layer table
    float* conv_in = nullptr;         // [n_batch][3 n_embd] a short convolution block's B, C
                                      // and x (LFM2; null: none)
    float* conv_io = nullptr;         // [n_batch][conv_channels] the convolution's input,
                                      // then its output
    const float* rope_factors = nullptr;  // the RoPE frequency factors of this context's size
    void* act_q = nullptr;            // quantized activations, largest of all matmuls
    float* logits = nullptr;          // [n_outputs][n_vocab]
    int32_t* pos = nullptr;           // [n_batch]
    int64_t* out_rows = nullptr;      // [max(n_batch, n_outputs)] rows whose logits a step returns
    int32_t* tokens = nullptr;        // [n_batch] a batch's tokens gathered from its sequences
    uint8_t* attn_scratch = nullptr;  // attn_scratch_per_thread bytes per thread
    size_t attn_scratch_per_thread = 0;
    // The panel GEMM's rows per panel when the scratch was sized (0: none); the scratch
    // only fits that kernel set's matmul.
    int panel_rows = 0;
    bool panel_bf16 = false;  // the scratch laid out for the bf16 GEMM (amx-bf16)
    // Forward steps run, and the most tokens one step evaluated (for metrics).
    std::atomic<uint64_t> steps{0};
    std::atomic<int64_t> most_tokens{0};
    // LoRA adapters per sequence with their scales (set_lora); any_lora: some sequence has one.
    // (set from any thread under lora_mu; each step works on its own copy, lora_step)
    std::mutex lora_mu;
    std::vector<std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>>> lora, lora_step;
    std::atomic<bool> any_lora{false};
    bool lora_on_step = false;
};

// The matrices a LoRA adapter may change, per layer (and the output projection).
enum class LoraSite { Q, K, V, O, Gate, Up, Down, Output, Count };

struct LoraAdapter::Impl {
    struct Pair {
        std::vector<float> a;  // [rank][n_in]
        std::vector<float> b;  // [n_out][rank]
        int64_t rank = 0, n_in = 0, n_out = 0;
    };
    std::string path;
    float alpha = 0.0f;
    const Model* base = nullptr;
    std::vector<Pair> pairs;
    // pairs index per (layer, site), -1: none; the output projection's at layers.size().
    std::vector<std::array<int, (size_t)LoraSite::Count>> index;
    size_t bytes = 0;
    const Pair* find(int64_t layer, LoraSite s) const {
        if (layer < 0 || layer >= (int64_t)index.size()) return nullptr;
        const int i = index[(size_t)layer][(size_t)s];
        return i < 0 ? nullptr : &pairs[(size_t)i];
    }
};

// Bytes of scratch for these parameters (the same computation that lays out the arena).
size_t scratch_bytes(const Model& m, const ContextParams& p, int n_threads);

}  // namespace edgellm
