// edgellm inspect MODEL [-c CTX] [--kv-type T]: metadata, tensors, hyper-parameters,
// kernels chosen, and the memory bill (weights + KV cache + scratch).
#include <algorithm>
#include <cstdio>
#include <map>

#include "commands.h"
#include "edgellm/model.h"
#include "edgellm/kernels.h"

namespace edgellm::cli {

namespace {

std::string mib(size_t bytes) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%12zu bytes (%9.2f MiB)", bytes, (double)bytes / (1 << 20));
    return buf;
}

}  // namespace

int cmd_inspect(const std::vector<std::string>& args) {
    Settings s;
    if (auto done = parse_options("inspect", args, &s)) return *done;
    std::string path = s.model.value_or("");
    if (path.empty() && !s.positional.empty()) path = s.positional[0];
    if (path.empty()) return fail("inspect", "missing MODEL", 2);
    if (s.positional.size() > (s.model ? 0u : 1u))
        return fail("inspect", "unexpected argument " + s.positional.back(), 2);
    if (std::string err = choose_kernels(s.kernels); !err.empty()) return fail("inspect", err, 2);
    const int64_t n_ctx = s.ctx.n_ctx, n_batch = s.ctx.n_batch;
    const TensorType type_k = s.ctx.type_k, type_v = s.ctx.type_v;

    auto model = Model::load(path, load_options(s));
    if (!model) return fail("inspect", model.error());
    const Model& m = **model;
    const GgufFile& f = m.file();
    const HParams& h = m.hparams();

    std::printf("file: %s\n", path.c_str());
    std::printf("gguf: version %u, %zu metadata entries, %zu tensors, alignment %zu, data at %zu\n",
                f.version(), f.metadata().size(), f.tensors().size(), f.alignment(),
                f.data_offset());
    std::printf("\nmetadata:\n");
    for (const auto& [k, v] : f.metadata())
        std::printf("  %-44s %s\n", k.c_str(), v.to_string().c_str());

    std::printf("\nhyper-parameters:\n");
    std::printf("  arch %s, n_vocab %lld, n_ctx_train %lld, n_embd %lld, n_layer %lld, n_ff %lld\n",
                h.arch.c_str(), (long long)h.n_vocab, (long long)h.n_ctx_train, (long long)h.n_embd,
                (long long)h.n_layer, (long long)h.n_ff);
    std::printf("  n_head %lld, n_head_kv %lld, head_dim %lld, rms_eps %g\n", (long long)h.n_head,
                (long long)h.n_head_kv, (long long)h.head_dim, h.rms_eps);
    std::printf("  rope %s, n_rot %lld, freq_base %g, freq_scale %g; output %s; qkv bias %s\n",
                h.rope_neox ? "neox" : "normal", (long long)h.n_rot, h.rope_freq_base,
                h.rope_freq_scale, h.tied_output ? "tied to token_embd" : "separate",
                h.qkv_bias ? "yes" : "no");
    if (h.qk_norm || h.post_norms || h.gelu_ffn)
        std::printf("  q/k norms %s, post-norms %s, ffn %s, embeddings x %g%s\n",
                    h.qk_norm ? "yes" : "no", h.post_norms ? "yes" : "no",
                    h.gelu_ffn ? "gelu-tanh gated" : "silu gated", h.embd_scale,
                    h.final_softcap > 0 ? (", logit soft-cap " + std::to_string(h.final_softcap)).c_str()
                                        : "");
    if (h.longrope)
        std::printf("  LongRoPE: short factors up to %lld positions of context, long beyond; "
                    "rotations x %g\n",
                    (long long)h.n_ctx_orig, h.rope_attn_factor);
    if (h.nope_every > 0)
        std::printf("  no RoPE on every layer %lld (layers with (il + 1) %% %lld == 0)\n",
                    (long long)h.nope_every, (long long)h.nope_every);
    if (h.n_swa > 0) {
        std::string global;
        for (int64_t il = 0; il < h.n_layer; ++il)
            if (!h.is_swa(il)) global += (global.empty() ? "" : ",") + std::to_string(il);
        std::printf("  sliding window %lld (rope base %g) except global layers %s\n",
                    (long long)h.n_swa, h.rope_freq_base_swa, global.c_str());
    }
    // (Gemma 4: each kind of layer its own heads; layers reading another's cache; the
    // per-layer embeddings)
    if (!h.has_recurrent() && (h.head_dim_swa > 0 || !h.n_head_kv_arr.empty() || !h.n_ff_arr.empty())) {
        int64_t s = -1, g = -1;
        for (int64_t il = 0; il < h.n_layer; ++il) (h.is_swa(il) ? s : g) = il;
        for (int64_t il : {s, g})
            if (il >= 0)
                std::printf("  %s layers: head_dim %lld, n_rot %lld, n_head_kv %lld%s\n",
                            h.is_swa(il) ? "sliding" : "global", (long long)h.head_dim_at(il),
                            (long long)h.n_rot_at(il), (long long)h.n_head_kv_at(il),
                            h.rope_factors_global && !h.is_swa(il) ? ", rope_freqs factors" : "");
        if (!h.n_ff_arr.empty())
            std::printf("  n_ff per layer: %lld (first) to %lld (widest)\n", (long long)h.n_ff,
                        (long long)h.n_ff_max());
    }
    if (h.has_recurrent()) {
        std::string attn;
        int64_t n_recurrent = 0;
        for (int64_t il = 0; il < h.n_layer; ++il) {
            if (h.is_recurrent(il))
                ++n_recurrent;
            else
                attn += (attn.empty() ? "" : ",") + std::to_string(il);
        }
        std::printf("  hybrid: attention on layers %s; %lld recurrent layers (a causal convolution "
                    "of %lld taps over %lld channels%s): a state of a fixed size per sequence "
                    "instead of K/V\n",
                    attn.c_str(), (long long)n_recurrent, (long long)h.conv_kernel,
                    (long long)h.conv_channels,
                    h.rs_heads > 0 ? (", a " + std::to_string(h.rs_head_k) + " x " +
                                      std::to_string(h.rs_head_v) + " matrix in each of " +
                                      std::to_string(h.rs_heads) + " heads").c_str()
                                   : "");
    }
    if (h.n_kv_shared > 0) {
        const int64_t first = h.n_layer - h.n_kv_shared;
        std::printf("  layers %lld-%lld have no K/V of their own: they read", (long long)first,
                    (long long)h.n_layer - 1);
        for (int64_t il = first; il < h.n_layer; ++il)
            std::printf("%s %lld->%lld", il == first ? "" : ",", (long long)il,
                        (long long)h.kv_layer(il));
        std::printf("\n");
    }
    if (h.n_embd_per_layer > 0)
        std::printf("  per-layer embeddings: %lld per layer, from per_layer_token_embd (read "
                    "lazily, a token's row at a time)\n",
                    (long long)h.n_embd_per_layer);

    std::map<std::string, std::pair<size_t, size_t>> by_type;  // count, bytes
    if (!s.io.no_tensors) std::printf("\ntensors:\n");
    for (const auto& t : f.tensors()) {
        auto& e = by_type[tensor_type_name(t.type)];
        e.first++;
        e.second += t.n_bytes;
        if (!s.io.no_tensors)
            std::printf("  %-36s %-6s %-22s %12zu bytes\n", t.name.c_str(),
                        tensor_type_name(t.type), t.shape_string().c_str(), t.n_bytes);
    }
    std::printf("\ntensor types:");
    for (const auto& [name, e] : by_type)
        std::printf("  %s: %zu (%.2f MiB)", name.c_str(), e.first, (double)e.second / (1 << 20));
    std::printf("\n\nkernels: %s (cpu: %s)\n", active_kernel_set().c_str(),
                cpu_features_string().c_str());
    for (const auto& t : by_type) {
        const auto type = tensor_type_from_name(t.first);
        if (!type) continue;
        const VecDotInfo k = vec_dot_info(*type);
        if (k.found)
            std::printf("  %-5s vec_dot %s x %s: %s\n", t.first.c_str(), t.first.c_str(),
                        tensor_type_name(k.activation_type), k.isa.c_str());
    }

    auto bill = Context::memory_bill(m, s.ctx);
    if (!bill) return fail("inspect", bill.error());
    const int64_t ctx_used = n_ctx > 0 ? n_ctx : std::min<int64_t>(h.n_ctx_train, 4096);
    const std::string kv_name = type_k == type_v ? std::string(tensor_type_name(type_k))
                                                 : std::string("K ") + tensor_type_name(type_k) +
                                                       " / V " + tensor_type_name(type_v);
    std::printf("\nmemory bill (context %lld, KV %s, batch %lld):\n", (long long)ctx_used,
                kv_name.c_str(), (long long)std::min(n_batch, ctx_used));
    std::printf("  weights   %s  (mapped from the file)\n", mib(bill->weights).c_str());
    if (bill->weights_repacked)
        std::printf("    of which %s repacked at load for decode (row-interleaved, in memory of "
                    "their own in place of the file's pages)\n",
                    mib(bill->weights_repacked).c_str());
    // The layers with a cache of their own, grouped by cells and row bytes: "(2 layers x
    // 4096 cells x 1024 bytes + ...)".
    std::vector<std::pair<std::pair<int64_t, size_t>, int64_t>> groups;  // (cells, row) -> layers
    for (int64_t il = 0; il < h.n_layer; ++il) {
        if (!h.has_kv(il) || h.is_recurrent(il)) continue;
        const bool ring = h.is_swa(il) && bill->kv_ring_layers > 0;
        const std::pair<int64_t, size_t> key{ring ? bill->kv_ring_cells : ctx_used,
                                             row_size(type_k, h.n_embd_kv_at(il)) +
                                                 row_size(type_v, h.n_embd_kv_at(il))};
        auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == key; });
        if (g == groups.end())
            groups.push_back({key, 1});
        else
            ++g->second;
    }
    std::string parts;
    for (const auto& [key, layers] : groups)
        parts += (parts.empty() ? "" : " + ") + std::to_string(layers) + " layers x " +
                 std::to_string(key.first) + " cells x " + std::to_string(key.second) + " bytes";
    const int64_t sharing = h.n_layer - bill->kv_layers - bill->recurrent_layers;
    std::printf("  kv cache  %s  (%s of K and V%s)\n", mib(bill->kv_cache).c_str(), parts.c_str(),
                sharing > 0 ? (", " + std::to_string(sharing) + " layers sharing them").c_str() : "");
    if (bill->recurrent_layers > 0)
        std::printf("  recurrent %s  (%lld layers' state%s: a fixed size, whatever the context)\n",
                    mib(bill->recurrent).c_str(), (long long)bill->recurrent_layers,
                    s.ctx.n_seq > 1 ? (" x " + std::to_string(s.ctx.n_seq) + " sequences").c_str() : "");
    std::printf("  scratch   %s\n", mib(bill->scratch).c_str());
    std::printf("  total     %s\n", mib(bill->total()).c_str());
    if (bill->weights_lazy)
        std::printf("  and read lazily, apart: %s of per-layer token embeddings (mapped from the "
                    "file, never repacked or locked; only the rows of the tokens seen are read, "
                    "and their pages stay the page cache's to drop)\n",
                    mib(bill->weights_lazy).c_str());
    return 0;
}

}  // namespace edgellm::cli
