// edgellm convert: a Hugging Face checkpoint to GGUF, as llama.cpp's convert_hf_to_gguf.py
// writes it (its TextModel and the family's class), driven by the architecture table: the
// keys whose `hf` names a config.json field, the tensors whose `hf` names a checkpoint's,
// the family's hooks for the rest (edgellm/arch.h, src/model/arch/).
#include "edgellm/convert.h"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "edgellm/arch.h"
#include "edgellm/gguf.h"
#include "edgellm/model.h"
#include "kernels/fp16.h"
#include "kernels/quantize.h"
#include "modelfile/convert/general.h"
#include "modelfile/convert/hf_config.h"
#include "modelfile/convert/safetensors.h"
#include "modelfile/convert/vocab.h"

namespace edgellm {

namespace fs = std::filesystem;
using namespace convert;
using nlohmann::json;

std::optional<OutType> out_type_from_name(std::string_view n) {
    static const std::pair<const char*, OutType> names[] = {
        {"f32", OutType::F32}, {"f16", OutType::F16}, {"bf16", OutType::BF16},
        {"q8_0", OutType::Q8_0}, {"auto", OutType::Auto}};
    for (const auto& [s, t] : names)
        if (n == s) return t;
    return std::nullopt;
}

const char* out_type_names() {
    return "f32, f16, bf16, q8_0, auto";
}

namespace {

// One tensor of the output: from the checkpoint (src) or computed (values).
struct Plan {
    std::string name;
    TensorType type = TensorType::F32;
    std::vector<int64_t> ne;  // GGUF order: ne[0] is the row
    const StTensor* src = nullptr;
    std::vector<float> values;
    HfMap map = HfMap::Copy;
    int64_t heads = 0;  // the rope permutation's

    int64_t rows() const {
        int64_t r = 1;
        for (size_t d = 1; d < ne.size(); ++d) r *= ne[d];
        return r;
    }
    int64_t n_elements() const { return rows() * ne[0]; }
};

// What llama.cpp's TextModel leaves out of a text model's checkpoint: other modalities'
// tensors, and buffers that are not weights.
bool not_text(const std::string& n) {
    for (const char* p : {"mlp", "vit.", "vpm.", "siglip2.", "conformer.", "merger.", "resampler.",
                          "sound_encoder.", "sound_projection.", "speech_embeddings."})
        if (n.starts_with(p)) return true;
    for (const char* s : {"visual.", "vision.", "audio.", "talker.", "vision_", "audio_", "token2wav.",
                          "code2wav.", "projector.", "pre_mm_projector_norm", "image_newline",
                          "view_seperator", "patch_embed", "patch_embedding", "patch_merger.",
                          "patch_merge_mlp.", "model.connector."})
        if (n.find(s) != std::string::npos) return true;
    return false;
}

bool not_weight(const std::string& n) {
    return n.ends_with(".attention.masked_bias") || n.ends_with(".attention.bias") ||
           n.ends_with(".rotary_emb.inv_freq");
}

std::string checkpoint_name(std::string n) {
    if (const size_t p = n.find("language_model."); p != std::string::npos) n.erase(p, 15);
    return n;
}

// The conversion: the family's hooks see it as HfConvert.
class Conversion final : public HfConvert {
  public:
    Conversion(std::string dir, const HfConfig& cfg, const ArchInfo& arch)
        : dir_(std::move(dir)), cfg_(cfg), arch_(arch), vocab_(dir_, cfg, arch.tokenizer_pre) {}

