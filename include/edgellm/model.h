// A loaded model (weights mapped from a GGUF file) and an inference context over it
// (KV cache, scratch buffers, thread pool) that evaluates batches of tokens.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "edgellm/error.h"
#include "edgellm/gguf.h"
#include "edgellm/tensor_type.h"

namespace edgellm {

// Hyper-parameters read from GGUF metadata ("<arch>.embedding_length" and friends).
struct HParams {
    std::string arch;         // general.architecture: an entry of the table (edgellm/arch.h)
    int64_t n_vocab = 0;      // rows of token_embd
    int64_t n_ctx_train = 0;  // <arch>.context_length
    int64_t n_embd = 0;       // width of the residual stream
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;  // grouped-query attention: n_head / n_head_kv queries per KV head
    int64_t head_dim = 0;   // <arch>.attention.key_length, else n_embd / n_head
    int64_t n_ff = 0;       // hidden width of the gated FFN
    float rms_eps = 1e-5f;
    // RoPE
    int64_t n_rot = 0;  // rotated dimensions per head (<arch>.rope.dimension_count)
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
    bool rope_neox = false;        // NEOX pairs (i, i + n_rot/2) vs NORMAL pairs (2i, 2i+1)
    bool tied_output = false;      // no output.weight: the output projection is token_embd
    bool qkv_bias = false;
    // Qwen3 / Gemma 3
    bool qk_norm = false;     // RMSNorm of each q and k head (attn_q_norm, attn_k_norm)
    bool post_norms = false;  // RMSNorm of the attention and FFN outputs before the residual
    bool gelu_ffn = false;    // FFN gate GELU (tanh) instead of SiLU
    float embd_scale = 1.0f;  // token embeddings multiplied by this (Gemma: sqrt(n_embd))
    float q_scale = 0.0f;     // queries multiplied by this before attention; 0: 1/sqrt(head_dim)
    float final_softcap = 0.0f;  // logits = cap * tanh(logits / cap) when > 0
    // Sliding-window attention (Gemma 3): layers with il % swa_period < swa_period - 1
    // see only the last n_swa positions and rotate with rope_freq_base_swa. Gemma 4 names
    // its sliding layers one by one instead (swa_layers, n_layer flags).
    int64_t n_swa = 0;
    int64_t swa_period = 0;
    std::vector<uint8_t> swa_layers;
    float rope_freq_base_swa = 10000.0f;
    bool is_swa(int64_t il) const {
        if (il < 0 || n_swa <= 0) return false;  // (il < 0: the model's own tensors)
        if (!swa_layers.empty()) return il < (int64_t)swa_layers.size() && swa_layers[(size_t)il];
        return swa_period > 0 && il % swa_period < swa_period - 1;
    }
    // SmolLM3: layers with (il + 1) % nope_every == 0 use no rotary positions.
    int64_t nope_every = 0;
    bool uses_rope(int64_t il) const { return nope_every <= 0 || (il + 1) % nope_every != 0; }
    // Phi-3's LongRoPE: rope_factors_short up to n_ctx_orig positions of context, the long
    // ones beyond, and every rotation scaled by rope_attn_factor.
    bool longrope = false;
    int64_t n_ctx_orig = 0;
    float rope_attn_factor = 1.0f;

    // Gemma 4: what differs from layer to layer. Arrays of n_layer values where the file
    // gives one per layer (KV heads, FFN width), else empty and the scalar holds for every
    // layer; the sliding layers' own head size and rotated dimensions (0: head_dim, n_rot).
    std::vector<int64_t> n_head_kv_arr, n_ff_arr;
    int64_t head_dim_swa = 0;
    int64_t n_rot_swa = 0;
    // The last n_kv_shared layers have no K/V of their own: they attend over the cache of
    // an earlier layer of their kind (kv_layer), as llama.cpp's Gemma 4 does.
    int64_t n_kv_shared = 0;
    bool v_norm = false;               // V RMS-normed per head, without a weight (Gemma 4)
    bool rope_factors_global = false;  // the frequency factors rotate global layers only
                                       // (Gemma 4's "proportional" RoPE)
    // Per-layer embeddings (Gemma 4 E2B/E4B): each layer gets n_embd_per_layer more inputs
    // from a token table of its own (per_layer_token_embd) and a projection of the
    // embedding. 0: none.
    int64_t n_embd_per_layer = 0;

