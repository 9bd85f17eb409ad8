// LoRA adapters: read llama.cpp's GGUF adapter files, check them against the base model, and
// keep their matrices as f32 for the forward pass (forward.cpp applies them).
#include <cstdlib>
#include <map>

#include "kernels/kernels.h"
#include "model/model_impl.h"

namespace edgellm {

namespace {

// "blk.12.attn_q.weight" -> (12, Q); "output.weight" -> (n_layer, Output).
bool parse_site(const std::string& name, int64_t n_layer, int64_t* layer, LoraSite* site) {
    if (name == "output.weight") {
        *layer = n_layer;
        *site = LoraSite::Output;
        return true;
    }
    if (name.rfind("blk.", 0) != 0) return false;
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos) return false;
    char* end = nullptr;
    const long l = std::strtol(name.c_str() + 4, &end, 10);
    if (end != name.c_str() + dot || l < 0 || l >= n_layer) return false;
    static const std::map<std::string, LoraSite> sites = {
        {"attn_q.weight", LoraSite::Q},    {"attn_k.weight", LoraSite::K},     {"attn_v.weight", LoraSite::V},
        {"attn_output.weight", LoraSite::O}, {"ffn_gate.weight", LoraSite::Gate}, {"ffn_up.weight", LoraSite::Up},
        {"ffn_down.weight", LoraSite::Down}};
    const auto it = sites.find(name.substr(dot + 1));
    if (it == sites.end()) return false;
    *layer = l;
    *site = it->second;
    return true;
}

const TensorView& base_matrix(const Model& m, int64_t layer, LoraSite s) {
    // (shapes and types only: the same in both sets of a repacking left for later)
    const WeightSet& w = m.impl().bound;
    if (s == LoraSite::Output) return w.output;
    const LayerWeights& l = w.layers[(size_t)layer];
    switch (s) {
        case LoraSite::Q: return l.wq;
        case LoraSite::K: return l.wk;
        case LoraSite::V: return l.wv;
        case LoraSite::O: return l.wo;
        case LoraSite::Gate: return l.w_gate;
        case LoraSite::Up: return l.w_up;
        default: return l.w_down;
    }
}

// A 2-D tensor as f32, row by row.
bool to_f32(const GgufTensorInfo& t, std::vector<float>* out) {
    const TypeKernels& k = type_kernels(t.type);
    if (t.type != TensorType::F32 && !k.to_float) return false;
    const int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
    out->resize((size_t)(t.ne[0] * rows));
    const size_t rb = row_size(t.type, t.ne[0]);
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* src = t.data + (size_t)r * rb;
        float* dst = out->data() + (size_t)(r * t.ne[0]);
        if (t.type == TensorType::F32) std::copy((const float*)src, (const float*)src + t.ne[0], dst);
        else k.to_float(src, dst, t.ne[0]);
    }
    return true;
}

}  // namespace

LoraAdapter::~LoraAdapter() = default;
const std::string& LoraAdapter::path() const { return impl_->path; }
float LoraAdapter::alpha() const { return impl_->alpha; }
int64_t LoraAdapter::n_matrices() const { return (int64_t)impl_->pairs.size(); }
size_t LoraAdapter::bytes() const { return impl_->bytes; }
const Model& LoraAdapter::base() const { return *impl_->base; }