    std::optional<double> number(std::string_view f) const override { return cfg_.number(f); }
    std::optional<int64_t> integer(std::string_view f) const override { return cfg_.integer(f); }
    std::optional<std::string> string(std::string_view f) const override { return cfg_.string(f); }
    std::optional<std::vector<double>> numbers(std::string_view f) const override { return cfg_.numbers(f); }
    std::optional<std::vector<std::string>> strings(std::string_view f) const override { return cfg_.strings(f); }
    std::optional<bool> flag(std::string_view f) const override { return cfg_.flag(f); }
    bool has(std::string_view f) const override { return cfg_.has(f); }
    bool has_file(std::string_view name) const override {
        std::error_code ec;
        return fs::is_regular_file(fs::path(dir_) / name, ec);
    }
    int64_t json_entries(std::string_view file, std::string_view path) const override {
        const auto j = read_json((fs::path(dir_) / file).string());
        const json* v = j ? json_at(*j, path) : nullptr;
        return v && (v->is_object() || v->is_array()) ? (int64_t)v->size() : 0;
    }
    std::optional<bool> file_flag(std::string_view file, std::string_view path) const override {
        const auto j = read_json((fs::path(dir_) / file).string());
        const json* v = j ? json_at(*j, path) : nullptr;
        return v && v->is_boolean() ? std::optional<bool>(v->get<bool>()) : std::nullopt;
    }
    std::optional<std::string> file_string(std::string_view file, std::string_view path) const override {
        const auto j = read_json((fs::path(dir_) / file).string());
        const json* v = j ? json_at(*j, path) : nullptr;
        return v && v->is_string() ? std::optional<std::string>(v->get<std::string>()) : std::nullopt;
    }
    void set_u32(const std::string& k, uint32_t v) override { put(k, gguf_value(v)); }
    void set_f32(const std::string& k, float v) override { put(k, gguf_value(v)); }
    void set_bool(const std::string& k, bool v) override { put(k, gguf_value(v)); }
    void set_string(const std::string& k, const std::string& v) override { put(k, gguf_value(v)); }
    void set_i32_array(const std::string& k, const std::vector<int32_t>& v) override {
        put(k, gguf_value(gguf_int32_array(v)));
    }
    void set_bool_array(const std::string& k, const std::vector<bool>& v) override {
        put(k, gguf_value(gguf_bool_array(v)));
    }
    void remove(const std::string& k) override {
        if (k.starts_with("tokenizer."))
            vocab_.remove(k);
        else
            std::erase_if(model_kv_, [&](const auto& kv) { return kv.first == key(k); });
    }
    void move_to_end(const std::string& k) override {
        for (size_t i = 0; i < model_kv_.size(); ++i)
            if (model_kv_[i].first == key(k)) {
                auto kv = std::move(model_kv_[i]);
                model_kv_.erase(model_kv_.begin() + (long)i);
                model_kv_.push_back(std::move(kv));
                return;
            }
    }
    void set_f32_early(const std::string& k, float v) override { early_kv_.emplace_back(key(k), gguf_value(v)); }
    void add_tensor(const std::string& name, std::vector<float> values) override {
        Plan p;
        p.name = name;
        p.ne = {(int64_t)values.size()};
        p.values = std::move(values);
        extra_.push_back(std::move(p));
    }
    void keep_rows(const std::string& name, int64_t rows) override { keep_rows_[name] = rows; }
    bool vocab_sentencepiece(SpmAdded how) override { return vocab_.sentencepiece(how == SpmAdded::Phi3); }
    void vocab_bpe() override { vocab_.bpe(); }
    void vocab_llama_hf(const std::string& model, const std::vector<std::string>& user_defined) override {
        vocab_.llama_hf(model, user_defined);
    }
    int64_t n_tokens() const override { return vocab_.n_tokens(); }

    ConvertStats run(const Checkpoint& ck, const ConvertOptions& opts);

  private:
    std::string key(const std::string& k) const {
        return k.starts_with("general.") || k.starts_with("tokenizer.") ? k : std::string(arch_.name) + "." + k;
    }
    void put(const std::string& k, GgufValue v) {
        if (k.starts_with("tokenizer.")) return vocab_.set(k, std::move(v));
        for (auto& [old, val] : model_kv_)
            if (old == key(k)) {
                val = std::move(v);
                return;
            }
        model_kv_.emplace_back(key(k), std::move(v));
    }
    void table_keys();
    void rope_scaling();
    std::vector<Plan> plan_tensors(const Checkpoint& ck, OutType outtype, std::vector<std::string>* notes);
    void check_loads(const GgufWriter& w) const;