    // Hybrids (LFM2, Qwen3.5): recurrent layers keep a fixed-size state per sequence instead
    // of K/V (model/recurrent_state.h): the window of a causal depthwise convolution (the
    // inputs of its last conv_kernel - 1 positions, conv_channels wide) and, for Gated
    // DeltaNet layers, a matrix of rs_head_k x rs_head_v floats per head (rs_heads; 0: none).
    // recurrent_layers flags them (empty: none); they have no KV heads.
    std::vector<uint8_t> recurrent_layers;
    int64_t conv_kernel = 0;    // LFM2: shortconv.l_cache; Qwen3.5: ssm.conv_kernel
    int64_t conv_channels = 0;  // LFM2: n_embd
    int64_t rs_heads = 0, rs_head_k = 0, rs_head_v = 0;
    bool is_recurrent(int64_t il) const {
        return il >= 0 && il < (int64_t)recurrent_layers.size() && recurrent_layers[(size_t)il];
    }
    bool has_recurrent() const {
        for (uint8_t r : recurrent_layers)
            if (r) return true;
        return false;
    }

    int64_t n_embd_kv() const { return n_head_kv * head_dim; }
    int64_t n_embd_q() const { return n_head * head_dim; }
    // Layer il's (il < 0: the model's, as the scalars say).
    int64_t head_dim_at(int64_t il) const {
        return is_swa(il) && head_dim_swa > 0 ? head_dim_swa : head_dim;
    }
    int64_t n_rot_at(int64_t il) const { return is_swa(il) && n_rot_swa > 0 ? n_rot_swa : n_rot; }
    int64_t n_head_kv_at(int64_t il) const {
        if (is_recurrent(il)) return 0;
        return il >= 0 && il < (int64_t)n_head_kv_arr.size() ? n_head_kv_arr[(size_t)il] : n_head_kv;
    }
    int64_t n_ff_at(int64_t il) const {
        return il >= 0 && il < (int64_t)n_ff_arr.size() ? n_ff_arr[(size_t)il] : n_ff;
    }
    int64_t n_embd_kv_at(int64_t il) const { return n_head_kv_at(il) * head_dim_at(il); }
    int64_t n_embd_q_at(int64_t il) const { return n_head * head_dim_at(il); }
    // The widest of any layer (scratch buffers).
    int64_t n_embd_kv_max() const;
    int64_t n_embd_q_max() const;
    int64_t n_ff_max() const;
    // Whether layer il keeps K/V of its own, and the layer whose cache it reads (itself, or
    // for a shared layer llama.cpp's choice: the last layer with a cache when il is global,
    // the one before it when il slides; hparams check they are of il's kind).
    bool has_kv(int64_t il) const { return il < n_layer - n_kv_shared; }
    int64_t kv_layer(int64_t il) const {
        return has_kv(il) ? il : n_layer - n_kv_shared - (is_swa(il) ? 2 : 1);
    }
};

struct LoadOptions {
    // Repack weight matrices into the row-interleaved decode layout when the kernels have
    // a SIMD GEMV for their type (kernels/x16.h; llama.cpp's --no-repack turns its own
    // repacking off the same way). The environment variable EDGELLM_REPACK=0 also turns
    // it off.
    bool repack = true;
    // A directory where the repacked weights are kept between starts, in a file per model
    // ("" : none, every start repacks): a later start maps them from the page cache instead
    // of writing 0.3-1 GB of fresh memory. Only when they take at least
    // repack_cache_min_bytes; a cache that cannot be used or written is reported
    // (Model::repack_note) and the weights are repacked in memory as without one.
    std::string repack_cache_dir;
    size_t repack_cache_min_bytes = 0;
    // Leave the repacking for later when no repack cache file can be mapped: load returns
    // with the file's layout (which every kernel reads: a prompt's bits are the same, decode
    // about a quarter slower) and finish_repack or finish_in_background repacks, then
    // switches the steps that start afterwards to the copies. The server does this to be
    // healthy without waiting for the repack.
    bool repack_later = false;
};


class Model {
  public:
    // Map the file, read the hyper-parameters and check every tensor's shape and type.
    static Result<std::unique_ptr<Model>> load(const std::string& path,
                                              const LoadOptions& opts = {});
    // The same from a file already opened, which the caller may go on reading meanwhile
    // (the server reads its tokenizer while the weights are repacked).
    static Result<std::unique_ptr<Model>> load(std::shared_ptr<const GgufFile> file,
                                              const LoadOptions& opts = {});
    ~Model();
    // What load checks, without loading: the hyper-parameters of the metadata and every
    // tensor's name, shape and type against the family's table entry (no data is read).
    static Result<HParams> check(const GgufFile& file);

