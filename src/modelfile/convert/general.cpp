#include "modelfile/convert/general.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <vector>

#include "edgellm/error.h"
#include "modelfile/convert/hf_config.h"
#include "modelfile/convert/model_card.h"

namespace edgellm::convert {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool full(const std::string& s, const char* re) {
    return std::regex_match(s, std::regex(re, std::regex::icase));
}

bool is_lower(const std::string& w) {  // Python's str.islower (ASCII)
    bool cased = false;
    for (char c : w) {
        if (std::isupper((unsigned char)c)) return false;
        if (std::islower((unsigned char)c)) cased = true;
    }
    return cased;
}

std::string title(const std::string& w) {  // Python's str.title (ASCII)
    std::string out = w;
    bool prev_letter = false;
    for (char& c : out) {
        const bool letter = std::isalpha((unsigned char)c);
        if (letter) c = prev_letter ? (char)std::tolower((unsigned char)c) : (char)std::toupper((unsigned char)c);
        prev_letter = letter;
    }
    return out;
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : "-") + x;
    return s;
}

}  // namespace

std::string id_to_title(const std::string& s) {
    std::string spaced = s;
    for (char& c : spaced)
        if (c == '-') c = ' ';
    std::string out;
    size_t i = 0;
    while (i < spaced.size()) {
        while (i < spaced.size() && std::isspace((unsigned char)spaced[i])) ++i;
        size_t j = i;
        while (j < spaced.size() && !std::isspace((unsigned char)spaced[j])) ++j;
        if (j == i) break;
        const std::string w = spaced.substr(i, j - i);
        const bool keep = !is_lower(w) || std::regex_match(w, std::regex(R"(^(v\d+(?:\.\d+)*|\d.*)$)"));
        out += (out.empty() ? "" : " ") + (keep ? w : title(w));
        i = j;
    }
    return out;
}

ModelId model_id_components(const std::string& model_id, int64_t total_params) {
    ModelId r;
    if (model_id.find(' ') != std::string::npos) {
        r.name = model_id;
        return r;
    }
    std::string name = model_id;
    if (const size_t slash = model_id.find('/'); slash != std::string::npos) {
        const std::string org = model_id.substr(0, slash);
        name = model_id.substr(slash + 1);
        if (!(org.size() > 0 && org[0] == '.')) r.organization = org;
    }
    r.name = name;
    std::vector<std::string> parts;
    for (size_t i = 0, j; i <= name.size(); i = j + 1) {
        j = name.find('-', i);
        if (j == std::string::npos) j = name.size();
        if (j > i) parts.push_back(name.substr(i, j - i));
    }
    std::vector<std::set<std::string>> types(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
        std::string part = parts[i];
        if (full(part, R"((v|iter)?\d+([.]\d+)*)")) {
            types[i].insert("version");
        } else if (full(part, R"(i?q\d(_\w)*|b?fp?(16|32))")) {
            types[i].insert("type");
            for (char& c : parts[i]) c = (char)std::toupper((unsigned char)c);
        } else if (i > 0 && full(part, R"((([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl))")) {
            for (char& c : part)
                if (c == '_') c = '.';
            if (std::isdigit((unsigned char)part.back()))  // bloom-7b1 -> 7.1b
                part = part.substr(0, part.size() - 2) + "." + part.back() + part[part.size() - 2];
            if (part.size() > 1 && std::isdigit((unsigned char)part[part.size() - 2]) &&
                std::string("kmbt").find(part.back()) != std::string::npos)
                part.back() = (char)std::toupper((unsigned char)part.back());
            if (total_params != 0) {
                const size_t scale = std::string(" KMBT").find(part.back());
                char* end = nullptr;
                const std::string num = part.substr(0, part.size() - 1);
                const double v = std::strtod(num.c_str(), &end);
                if (!num.empty() && end && *end == '\0') {
                    const double label = v * std::pow(1000.0, scale == std::string::npos ? -1.0 : (double)scale);
                    if (total_params > 0 && std::abs(label - (double)total_params) > (double)(7 * total_params / 8)) {
                        types[i].insert("finetune");
                        part.back() = (char)std::tolower((unsigned char)part.back());
                    }
                }
            }
            if (types[i].empty()) types[i].insert("size_label");
            parts[i] = part;
        } else if (i > 0 && full(part, "chat|instruct|vision|lora")) {
            types[i].insert("finetune");
        }
    }
    // word sizes ("small") give way to a number-based one
    bool numeric = false;
    for (size_t i = 0; i < parts.size(); ++i)
        if (types[i].count("size_label"))
            for (char c : parts[i]) numeric |= std::isdigit((unsigned char)c) != 0;
    if (numeric)
        for (size_t i = 0; i < parts.size(); ++i)
            if (types[i].count("size_label") &&
                std::all_of(parts[i].begin(), parts[i].end(), [](char c) { return std::isalpha((unsigned char)c); }))
                types[i].erase("size_label");
    bool at_start = true;
    for (size_t i = 0; i < parts.size(); ++i) {
        if (at_start && ((types[i].empty() && std::isalpha((unsigned char)parts[i][0])) || types[i].count("version"))) {
            types[i].insert("basename");
        } else {
            at_start = false;
            if (types[i].empty()) types[i].insert("finetune");
        }
    }
    for (size_t k = parts.size(); k-- > 0;) {
        if (types[k].count("basename") && types[k].size() > 1)
            types[k].erase("basename");
        else
            break;
    }
    std::vector<std::string> base, sizes, fine, version;
    for (size_t i = 0; i < parts.size(); ++i) {
        if (types[i].count("basename")) base.push_back(parts[i]);
        if (types[i].count("size_label") && std::find(sizes.begin(), sizes.end(), parts[i]) == sizes.end())
            sizes.push_back(parts[i]);
        if (types[i].count("finetune")) fine.push_back(parts[i]);
        if (types[i].count("version") && !types[i].count("basename")) version.push_back(parts[i]);
    }
    if (!base.empty()) r.basename = join(base);
    if (!sizes.empty()) r.size_label = join(sizes);
    if (!fine.empty()) r.finetune = join(fine);
    if (!version.empty()) r.version = join(version);
    if (!r.size_label && !r.finetune && !r.version) r.basename.reset();
    return r;
}