    std::string dir_;
    const HfConfig& cfg_;
    const ArchInfo& arch_;
    VocabReader vocab_;
    Kv model_kv_, early_kv_;
    std::vector<Plan> extra_;
    std::map<std::string, int64_t> keep_rows_;
};

// The keys whose `hf` names a config.json field: written when it is there, a required one
// refused when it is not; TextModel's RoPE scaling keys before the base, as there.
void Conversion::table_keys() {
    bool scaling = false;
    for (const ArchKey& k : arch_.keys) {
        if (std::string_view(k.key) == "rope.freq_base") {
            rope_scaling();
            scaling = true;
        }
        if (!k.hf) continue;
        if (k.is_float) {
            if (const auto v = cfg_.number(k.hf)) set_f32(k.key, (float)*v);
        } else if (const auto v = cfg_.integer(k.hf)) {
            if (*v < 0 || *v > UINT32_MAX)
                fail("config.json: \"" + std::string(k.hf) + "\" is " + std::to_string(*v) + ", out of range");
            set_u32(k.key, (uint32_t)*v);
        }
        if (k.required && !cfg_.find(k.hf))
            fail("config.json: \"" + std::string(k.hf) + "\" missing (" + arch_.name + "." + k.key +
                 " is required)");
    }
    if (!scaling) rope_scaling();
}

// llama.cpp's TextModel: the RoPE scaling types it writes as keys (Llama 3's and Phi-3's
// factors are tensors, the families' hooks).
void Conversion::rope_scaling() {
    const auto type = cfg_.string("rope.rope_type");
    if (!type) return;
    const auto factor = cfg_.number("rope.factor");
    if (*type == "linear" && factor) {
        set_string("rope.scaling.type", "linear");
        set_f32("rope.scaling.factor", (float)*factor);
    } else if (*type == "yarn" && factor) {
        set_string("rope.scaling.type", "yarn");
        set_f32("rope.scaling.factor", (float)*factor);
        const auto orig = cfg_.integer("rope.original_max_position_embeddings");
        if (!orig) fail("config.json: rope_scaling's \"original_max_position_embeddings\" missing (YaRN needs it)");
        set_u32("rope.scaling.original_context_length", (uint32_t)*orig);
        for (auto [k, f] : {std::pair{"rope.scaling.yarn_ext_factor", "rope.extrapolation_factor"},
                            {"rope.scaling.yarn_beta_fast", "rope.beta_fast"},
                            {"rope.scaling.yarn_beta_slow", "rope.beta_slow"}})
            if (const auto v = cfg_.number(f)) set_f32(k, (float)*v);
        const auto attn = cfg_.has("rope.attention_factor") ? cfg_.number("rope.attention_factor")
                                                              : cfg_.number("rope.attn_factor");
        if (attn) set_f32("rope.scaling.yarn_attn_factor", (float)*attn);
    } else if (*type == "su" || *type == "longrope") {
        set_string("rope.scaling.type", "longrope");
    }
}

std::vector<Plan> Conversion::plan_tensors(const Checkpoint& ck, OutType outtype, std::vector<std::string>* notes) {
    // the checkpoint's name of every tensor of the table, in every layer
    const int64_t n_layer = cfg_.integer("num_hidden_layers").value_or(0);
    std::map<std::string, std::pair<const ArchTensor*, int64_t>> by_hf;
    for (const ArchTensor& t : arch_.tensors) {
        if (!t.hf) continue;
        if (!t.per_layer) {
            by_hf[t.hf] = {&t, -1};
            continue;
        }
        for (int64_t il = 0; il < n_layer; ++il) {
            char buf[256];
            std::snprintf(buf, sizeof buf, t.hf, (int)il);
            by_hf[buf] = {&t, il};
        }
    }
    const int64_t n_head = cfg_.integer("num_attention_heads").value_or(0);
    std::vector<Plan> plans = std::move(extra_);
    size_t skipped = 0;
    for (const StTensor* st : ck.tensors()) {
        if (not_text(st->name)) {
            ++skipped;
            continue;
        }
        const std::string name = checkpoint_name(st->name);
        if (not_weight(name)) continue;
        const auto it = by_hf.find(name);
        if (it == by_hf.end())
            fail(st->file->path() + ": tensor \"" + st->name + "\" has no place in a " + arch_.name +
                 " model of " + std::to_string(n_layer) + " layers (a variant edgellm does not run?)");
        const auto [t, il] = it->second;
        Plan p;
        p.src = st;
        p.name = tensor_name(*t, il);
        p.ne.assign(st->shape.rbegin(), st->shape.rend());
        if (p.ne.empty()) p.ne = {1};
        p.map = t->hf_map;
        if (auto k = keep_rows_.find(p.name); k != keep_rows_.end() && p.ne.size() == 2 && k->second < p.ne[1])
            p.ne[1] = k->second;
        if (p.map == HfMap::RopePermuteQ || p.map == HfMap::RopePermuteK) {
            const int64_t n_kv = need_integer("num_key_value_heads");
            p.heads = p.map == HfMap::RopePermuteK && n_kv != need_integer("num_attention_heads") ? n_kv : n_head;
            if (p.heads <= 0 || p.rows() % (2 * p.heads) != 0)
                fail(st->file->path() + ": tensor \"" + st->name + "\": " + std::to_string(p.rows()) +
                     " rows cannot be " + std::to_string(p.heads) + " heads of rotary pairs");
        }
        plans.push_back(std::move(p));
    }
    if (skipped) notes->push_back("left out " + std::to_string(skipped) + " tensors of other modalities");
    // llama.cpp's types: vectors and norms f32, the matrices the outtype's (q8_0 needs whole
    // blocks of 32 in a row, else f16)
    for (Plan& p : plans) {
        if (p.ne.size() <= 1 || p.name.ends_with("_norm.weight") || !p.name.ends_with(".weight")) {
            p.type = TensorType::F32;
            continue;
        }
        switch (outtype) {
            case OutType::F32: p.type = TensorType::F32; break;
            case OutType::BF16: p.type = TensorType::BF16; break;
            case OutType::Q8_0: p.type = p.ne[0] % 32 == 0 ? TensorType::Q8_0 : TensorType::F16; break;
            default: p.type = TensorType::F16; break;
        }
    }
    return plans;
}

// What edgellm's loader would say of the file: its header with a data section of untouched
// (never allocated) pages, checked as Model::load checks a file.
void Conversion::check_loads(const GgufWriter& w) const {
    const std::vector<uint8_t> head = w.header_bytes();
    const size_t size = head.size() + w.data_bytes();
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) fail("cannot map " + std::to_string(size) + " bytes to check the result");
    std::memcpy(m, head.data(), head.size());
    std::string err;
    {
        auto f = GgufFile::parse({(const uint8_t*)m, size}, "the converted model");
        if (!f)
            err = f.error();
        else if (auto hp = Model::check(**f); !hp)
            err = hp.error();
    }
    munmap(m, size);
    if (!err.empty()) fail("edgellm would not load the result: " + err);
}

// A row of a checkpoint tensor as floats.
void load_row(const StTensor& t, int64_t row, int64_t n, float* out) {
    const uint8_t* p = t.data + (size_t)row * (size_t)n * st_type_size(t.type);
    switch (t.type) {
        case StType::F32: std::memcpy(out, p, (size_t)n * 4); break;
        case StType::F16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = fp16_to_f32(h);
            }
            break;
        case StType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = bf16_to_f32(h);
            }
            break;
        case StType::F64:
            for (int64_t i = 0; i < n; ++i) {
                double d;
                std::memcpy(&d, p + 8 * i, 8);
                out[i] = (float)d;
            }
            break;
    }
}