    const HParams& hparams() const { return hp_; }
    const GgufFile& file() const { return *file_; }
    size_t weight_bytes() const { return file_->tensor_bytes(); }
    // Of those, the bytes of tensors read lazily from the mapping, row by row as tokens
    // need them (Gemma 4's per-layer token table): never repacked, locked or warmed.
    size_t lazy_bytes() const;
    // The most common weight type, e.g. "q4_K" for a Q4_K_M file.
    std::string main_weight_type() const;

    // Bytes of weights repacked at load into the row-interleaved decode layout (in memory
    // of their own, in place of the file's pages; EDGELLM_REPACK=0 turns it off).
    size_t repacked_bytes() const;
    // How long load() spent repacking (ms; 0: nothing repacked), mapping a cached copy
    // included.
    double repack_ms() const;
    // What load did with the repack cache, for the log ("" : none asked for, or too small),
    // and the same as a state: none, mapped, no file yet, a file refused (damaged, stale...).
    const std::string& repack_note() const;
    enum class RepackCache { None, Mapped, Absent, Refused };
    RepackCache repack_cache() const;
    // When load found no usable repack cache file: write it now (a second or more for a GB:
    // the disk's speed), for the next start. What happened, for the log ("" : nothing to
    // write).
    std::string save_repack_cache() const;
    // Whether load left repacking for later (LoadOptions::repack_later) and it is not done.
    bool repack_pending() const;
    // Do it now: on a pool of its own, about 1 MiB at a time, waiting while a forward step
    // of the model runs (or ran less than 30 ms ago) or pause() says so; the copies are
    // locked when lock_memory locked the file's pages, steps that start afterwards read
    // them, and the file's pages they replace go back. What happened, for the log ("" :
    // nothing was left).
    std::string finish_repack(const std::function<bool()>& pause = nullptr) const;
    // What load left on a thread of its own: the repacking (as finish_repack), then at the
    // lowest priority the repack cache file (save_repack_cache); note(text) called there
    // after each. The model stops and waits for it when destroyed.
    void finish_in_background(std::function<void(const std::string&)> note,
                              std::function<bool()> pause = nullptr) const;

    // Read every page of the weights once, so the first request does not wait on the disk.
    void warm_up() const;
    // A short hex digest of the file's identity (its size, metadata and tensor index, and
    // samples of the weights): a saved KV cache is only reused under the same one.
    const std::string& fingerprint() const;
    // Pin the weights in RAM (mlock) so they are never paged out; fails with the reason
    // (e.g. RLIMIT_MEMLOCK too low).
    Result<std::monostate> lock_memory() const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

  private:
    Model() = default;
    std::shared_ptr<const GgufFile> file_;
    HParams hp_;
    std::string fingerprint_;
    std::unique_ptr<Impl> impl_;
};

// A LoRA adapter of a model: llama.cpp's GGUF adapter files (general.type "adapter",
// adapter.type "lora"; tensors NAME.lora_a [n_in, rank] and NAME.lora_b [rank, n_out] beside
// the base model's NAME.weight; adapter.lora.alpha). A context applies it at a scale per
// sequence: y = W x + scale * (alpha / rank) * B (A x) (alpha 0: scale alone), for the
// attention and feed-forward matrices and the output projection. Its matrices are kept as
// f32.
class LoraAdapter {
  public:
    // Errors: not a LoRA adapter file, another architecture, a tensor the model has not, a
    // shape that does not fit the model's, a tensor that cannot be applied (token_embd).
    static Result<std::shared_ptr<const LoraAdapter>> load(const std::string& path, const Model& base);
    ~LoraAdapter();
    const std::string& path() const;
    float alpha() const;
    int64_t n_matrices() const;  // base matrices it changes
    size_t bytes() const;        // its f32 matrices' bytes
    const Model& base() const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

