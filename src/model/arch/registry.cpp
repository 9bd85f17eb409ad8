// The list of families and what reads the table's entries.
#include <cstdio>
#include <cstring>

#include "edgellm/arch.h"
#include "model/arch/families.h"

namespace edgellm {

int64_t HfConvert::need_integer(std::string_view field) const {
    const auto v = integer(field);
    if (!v) fail("config.json: \"" + std::string(field) + "\" missing");
    return *v;
}

double HfConvert::need_number(std::string_view field) const {
    const auto v = number(field);
    if (!v) fail("config.json: \"" + std::string(field) + "\" missing");
    return *v;
}

void HfConvert::fail(const std::string& why) const {
    throw Error(why);
}

const std::vector<const ArchInfo*>& architectures() {
    static const std::vector<const ArchInfo*> all = {&arch::llama(), &arch::qwen2(), &arch::qwen3(),
                                                     &arch::gemma3(), &arch::gemma4(), &arch::phi3(),
                                                     &arch::smollm3(), &arch::lfm2()};
    return all;
}

const char* refused_architecture(std::string_view name) {
    static const std::pair<const char*, const char*> refused[] = {
        {"lfm2moe", "LFM2's mixture of experts (LFM2-8B-A1B) is not supported; edgellm runs the "
                    "dense LFM2 and LFM2.5 (350M to 2.6B, architecture lfm2)"},
        {"clip", "this is a multimodal projector (mmproj) file, not a model: edgellm runs text "
                 "models"},
    };
    for (const auto& [n, why] : refused)
        if (name == n) return why;
    return nullptr;
}

const ArchInfo* find_arch(std::string_view name) {
    for (const ArchInfo* a : architectures())
        if (name == a->name) return a;
    return nullptr;
}

std::string arch_names() {
    std::string s;
    for (const ArchInfo* a : architectures()) s += (s.empty() ? "" : ", ") + std::string(a->name);
    return s;
}

int64_t dim_length(Dim d, const HParams& h, int64_t il) {
    switch (d) {
        case Dim::One: return 1;
        case Dim::Embd: return h.n_embd;
        case Dim::Vocab: return h.n_vocab;
        case Dim::Ff: return h.n_ff_at(il);
        case Dim::FfPair: return 2 * h.n_ff_at(il);
        case Dim::Q: return h.n_embd_q_at(il);
        case Dim::Kv: return h.n_embd_kv_at(il);
        case Dim::Qkv: return h.n_embd_q_at(il) + 2 * h.n_embd_kv_at(il);
        case Dim::HeadDim: return h.head_dim_at(il);
        case Dim::HeadHalf: return h.head_dim_at(il) / 2;
        case Dim::RotHalf: return h.n_rot_at(il) / 2;
        case Dim::PerLayer: return h.n_embd_per_layer;
        case Dim::PerLayerAll: return h.n_embd_per_layer * h.n_layer;
        case Dim::ConvKernel: return h.conv_kernel;
        case Dim::Embd3: return 3 * h.n_embd;
    }
    return 0;
}

bool tensor_present(const ArchTensor& t, const HParams& h, int64_t il) {
    switch (t.when) {
        case When::Always: return true;
        case When::KvLayer: return il < 0 || h.has_kv(il);
        case When::PerLayerEmbd: return h.n_embd_per_layer > 0;
        case When::AttnLayer: return il < 0 || !h.is_recurrent(il);
        case When::RecurrentLayer: return il < 0 || h.is_recurrent(il);
    }
    return true;
}

const char* refusal(const ArchInfo& a, std::string_view name) {
    for (const ArchRefusal& r : a.refused)
        if (r.prefix ? name.starts_with(r.prefix) : name.find(r.part) != std::string_view::npos)
            return r.why;
    return nullptr;
}

std::string tensor_name(const ArchTensor& t, int64_t il) {
    if (!t.per_layer) return t.gguf;
    return "blk." + std::to_string(il) + "." + t.gguf;
}

const ArchTensor* find_tensor(const ArchInfo& a, std::string_view name, int64_t* layer) {
    int64_t il = -1;
    if (name.starts_with("blk.")) {
        const size_t dot = name.find('.', 4);
        if (dot == std::string_view::npos || dot == 4) return nullptr;
        il = 0;
        for (size_t i = 4; i < dot; ++i) {
            if (name[i] < '0' || name[i] > '9' || il > 100000) return nullptr;
            il = il * 10 + (name[i] - '0');
        }
        name.remove_prefix(dot + 1);
    }
    for (const ArchTensor& t : a.tensors)
        if (t.per_layer == (il >= 0) && name == t.gguf) {
            if (layer) *layer = il;
            return &t;
        }
    return nullptr;
}

}  // namespace edgellm