Result<std::shared_ptr<const LoraAdapter>> LoraAdapter::load(const std::string& path, const Model& base) {
    using R = Result<std::shared_ptr<const LoraAdapter>>;
    auto file = GgufFile::open(path);
    if (!file) return R::fail(file.error());
    const GgufFile& f = **file;
    const std::string type = f.get_string("general.type").value_or("");
    if (type != "adapter")
        return R::fail(path + ": not a LoRA adapter (general.type is \"" + type + "\", not \"adapter\")");
    const std::string atype = f.get_string("adapter.type").value_or("");
    if (atype != "lora") return R::fail(path + ": adapter.type is \"" + atype + "\", not \"lora\"");
    const std::string arch = f.get_string("general.architecture").value_or("");
    const std::string base_arch = base.file().get_string("general.architecture").value_or("");
    if (arch != base_arch)
        return R::fail(path + ": an adapter for " + (arch.empty() ? "an unnamed architecture" : arch) +
                       ", the model is " + base_arch);
    const HParams& h = base.hparams();
    std::unique_ptr<Impl> impl(new Impl);
    impl->path = path;
    impl->alpha = (float)f.get_float("adapter.lora.alpha").value_or(0.0);
    impl->base = &base;
    impl->index.assign((size_t)h.n_layer + 1, {});
    for (auto& row : impl->index) row.fill(-1);

    std::map<std::string, std::pair<const GgufTensorInfo*, const GgufTensorInfo*>> by_name;
    for (const GgufTensorInfo& t : f.tensors()) {
        auto ends = [&](const char* tail) {
            const size_t n = std::char_traits<char>::length(tail);
            return t.name.size() > n && t.name.compare(t.name.size() - n, n, tail) == 0;
        };
        if (ends(".lora_a")) by_name[t.name.substr(0, t.name.size() - 7)].first = &t;
        else if (ends(".lora_b")) by_name[t.name.substr(0, t.name.size() - 7)].second = &t;
        else return R::fail(path + ": tensor \"" + t.name + "\" is not a LoRA matrix (NAME.lora_a / NAME.lora_b)");
    }
    if (by_name.empty()) return R::fail(path + ": no LoRA matrices");
    for (const auto& [name, ab] : by_name) {
        const auto [a, b] = ab;
        if (!a || !b) return R::fail(path + ": " + name + " has lora_" + (a ? "a" : "b") + " without lora_" + (a ? "b" : "a"));
        int64_t layer = 0;
        LoraSite site{};
        if (!parse_site(name, h.n_layer, &layer, &site))
            return R::fail(path + ": " + name + " is not a matrix edgellm applies adapters to (attention, "
                           "feed-forward, output)");
        if (site == LoraSite::Output && h.tied_output)
            return R::fail(path + ": " + name + ": the model has no output matrix of its own (tied to token_embd)");
        const TensorView& w = base_matrix(base, layer, site);
        if (!w)
            return R::fail(path + ": " + name + ": the model has no such matrix of its own (its q/k/v "
                           "or gate/up are fused, as Phi-3's): adapters for it are not supported");
        const int64_t n_in = w.ne[0], n_out = w.ne[1], rank = a->ne[1];
        if (a->ne[2] * a->ne[3] != 1 || b->ne[2] * b->ne[3] != 1 || a->ne[0] != n_in || b->ne[1] != n_out ||
            b->ne[0] != rank || rank <= 0)
            return R::fail(path + ": " + name + ": lora_a " + a->shape_string() + " and lora_b " + b->shape_string() +
                           " do not fit the model's [" + std::to_string(n_in) + ", " + std::to_string(n_out) + "]");
        Impl::Pair pr;
        pr.rank = rank;
        pr.n_in = n_in;
        pr.n_out = n_out;
        if (!to_f32(*a, &pr.a) || !to_f32(*b, &pr.b))
            return R::fail(path + ": " + name + ": tensors of type " + tensor_type_name(a->type) + " / " +
                           tensor_type_name(b->type) + " cannot be read");
        impl->bytes += (pr.a.size() + pr.b.size()) * sizeof(float);
        impl->index[(size_t)layer][(size_t)site] = (int)impl->pairs.size();
        impl->pairs.push_back(std::move(pr));
    }
    std::shared_ptr<LoraAdapter> out(new LoraAdapter);
    out->impl_ = std::move(impl);
    return std::shared_ptr<const LoraAdapter>(std::move(out));
}

}  // namespace edgellm