  private:
    LoraAdapter() = default;
    std::unique_ptr<Impl> impl_;
};

struct ContextParams {
    int64_t n_ctx = 0;                     // 0: the model's training context, capped at 4096
    int64_t n_batch = 512;                 // most tokens evaluated in one forward step
    int64_t n_outputs = 1;                 // most positions whose logits one eval() returns
                                           // (at least n_seq)
    // KV cache types of the keys and of the values (llama.cpp's -ctk / -ctv): any of
    // kv_cache_types(). Quantized keys and values are turned by a Hadamard matrix first
    // (spreading outliers over a block, as llama.cpp does) when the head is a multiple of 64.
    TensorType type_k = TensorType::F16;
    TensorType type_v = TensorType::F16;
    // Sliding-window layers keep the whole context instead of a ring of window + batch
    // cells (llama.cpp's --swa-full): more memory, but any prefix can be reused.
    bool swa_full = false;
    // The KV cache's pages are taken as positions are first written instead of all at
    // creation (llama.cpp's --kv-unified lets each slot hold the whole context: memory then
    // follows the positions in use, up to the bill's n_seq x n_ctx).
    bool kv_lazy = false;
    // Independent sequences, each with a KV cache of n_ctx positions (the server's slots).
    // They share the threads and scratch: evaluate one at a time.
    int n_seq = 1;
    int n_threads = 0;                     // 0: all cores (or all CPUs in `cpus`)
    // CPUs to pin the threads to. Empty: the big cores of a big.LITTLE SoC when the CPUs
    // differ (sysfs cpu_capacity / max frequency), otherwise no pinning.
    std::vector<int> cpus;
};

// The KV cache types a context takes: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1
// (those llama-server accepts on a CPU).
const std::vector<TensorType>& kv_cache_types();

// Bytes a context will allocate, before allocating it.
struct MemoryBill {
    size_t weights = 0;   // tensor bytes, mapped from the file (or repacked at load), but
                          // those read lazily
    size_t weights_repacked = 0;  // of those, repacked into memory of their own
    // Tensors read lazily from the mapping, not counted in `weights` nor the total: only
    // the rows of the tokens seen are read (Gemma 4's per_layer_token_embd), and their
    // pages stay the page cache's to drop.
    size_t weights_lazy = 0;
    size_t kv_cache = 0;  // n_ctx x (row_size(type_k) + row_size(type_v)) x the layer's
                          // n_embd_kv per global layer with a cache of its own
                          // (sliding-window layers: their ring's cells instead of n_ctx),
                          // times n_seq
    int64_t kv_layers = 0;       // layers with a cache of their own
    int64_t kv_ring_layers = 0;  // of those, layers with a ring
    int64_t kv_ring_cells = 0;   // cells of each ring
    // Hybrids' recurrent layers: their state (a convolution window, a recurrent matrix per
    // head), a fixed size per sequence whatever the context, times n_seq.
    size_t recurrent = 0;
    int64_t recurrent_layers = 0;
    size_t scratch = 0;   // activations, logits, per-thread buffers
    size_t total() const { return weights + kv_cache + recurrent + scratch; }
};

class Context {
  public:
    static Result<std::unique_ptr<Context>> create(const Model& model, const ContextParams& p);
    static Result<MemoryBill> memory_bill(const Model& model, const ContextParams& p);
    ~Context();

    const ContextParams& params() const { return params_; }
    const Model& model() const;
    // One line on thread placement: the CPUs pinned to and whether the OS applied it.
    std::string affinity_report() const;
    int64_t n_past(int seq = 0) const;  // positions held in sequence seq's KV cache
    int64_t n_vocab() const;            // floats in one row of logits

    // Evaluate tokens at positions n_past() .. n_past()+n-1 of sequence seq (in steps of
    // n_batch) and keep their K/V. Returns logits [n_out][n_vocab], valid until the next
    // eval: every position when all_logits (n must not exceed n_outputs), else only the
    // last. Errors: empty input, a token id outside the vocabulary, a context that would
    // overflow, a sequence that does not exist, or the abort flag (below) raised.
    Result<std::span<const float>> eval(std::span<const int32_t> tokens, bool all_logits,
                                        int seq = 0);

    // Several sequences' tokens in one forward step (their weights read once): each
    // part's tokens go to its own sequence's cache. Every sequence at most once, at most
    // n_batch tokens in all. Returns, part after part, the logits of each part's last token
    // (of every token for a part with all_logits; at most n_outputs rows in all),
    // [rows][n_vocab], valid until the next eval. The abort flag stops it as eval (every
    // part dropped).
    struct SeqTokens {
        int seq;
        std::span<const int32_t> tokens;
        bool all_logits = false;
    };
    Result<std::span<const float>> eval_batch(std::span<const SeqTokens> parts);