// The source row of output row r: llama.cpp's LlamaModel.permute pairs the two halves of
// each head's rotary dimensions (HF's order) as neighbours (GGML's).
int64_t source_row(const Plan& p, int64_t r) {
    if (p.map != HfMap::RopePermuteQ && p.map != HfMap::RopePermuteK) return r;
    const int64_t head_rows = p.rows() / p.heads, half = head_rows / 2;
    const int64_t h = r / head_rows, rem = r % head_rows;
    return h * head_rows + (rem % 2) * half + rem / 2;
}

// Fill one output tensor, rows split over threads. The source's pages go back as its rows
// are read (those of a permuted tensor at the end: its rows are read out of order), so the
// resident memory is the output tensor and a few rows.
bool fill(const Plan& p, uint8_t* dst, int n_threads, std::string* err) {
    const int64_t ne0 = p.ne[0], rows = p.rows();
    const size_t out_row = row_size(p.type, ne0);
    const size_t in_row = p.src ? (size_t)ne0 * st_type_size(p.src->type) : 0;
    const bool in_order = p.map != HfMap::RopePermuteQ && p.map != HfMap::RopePermuteK;
    auto release_rows = [&](int64_t r0, int64_t r1) {
        if (p.src && in_order) p.src->file->release(p.src->data + (size_t)r0 * in_row, (size_t)(r1 - r0) * in_row);
    };
    const bool plain = p.src && p.map == HfMap::Copy &&
                       ((p.src->type == StType::F32 && p.type == TensorType::F32) ||
                        (p.src->type == StType::F16 && p.type == TensorType::F16) ||
                        (p.src->type == StType::BF16 && p.type == TensorType::BF16));
    const int64_t chunk = plain ? std::max<int64_t>(1, (16 << 20) / (int64_t)out_row) : 64;
    std::atomic<int64_t> next{0};
    std::atomic<bool> ok{true};
    auto work = [&] {
        std::vector<float> buf(plain ? 0 : (size_t)ne0);
        for (int64_t r0; (r0 = next.fetch_add(chunk)) < rows;) {
            const int64_t r1 = std::min(rows, r0 + chunk);
            if (plain) {
                std::memcpy(dst + (size_t)r0 * out_row, p.src->data + (size_t)r0 * in_row, (size_t)(r1 - r0) * out_row);
                release_rows(r0, r1);
                continue;
            }
            for (int64_t r = r0; r < r1; ++r) {
                if (p.src)
                    load_row(*p.src, source_row(p, r), ne0, buf.data());
                else
                    std::memcpy(buf.data(), p.values.data() + r * ne0, (size_t)ne0 * 4);
                if (p.map == HfMap::PlusOne)
                    for (float& x : buf) {
                        x += 1.0f;
                        // (torch adds in the checkpoint's type: a half stays a half)
                        if (p.src && p.src->type == StType::F16) x = fp16_to_f32(f32_to_fp16(x));
                    }
                if (!quantize_row(p.type, buf.data(), dst + (size_t)r * out_row, ne0)) ok = false;
            }
            release_rows(r0, r1);
        }
    };
    std::vector<std::thread> pool;
    for (int k = 1; k < n_threads && k * chunk < rows; ++k) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    if (p.src) p.src->release();
    if (!ok) *err = std::string("cannot write ") + tensor_type_name(p.type);
    return ok;
}