std::string size_label(int64_t n) {
    double scaled;
    char suffix;
    if (n > 1e12)
        scaled = (double)n * 1e-12, suffix = 'T';
    else if (n > 1e9)
        scaled = (double)n * 1e-9, suffix = 'B';
    else if (n > 1e6)
        scaled = (double)n * 1e-6, suffix = 'M';
    else
        scaled = (double)n * 1e-3, suffix = 'K';
    // Python: max(2 - len(str(round(scaled)).lstrip('0')), 0) decimals
    std::string whole = std::to_string((long long)std::nearbyint(scaled));
    whole.erase(0, whole.find_first_not_of('0') == std::string::npos ? whole.size() : whole.find_first_not_of('0'));
    const int fix = std::max(2 - (int)whole.size(), 0);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f%c", fix, scaled, suffix);
    return buf;
}

namespace {

// A JSON scalar as the string gguf-py would write (strings as they are).
std::string text_of(const json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump();
}

// A base model or a dataset of the model card: an id ("org/name"), a URL, or a mapping.
json source_entry(const json& id, int64_t n_params) {
    if (id.is_object()) return id;
    json e = json::object();
    if (!id.is_string()) return e;
    const std::string s = id.get<std::string>();
    auto fill = [&](const std::string& model_id, bool repo_url) {
        const ModelId m = model_id_components(model_id, n_params);
        if (m.name) e["name"] = id_to_title(*m.name);
        if (m.organization) e["organization"] = id_to_title(*m.organization);
        if (m.version) e["version"] = *m.version;
        if (repo_url && m.organization && m.name)
            e["repo_url"] = "https://huggingface.co/" + s.substr(0, s.find('/')) + "/" + *m.name;
    };
    if (s.starts_with("http://") || s.starts_with("https://") || s.starts_with("ssh://")) {
        e["repo_url"] = s;
        std::smatch mt;
        if (s.find("huggingface.co") != std::string::npos &&
            std::regex_match(s, mt, std::regex(R"(https?://huggingface.co/([^/]+/[^/]+))")))
            fill(mt[1].str(), false);
    } else {
        fill(s, true);
    }
    return e;
}

}  // namespace