    // Embeddings: the final normalized hidden states (the output projection's input) of
    // tokens evaluated from position 0 of sequence seq (what it held is dropped; afterwards
    // it holds tokens), pooled: Mean over the tokens, Cls the first token's, Last the last
    // one's ([n_embd] floats), or None: every token's ([n][n_embd]). Unnormalized.
    enum class Pooling { None, Mean, Cls, Last };
    Result<std::vector<float>> embed(std::span<const int32_t> tokens, Pooling pooling,
                                     int seq = 0);

    // Forget every position >= n_keep of sequence seq. Returns the positions kept: n_keep,
    // or 0 when a sliding-window layer's ring no longer holds the window before n_keep, or
    // when the model has recurrent layers and n_keep < n_past (their state cannot go back:
    // the sequence is emptied; restore_recurrent goes back to a checkpoint instead). Then the
    // caller evaluates from the start.
    int64_t truncate(int64_t n_keep, int seq = 0);
    // Drop positions [n_keep, n_keep + n_discard) of sequence seq and move the later ones
    // down (llama.cpp's context shift): their keys are turned back n_discard positions.
    // Returns the positions dropped: none on a model with recurrent layers (recurrent_reason).
    int64_t shift(int64_t n_keep, int64_t n_discard, int seq = 0);

    // Hybrids (LFM2, Qwen3.5): the bytes of one sequence's recurrent state (0: the model has
    // attention layers only, and any prefix of a sequence can be kept).
    size_t recurrent_state_bytes() const;
    // Why this model's sequences cannot drop positions (no context shift, no roll-back but to
    // a checkpoint), for messages; null when they can.
    const char* recurrent_reason() const;
    // A checkpoint: a copy of a sequence's recurrent state after n_past positions, which
    // restore_recurrent brings the sequence back to while its KV cache still holds those
    // positions. recurrent_state_bytes() whatever the positions; taking one into a
    // checkpoint of the same model allocates nothing.
    struct RecurrentCheckpoint {
        int64_t n_past = -1;  // positions the state had folded in (-1: none taken)
        std::vector<float> state;
    };
    void save_recurrent(RecurrentCheckpoint* into, int seq = 0) const;
    // Sequence seq back to the checkpoint: its KV cache cut to the checkpoint's positions and
    // the recurrent state replaced by the copy. Returns the positions held. Errors (nothing
    // changed): a checkpoint not taken or of another model, a sequence holding fewer
    // positions than it. The caller vouches that the positions kept are those the checkpoint
    // saw (KvSequence::rollback_to checks the tokens).
    Result<int64_t> restore_recurrent(const RecurrentCheckpoint& cp, int seq = 0);
    int n_seq() const { return (int)params_.n_seq; }
    // Forward steps run so far, and the most tokens one of them evaluated.
    uint64_t n_steps() const;
    int64_t most_tokens_per_step() const;

    // While *flag is true, eval stops at the next layer and fails with kAborted; the
    // positions of the unfinished step are dropped (n_past() tells what the sequence kept).
    // nullptr: never aborted. The flag may be raised from any thread.
    void set_abort_flag(const std::atomic<bool>* flag);
    static constexpr const char* kAborted = "evaluation aborted";

    // Sequence seq's KV cache (the positions it holds) and, for a hybrid, its recurrent
    // state, as bytes that restore() accepts into a context of the same model, context size
    // and KV types.
    std::vector<uint8_t> snapshot(int seq = 0) const;
    // Replace sequence seq's cache with a snapshot. Returns the positions restored, or why
    // not (another layout, a damaged blob; the sequence is then left empty).
    Result<int64_t> restore(std::span<const uint8_t> blob, int seq = 0);

    // The LoRA adapters applied to sequence seq's tokens from its next step on, each with its
    // scale (an adapter at scale 0 is not applied; empty: none). The positions it already
    // holds keep what they were computed with: a caller changing them for a sequence with
    // cached positions starts it again. Errors: a sequence that does not exist, an adapter
    // of another model.
    Result<std::monostate> set_lora(int seq,
                                    std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> adapters);

    // Called after each step with (name, layer, data, n_tokens x width) for debugging.
    using TraceFn = std::function<void(const char* name, int layer, const float* data,
                                       int64_t n_tokens, int64_t width)>;
    void set_trace(TraceFn fn);

    struct Impl;

  private:
    Context() = default;
    ContextParams params_;
    std::unique_ptr<Impl> impl_;
};

}  // namespace edgellm