std::string kv_string(const Kv& kv, const std::string& key) {
    for (const auto& [k, v] : kv)
        if (k == key && v.as_string()) return *v.as_string();
    return "";
}

// llama.cpp's default file name: Name-Size-Finetune-Version-TYPE.gguf (gguf-py's
// naming_convention), and its {ftype} templates in a given one.
std::string output_path(const std::string& dir, const std::string& outfile, const Kv& general,
                        const std::string& type_name) {
    std::string upper = type_name, lower = type_name;
    for (char& c : upper) c = (char)std::toupper((unsigned char)c);
    for (char& c : lower) c = (char)std::tolower((unsigned char)c);
    std::error_code ec;
    if (!outfile.empty() && !fs::is_directory(outfile, ec)) {
        std::string s = outfile;
        for (auto [from, to] : {std::pair{"{ftype}", lower}, {"{outtype}", lower}, {"{FTYPE}", upper}, {"{OUTTYPE}", upper}})
            for (size_t pos; (pos = s.find(from)) != std::string::npos;) s.replace(pos, std::strlen(from), to);
        return s;
    }
    auto dashed = [](std::string s) {
        for (char& c : s)
            if (c == ' ' || c == '/') c = '-';
        return s;
    };
    const std::string base = kv_string(general, "general.basename");
    std::string name = dashed(!base.empty() ? base : kv_string(general, "general.name"));
    if (name.empty()) name = "ggml-model";
    for (const char* k : {"general.size_label", "general.finetune", "general.version"})
        if (const std::string v = kv_string(general, k); !v.empty()) name += "-" + dashed(v);
    name += "-" + upper + ".gguf";
    return (fs::path(outfile.empty() ? dir : outfile) / name).string();
}

