#include "modelfile/convert/hf_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "edgellm/error.h"

namespace edgellm::convert {

using nlohmann::json;

std::optional<json> read_json(const std::string& path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        throw Error(std::filesystem::path(path).filename().string() + ": not JSON: " + e.what());
    }
}

const json* json_at(const json& j, std::string_view path) {
    const json* cur = &j;
    while (!path.empty()) {
        const size_t dot = path.find('.');
        const std::string key(path.substr(0, dot));
        if (!cur->is_object() || !cur->contains(key)) return nullptr;
        cur = &(*cur)[key];
        path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    }
    return cur;
}

namespace {

std::string describe(const json& v) {
    const std::string s = v.dump();
    return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

[[noreturn]] void wrong(std::string_view path, const json& v, const char* want) {
    throw Error("config.json: \"" + std::string(path) + "\" is " + describe(v) + ", not " + want);
}

// The first of the names present (even null), as llama.cpp's find_hparam.
const json* first_of(const json& j, std::initializer_list<const char*> names) {
    for (const char* n : names)
        if (j.contains(n)) return &j[n];
    return nullptr;
}

}  // namespace

HfConfig HfConfig::load(const std::string& dir) {
    const std::string path = (std::filesystem::path(dir) / "config.json").string();
    auto j = read_json(path);
    if (!j) throw Error(path + ": missing (a Hugging Face checkpoint has its config.json)");
    if (!j->is_object()) throw Error("config.json: not a JSON object");
    HfConfig c;
    const json* archs = j->contains("architectures") ? &(*j)["architectures"] : nullptr;
    if (!archs || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
        throw Error("config.json: \"architectures\" missing (it names the model's class, e.g. "
                    "[\"LlamaForCausalLM\"])");
    c.arch_ = (*archs)[0].get<std::string>();
    c.root_ = *j;
    // text_config's fields over the top level's (multimodal checkpoints)
    if (j->contains("text_config") && (*j)["text_config"].is_object())
        for (auto it = (*j)["text_config"].begin(); it != (*j)["text_config"].end(); ++it)
            c.root_[it.key()] = it.value();

    c.gather_rope();
    return c;
}

void HfConfig::fill_defaults(const std::vector<HfDefault>& defaults) {
    for (const HfDefault& d : defaults) {
        if (root_.contains(d.field) && !root_[d.field].is_null()) continue;
        if (d.from) {
            const auto a = integer(d.from);
            const auto b = d.over ? integer(d.over) : std::optional<int64_t>(1);
            if (a && b && *b > 0) root_[d.field] = *a / *b;
        } else if (d.value == std::floor(d.value) && std::abs(d.value) < 1e15) {
            root_[d.field] = (int64_t)d.value;
        } else {
            root_[d.field] = d.value;
        }
    }
    gather_rope();
}

// The rope parameters as llama.cpp's TextModel gathers them.
void HfConfig::gather_rope() {
    const json& r = root_;
    json rp = json::object();
    for (const char* k : {"rope_parameters", "rope_scaling"})
        if (r.contains(k) && r[k].is_object()) {
            rp = r[k];
            break;
        } else if (r.contains(k) && !r[k].is_null()) {
            wrong(k, r[k], "an object");
        } else if (r.contains(k)) {
            break;  // (present and null: llama.cpp's get() stops at it)
        }
    if (!rp.contains("full_attention") && !rp.contains("sliding_attention")) {
        const json* theta = first_of(r, {"global_rope_theta", "rope_global_theta", "rope_theta_global",
                                         "rope_theta", "rotary_emb_base"});
        const json* local = first_of(r, {"local_rope_theta", "rope_local_theta", "rope_theta_local",
                                         "swa_rope_theta", "rope_local_base_freq"});
        const json* partial = first_of(r, {"partial_rotary_factor", "rope_pct", "rope_percent"});
        const json* orig = first_of(r, {"original_max_position_embeddings"});
        if (local && !local->is_null()) rp["sliding_attention"] = json{{"rope_theta", *local}};
        if (!rp.contains("rope_theta") && theta && !theta->is_null()) rp["rope_theta"] = *theta;
        if (!rp.contains("rope_type") && rp.contains("type") && !rp["type"].is_null())
            rp["rope_type"] = rp["type"];
        if (!rp.contains("partial_rotary_factor") && partial && !partial->is_null())
            rp["partial_rotary_factor"] = *partial;
        if (!rp.contains("original_max_position_embeddings") && orig && !orig->is_null())
            rp["original_max_position_embeddings"] = *orig;
    }
    rope_ = rp.contains("full_attention") && rp["full_attention"].is_object() ? rp["full_attention"] : rp;
    rope_swa_ = rp.contains("sliding_attention") && rp["sliding_attention"].is_object() ? rp["sliding_attention"]
                                                                                        : json::object();
}

const json* HfConfig::find(std::string_view path) const {
    const json* v = nullptr;
    if (path.starts_with("rope."))
        v = json_at(rope_, path.substr(5));
    else if (path.starts_with("rope_swa."))
        v = json_at(rope_swa_, path.substr(9));
    else
        v = json_at(root_, path);
    return v && !v->is_null() ? v : nullptr;
}

bool HfConfig::has(std::string_view path) const {
    if (path.starts_with("rope.")) return json_at(rope_, path.substr(5)) != nullptr;
    if (path.starts_with("rope_swa.")) return json_at(rope_swa_, path.substr(9)) != nullptr;
    return json_at(root_, path) != nullptr;
}

std::optional<double> HfConfig::number(std::string_view path) const {
    const json* v = find(path);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong(path, *v, "a number");
    return v->get<double>();
}

std::optional<int64_t> HfConfig::integer(std::string_view path) const {
    const json* v = find(path);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) wrong(path, *v, "an integer");
    return v->get<int64_t>();
}

std::optional<std::string> HfConfig::string(std::string_view path) const {
    const json* v = find(path);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong(path, *v, "a string");
    return v->get<std::string>();
}

std::optional<std::vector<double>> HfConfig::numbers(std::string_view path) const {
    const json* v = find(path);
    if (!v) return std::nullopt;
    if (!v->is_array()) wrong(path, *v, "a list of numbers");
    std::vector<double> out;
    for (const json& x : *v) {
        if (!x.is_number()) wrong(path, *v, "a list of numbers");
        out.push_back(x.get<double>());
    }
    return out;
}

std::optional<std::vector<std::string>> HfConfig::strings(std::string_view path) const {
    const json* v = find(path);
    if (!v) return std::nullopt;
    if (!v->is_array()) wrong(path, *v, "a list of strings");
    std::vector<std::string> out;
    for (const json& x : *v) {
        if (!x.is_string()) wrong(path, *v, "a list of strings");
        out.push_back(x.get<std::string>());
    }
    return out;
}

std::optional<bool> HfConfig::flag(std::string_view path) const {
    const json* v = find(path);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong(path, *v, "true or false");
    return v->get<bool>();
}

}  // namespace edgellm::convert
