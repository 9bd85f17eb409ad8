// Hyper-parameters of a model, read from its GGUF metadata as its family's table entry
// (edgellm/arch.h) says.
#include <algorithm>
#include <cmath>
#include <optional>

#include "edgellm/arch.h"
#include "model/model_impl.h"

namespace edgellm {

namespace {

void set_field(HParams& hp, Field f, double v) {
    switch (f) {
        case Field::CtxTrain: hp.n_ctx_train = (int64_t)v; break;
        case Field::Embd: hp.n_embd = (int64_t)v; break;
        case Field::Layers: hp.n_layer = (int64_t)v; break;
        case Field::Ff: hp.n_ff = (int64_t)v; break;
        case Field::Heads: hp.n_head = (int64_t)v; break;
        case Field::HeadsKv: hp.n_head_kv = (int64_t)v; break;
        case Field::KeyLength: hp.head_dim = (int64_t)v; break;
        case Field::ValueLength: break;  // checked against the key length below
        case Field::RmsEps: hp.rms_eps = (float)v; break;
        case Field::Rot: hp.n_rot = (int64_t)v; break;
        case Field::RopeBase: hp.rope_freq_base = (float)v; break;
        case Field::RopeBaseSwa: hp.rope_freq_base_swa = (float)v; break;
        case Field::Swa: hp.n_swa = (int64_t)v; break;
        case Field::SwaPattern: hp.swa_period = (int64_t)v; break;
        case Field::FinalSoftcap: hp.final_softcap = (float)v; break;
        case Field::RopeCtxOrig: hp.n_ctx_orig = (int64_t)v; break;
        case Field::RopeAttnFactor: hp.rope_attn_factor = (float)v; break;
        case Field::KeyLengthSwa: hp.head_dim_swa = (int64_t)v; break;
        case Field::ValueLengthSwa: break;  // checked by the family against the key length
        case Field::RotSwa: hp.n_rot_swa = (int64_t)v; break;
        case Field::SharedKvLayers: hp.n_kv_shared = (int64_t)v; break;
        case Field::EmbdPerLayer: hp.n_embd_per_layer = (int64_t)v; break;
        case Field::ConvKernel: hp.conv_kernel = (int64_t)v; break;
    }
}

// A key given per layer; "" or why it cannot be.
std::string set_field_array(HParams& hp, Field f, const std::vector<int64_t>& v) {
    switch (f) {
        case Field::Ff:
            hp.n_ff_arr = v;
            hp.n_ff = v[0];  // (llama.cpp's n_ff(): the first layer's)
            return {};
        case Field::HeadsKv:
            hp.n_head_kv_arr = v;
            hp.n_head_kv = v[0];
            return {};
        case Field::SwaPattern:
            hp.swa_layers.assign(v.size(), 0);
            for (size_t i = 0; i < v.size(); ++i) hp.swa_layers[i] = v[i] != 0;
            return {};
        default:
            return "cannot be given per layer";
    }
}

}  // namespace

int64_t HParams::n_embd_kv_max() const {
    int64_t m = n_embd_kv();
    for (int64_t il = 0; il < n_layer; ++il) m = std::max(m, n_embd_kv_at(il));
    return m;
}

int64_t HParams::n_embd_q_max() const {
    int64_t m = n_embd_q();
    for (int64_t il = 0; il < n_layer; ++il) m = std::max(m, n_embd_q_at(il));
    return m;
}

int64_t HParams::n_ff_max() const {
    int64_t m = n_ff;
    for (int64_t il = 0; il < n_layer; ++il) m = std::max(m, n_ff_at(il));
    return m;
}

Result<HParams> read_hparams(const GgufFile& f) {
    using R = Result<HParams>;
    HParams hp;
    const auto arch_name = f.get_string("general.architecture");
    if (!arch_name) return R::fail(f.path() + ": missing general.architecture");
    const ArchInfo* arch = find_arch(*arch_name);
    if (!arch) {
        if (const char* why = refused_architecture(*arch_name))
            return R::fail(f.path() + ": architecture \"" + *arch_name + "\": " + why);
        return R::fail(f.path() + ": architecture \"" + *arch_name +
                       "\" is not supported (supported: " + arch_names() + ")");
    }
    hp.arch = *arch_name;
    const std::string p = hp.arch + ".";

    // The table's keys: required ones present and positive, the others their defaults.
    std::string missing;
    int64_t v_len = -1;
    hp.n_head_kv = hp.head_dim = hp.n_rot = -1;  // (absent: derived below)
    for (const ArchKey& k : arch->keys) {
        if (k.field == Field::Layers) {
            if (auto x = f.get_int(p + k.key)) hp.n_layer = *x;
        }
    }
    for (const ArchKey& k : arch->keys) {
        const std::string key = p + k.key;
        std::optional<double> v;
        if (k.form != KeyForm::Scalar) {
            // an array of one value per layer (the only form a PerLayer key takes)
            if (const GgufArray* a = f.get_array(key)) {
                std::vector<int64_t> vals;
                for (size_t i = 0; i < a->count; ++i)
                    if (auto x = a->int_at(i)) vals.push_back(*x);
                std::string why;
                if (hp.n_layer <= 0 || (int64_t)vals.size() != hp.n_layer)
                    why = "has " + std::to_string(a->count) + " values for " +
                          std::to_string(hp.n_layer) + " layers";
                else if (k.field != Field::SwaPattern &&
                         std::any_of(vals.begin(), vals.end(), [&](int64_t x) {
                             // (LFM2: 0 KV heads on a recurrent layer)
                             return x < 0 || (x == 0 && !(k.field == Field::HeadsKv &&
                                                          arch->recurrent_without_kv_heads));
                         }))
                    why = "has a value that is not positive";
                else
                    why = set_field_array(hp, k.field, vals);
                if (!why.empty()) missing += (missing.empty() ? "" : ", ") + key + " (" + why + ")";
                continue;
            }
            if (k.form == KeyForm::PerLayer) {
                if (k.required || f.find(key) != nullptr)
                    missing += (missing.empty() ? "" : ", ") + key +
                               (f.find(key) ? " (not an array of one value per layer)" : "");
                continue;
            }
        }
        if (k.is_float) {
            if (auto x = f.get_float(key)) v = *x;
        } else if (auto x = f.get_int(key)) {
            v = (double)*x;
        }
        if (!v && f.find(key) != nullptr) {
            missing += (missing.empty() ? "" : ", ") + key + " (wrong type)";
            continue;
        }
        if (k.required && (!v || *v <= 0)) {
            missing += (missing.empty() ? "" : ", ") + key;
            continue;
        }
        if (!v && k.def != kNoDefault) v = k.def;
        if (!v) continue;
        if (k.field == Field::ValueLength) v_len = (int64_t)*v;
        set_field(hp, k.field, *v);
    }
    if (!missing.empty()) return R::fail(f.path() + ": missing or invalid metadata: " + missing);

    if (hp.n_ctx_train <= 0) hp.n_ctx_train = 4096;
    if (arch->recurrent_without_kv_heads && !hp.n_head_kv_arr.empty()) {
        // The layers without KV heads are recurrent; the model's KV heads are its attention
        // layers' (the first one's).
        hp.recurrent_layers.assign((size_t)hp.n_layer, 0);
        hp.n_head_kv = 0;
        for (int64_t il = hp.n_layer - 1; il >= 0; --il) {
            const int64_t kv = hp.n_head_kv_arr[(size_t)il];
            hp.recurrent_layers[(size_t)il] = kv == 0;
            if (kv > 0) hp.n_head_kv = kv;
        }
        if (hp.n_head_kv == 0)
            return R::fail(f.path() + ": " + p + "attention.head_count_kv is 0 on every layer "
                           "(a model without attention layers)");
    }
    if (hp.n_head_kv == -1) hp.n_head_kv = hp.n_head;
    for (int64_t il = -1; il < hp.n_layer; ++il) {
        if (hp.is_recurrent(il)) continue;
        const int64_t kv = hp.n_head_kv_at(il);
        if (kv <= 0 || hp.n_head % kv != 0)
            return R::fail(f.path() + ": " + p + "attention.head_count_kv = " + std::to_string(kv) +
                           (il >= 0 ? " (layer " + std::to_string(il) + ")" : std::string()) +
                           " does not divide head_count " + std::to_string(hp.n_head));
    }
    if (hp.head_dim == -1) hp.head_dim = hp.n_embd / hp.n_head;
    if (v_len >= 0 && v_len != hp.head_dim)
        return R::fail(f.path() + ": key_length " + std::to_string(hp.head_dim) +
                       " != value_length " + std::to_string(v_len) + " is not supported");
    if (hp.head_dim <= 0 || hp.head_dim % 2 != 0)
        return R::fail(f.path() + ": head dimension " + std::to_string(hp.head_dim) +
                       " is not even");
    if (hp.n_rot == -1) hp.n_rot = hp.head_dim;
    if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
        return R::fail(f.path() + ": " + p + "rope.dimension_count = " + std::to_string(hp.n_rot) +
                       " must be even and at most the head dimension " +
                       std::to_string(hp.head_dim));

    // RoPE scaling: "none" or "linear" (positions divided by the factor); Llama 3's and
    // Phi-3's are frequency factors in tensors (rope_freqs, rope_factors_long/short). YaRN
    // and friends change the rotation itself: refused rather than wrong logits.
    const std::string scaling = f.get_string(p + "rope.scaling.type").value_or("none");
    double factor = f.get_float(p + "rope.scaling.factor").value_or(0.0);
    if (factor == 0.0) factor = f.get_float(p + "rope.scale_linear").value_or(1.0);
    if (scaling == "linear" ||
        (scaling == "none" && factor != 1.0 && f.find(p + "rope.scale_linear") != nullptr)) {
        if (!(factor > 0.0)) return R::fail(f.path() + ": rope scaling factor must be positive");
        hp.rope_freq_scale = (float)(1.0 / factor);
    } else if (scaling == "llama3" || scaling == "longrope") {
        // (the factors are tensors: without them the type means nothing we can compute)
        const bool has = scaling == "llama3" ? f.tensor("rope_freqs.weight") != nullptr
                                             : f.tensor("rope_factors_long.weight") != nullptr;
        if (!has)
            return R::fail(f.path() + ": rope scaling type \"" + scaling +
                           "\" without its frequency factor tensors");
    } else if (scaling != "none") {
        return R::fail(f.path() + ": rope scaling type \"" + scaling + "\" is not supported yet");
    }
    if (!(hp.rope_attn_factor > 0.0f))
        return R::fail(f.path() + ": " + p + "rope.scaling.attn_factor must be positive");

    hp.rope_neox = arch->rope_neox;
    hp.qk_norm = arch->qk_norm;
    hp.nope_every = arch->nope_every;
    hp.longrope = arch->longrope;
    for (const ArchTensor& t : arch->tensors)
        if (t.slot == Slot::Bq) hp.qkv_bias = true;
    if (hp.longrope && hp.n_ctx_orig <= 0) hp.n_ctx_orig = hp.n_ctx_train;

    const GgufTensorInfo* embd = f.tensor("token_embd.weight");
    if (!embd) return R::fail(f.path() + ": missing tensor token_embd.weight");
    hp.n_vocab = embd->ne[1];
    hp.tied_output = f.tensor("output.weight") == nullptr;
    if (arch->finish) {
        const std::string err = arch->finish(hp, f);
        if (!err.empty()) return R::fail(f.path() + ": " + err);
    }
    return hp;
}

}  // namespace edgellm