ConvertStats Conversion::run(const Checkpoint& ck, const ConvertOptions& opts) {
    ConvertStats st;
    st.arch = arch_.name;
    st.hf_arch = cfg_.architecture();
    if (const json* q = cfg_.find("quantization_config"))
        fail("config.json: a quantized checkpoint (quantization_config " + q->dump().substr(0, 80) +
             "): edgellm convert reads F32, F16 and BF16 weights");

    // --outtype auto: the first matrix in bf16 or f16 decides (llama.cpp's heuristic)
    OutType outtype = opts.outtype;
    if (outtype == OutType::Auto) {
        outtype = OutType::F16;
        for (const StTensor* t : ck.tensors())
            if (!not_text(t->name) && t->shape.size() >= 2 && (t->type == StType::BF16 || t->type == StType::F16)) {
                outtype = t->type == StType::BF16 ? OutType::BF16 : OutType::F16;
                break;
            }
    }
    static const std::map<OutType, std::pair<FileType, const char*>> kFile = {
        {OutType::F32, {FileType::F32, "F32"}}, {OutType::F16, {FileType::F16, "F16"}},
        {OutType::BF16, {FileType::BF16, "BF16"}}, {OutType::Q8_0, {FileType::Q8_0, "Q8_0"}}};
    st.file_type = kFile.at(outtype).first;

    // metadata: the table's keys, TextModel's RoPE scaling, the file type, the tokenizer,
    // the family's own
    table_keys();
    model_kv_.emplace_back("general.file_type", gguf_value((uint32_t)st.file_type));
    if (arch_.convert_vocab)
        arch_.convert_vocab(*this);
    else if (!vocab_.sentencepiece(false))
        vocab_.bpe();
    if (!vocab_.pre_how().empty()) st.notes.push_back(vocab_.pre_how());
    if (arch_.convert) arch_.convert(*this);

    std::vector<Plan> plans = plan_tensors(ck, outtype, &st.notes);
    for (const Plan& p : plans) st.n_params += p.n_elements();
    const Kv general = general_metadata(dir_, cfg_.string("_name_or_path").value_or(""), st.n_params);

    GgufWriter w;
    w.set("general.architecture", gguf_value(arch_.name));
    for (const auto& [k, v] : early_kv_) w.set(k, v);
    for (const auto& [k, v] : general) w.set(k, v);
    for (const auto& [k, v] : model_kv_) w.set(k, v);
    w.set("general.quantization_version", gguf_value((uint32_t)2));
    for (const auto& [k, v] : vocab_.kv()) w.set(k, v);

    const int n_threads = opts.n_threads > 0 ? opts.n_threads : (int)std::max(1u, std::thread::hardware_concurrency());
    size_t total = 0, done = 0;
    for (const Plan& p : plans) total += row_size(p.type, p.ne[0]) * (size_t)p.rows();
    for (size_t i = 0; i < plans.size(); ++i) {
        const Plan& p = plans[i];
        w.add_tensor(p.name, p.type, p.ne, [&, i](uint8_t* dst, std::string* err) {
            const Plan& q = plans[i];
            if (!fill(q, dst, n_threads, err)) return false;
            done += row_size(q.type, q.ne[0]) * (size_t)q.rows();
            if (opts.progress) opts.progress({i, plans.size(), q.name, q.type, done, total});
            return true;
        });
    }
    check_loads(w);
    st.path = output_path(dir_, opts.outfile, general, kFile.at(outtype).second);
    std::error_code ec;
    for (const fs::path& in : {fs::path(dir_) / "config.json", fs::path(dir_) / "tokenizer.json",
                               fs::path(dir_) / "tokenizer.model"})
        if (fs::equivalent(in, st.path, ec)) fail(st.path + " is the checkpoint's " + in.filename().string());
    for (const StTensor* t : ck.tensors())
        if (fs::equivalent(t->file->path(), st.path, ec)) fail(st.path + " is one of the checkpoint's shards");
    st.n_tensors = plans.size();
    st.bytes = total;
    auto written = w.write(st.path);
    if (!written) fail(written.error());
    return st;
}

}  // namespace

Result<ConvertStats> convert_hf(const std::string& dir, const ConvertOptions& opts) {
    using R = Result<ConvertStats>;
    const auto t0 = std::chrono::steady_clock::now();
    try {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) return R::fail(dir + ": not a directory (a Hugging Face checkpoint's)");
        HfConfig cfg = HfConfig::load(dir);
        const ArchInfo* arch = nullptr;
        std::string takes;
        for (const ArchInfo* a : architectures())
            for (const char* h : a->hf_archs) {
                if (cfg.architecture() == h) arch = a;
                takes += (takes.empty() ? "" : ", ") + std::string(h) + " (" + a->name + ")";
            }
        if (!arch)
            return R::fail("config.json: architecture \"" + cfg.architecture() +
                           "\" is not one edgellm runs (convert takes " + takes + ")");
        cfg.fill_defaults(arch->hf_defaults);
        auto ck = Checkpoint::open(dir);
        if (!ck) return R::fail(ck.error());
        Conversion c(dir, cfg, *arch);
        ConvertStats st = c.run(**ck, opts);
        st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return st;
    } catch (const Error& e) {
        return R::fail(e.what());
    } catch (const nlohmann::json::exception& e) {
        return R::fail(std::string("a JSON file of the checkpoint: ") + e.what());
    }
}

}  // namespace edgellm