Kv general_metadata(const std::string& dir, const std::string& name_or_path, int64_t n_params) {
    Kv kv;
    auto set = [&](const std::string& k, GgufValue v) { kv.emplace_back(k, std::move(v)); };
    set("general.type", gguf_value("model"));

    // generation_config.json's sampling defaults (a file that is not JSON is ignored, as there)
    json gen;
    try {
        if (auto g = read_json((fs::path(dir) / "generation_config.json").string()); g && g->is_object()) gen = *g;
    } catch (const Error&) {
    }
    auto sample = [&](const char* key, std::initializer_list<const char*> fields, bool integer) {
        for (const char* f : fields) {
            if (!gen.contains(f)) continue;
            const json& v = gen[f];
            if (v.is_null()) return;
            if (integer ? !v.is_number_integer() : !v.is_number())
                throw Error(std::string("generation_config.json: \"") + f + "\" is " + v.dump() + ", not " +
                            (integer ? "an integer" : "a number"));
            if (integer)
                set(key, gguf_value((int32_t)v.get<int64_t>()));
            else
                set(key, gguf_value((float)v.get<double>()));
            return;
        }
    };
    if (gen.contains("sequence") && gen["sequence"].is_string())
        set("general.sampling.sequence", gguf_value(gen["sequence"].get<std::string>()));
    sample("general.sampling.top_k", {"top_k"}, true);
    sample("general.sampling.top_p", {"top_p"}, false);
    sample("general.sampling.min_p", {"min_p"}, false);
    sample("general.sampling.xtc_probability", {"xtc_probability"}, false);
    sample("general.sampling.xtc_threshold", {"xtc_threshold"}, false);
    sample("general.sampling.temp", {"temperature"}, false);
    sample("general.sampling.penalty_last_n", {"penalty_last_n"}, true);
    sample("general.sampling.penalty_repeat", {"penalty_repeat", "repetition_penalty"}, false);
    sample("general.sampling.mirostat", {"mirostat"}, true);
    sample("general.sampling.mirostat_tau", {"mirostat_tau"}, false);
    sample("general.sampling.mirostat_eta", {"mirostat_eta"}, false);

    // The model card's fields first (llama.cpp's own names, then model_*, then Hugging Face's),
    // then what config.json's _name_or_path and the directory's name say.
    std::map<std::string, json> m;  // field -> value
    const json card = read_model_card((fs::path(dir) / "README.md").string()).value_or(json::object());
    auto from_card = [&](const char* field, const char* key) {
        if (card.contains(key) && (!m.count(field) || m[field].is_null())) m[field] = card[key];
    };
    for (const char* prefix : {"", "model_"})
        for (auto [field, key] : {std::pair{"name", "name"}, {"author", "author"}, {"version", "version"},
                                  {"organization", "organization"}, {"description", "description"},
                                  {"finetune", "finetune"}, {"basename", "basename"}, {"size_label", "size_label"},
                                  {"source.url", "url"}, {"source.doi", "doi"}, {"source.uuid", "uuid"},
                                  {"source.repo_url", "repo_url"}})
            from_card(field, (std::string(prefix) + key).c_str());
    from_card("name", "model_name");
    from_card("author", "model_creator");
    from_card("basename", "model_type");
    auto sources = [&](std::initializer_list<const char*> keys) {
        std::vector<json> out;
        for (const char* k : keys)
            if (card.contains(k)) {
                const json& v = card[k];
                for (const json& id : v.is_array() ? v : json::array({v}))
                    if (!id.is_null()) out.push_back(source_entry(id, n_params));
                return std::optional<std::vector<json>>(out);
            }
        return std::optional<std::vector<json>>();
    };
    const auto base_models = sources({"base_model", "base_models", "base_model_sources"});
    const auto datasets = sources({"datasets", "dataset", "dataset_sources"});
    from_card("license", "license");
    from_card("license.name", "license_name");
    from_card("license.link", "license_link");
    auto strings = [&](std::initializer_list<const char*> keys) {
        std::optional<std::vector<std::string>> out;
        for (const char* k : keys) {
            if (!card.contains(k) || card[k].is_null()) continue;
            if (!out) out.emplace();
            for (const json& x : card[k].is_array() ? card[k] : json::array({card[k]})) out->push_back(text_of(x));
        }
        return out;
    };
    const auto tags = strings({"tags", "pipeline_tag"});
    const auto languages = strings({"languages", "language"});

    auto take = [&](const ModelId& x) {
        for (auto [field, v] : {std::pair{"name", &x.name}, {"organization", &x.organization},
                                {"basename", &x.basename}, {"finetune", &x.finetune}, {"version", &x.version},
                                {"size_label", &x.size_label}})
            if ((!m.count(field) || m[field].is_null()) && *v)
                m[field] = std::string(field) == "name" || std::string(field) == "organization" ? id_to_title(**v) : **v;
    };
    if (!name_or_path.empty() && std::count(name_or_path.begin(), name_or_path.end(), '/') <= 1)
        take(model_id_components(name_or_path, n_params));
    const fs::path norm = fs::path(dir).lexically_normal();
    take(model_id_components(norm.has_filename() ? norm.filename().string() : norm.parent_path().filename().string(),
                             n_params));
    if ((!m.count("size_label") || m["size_label"].is_null()) && n_params > 0) m["size_label"] = size_label(n_params);

    auto put = [&](const char* field) {
        if (auto it = m.find(field); it != m.end() && !it->second.is_null())
            set(std::string("general.") + field, gguf_value(text_of(it->second)));
    };
    for (const char* f : {"name", "author", "version", "organization", "finetune", "basename", "description",
                          "size_label"})
        put(f);
    if (auto it = m.find("license"); it != m.end() && it->second.is_array()) {
        std::string joined;
        for (const json& x : it->second) joined += (joined.empty() ? "" : ",") + text_of(x);
        set("general.license", gguf_value(joined));
    } else {
        put("license");
    }
    for (const char* f : {"license.name", "license.link", "source.url", "source.doi", "source.uuid", "source.repo_url"})
        put(f);
    for (const auto& [what, list] : {std::pair{"base_model", &base_models}, {"dataset", &datasets}}) {
        if (!*list) continue;
        const std::string p = std::string("general.") + what + ".";
        set(p + "count", gguf_value((uint32_t)(*list)->size()));
        for (size_t i = 0; i < (*list)->size(); ++i)
            for (const char* f : {"name", "author", "version", "organization", "description", "url", "doi", "uuid",
                                  "repo_url"})
                if (const json& e = (**list)[i]; e.contains(f))
                    set(p + std::to_string(i) + "." + f, gguf_value(text_of(e[f])));
    }
    if (tags) set("general.tags", gguf_value(gguf_string_array(*tags)));
    if (languages) set("general.languages", gguf_value(gguf_string_array(*languages)));
    return kv;
}

}  // namespace edgellm::convert
