#include "modelfile/convert/vocab.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "edgellm/error.h"
#include "edgellm/tokenizer.h"
#include "modelfile/convert/spm_model.h"

namespace edgellm::convert {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char kU2581[] = "\xE2\x96\x81";

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
        s.replace(pos, from.size(), to);
    return s;
}

std::string pad_token(int64_t i) {
    return "[PAD" + std::to_string(i) + "]";
}

// Python's truthiness of a JSON value (None, "", {}, [] and 0 are false).
bool truthy(const json& j) {
    if (j.is_null()) return false;
    if (j.is_string() || j.is_object() || j.is_array()) return !j.empty();
    if (j.is_boolean()) return j.get<bool>();
    if (j.is_number()) return j.get<double>() != 0.0;
    return true;
}

json get(const json& j, const char* key) {
    return j.is_object() && j.contains(key) ? j[key] : json();
}

// The id of a TemplateProcessing entry's special token (null: it is not one).
json special_id(const json& entry) {
    return get(get(entry, "SpecialToken"), "id");
}

// Where a special token type's id and add flag go.
const std::map<std::string, std::string> kIdKeys = {
    {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
    {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"}, {"mask", "tokenizer.ggml.mask_token_id"},
    {"eot", "tokenizer.ggml.eot_token_id"},     {"eom", "tokenizer.ggml.eom_token_id"},
};
const std::map<std::string, std::string> kAddKeys = {
    {"bos", "tokenizer.ggml.add_bos_token"},
    {"eos", "tokenizer.ggml.add_eos_token"},
    {"sep", "tokenizer.ggml.add_sep_token"},
};

// Insertion-ordered maps, as Python's dicts.
template <typename V>
struct Ordered {
    std::vector<std::pair<std::string, V>> items;
    V* find(const std::string& k) {
        for (auto& [key, v] : items)
            if (key == k) return &v;
        return nullptr;
    }
    void set(const std::string& k, V v) {
        if (V* p = find(k))
            *p = v;
        else
            items.emplace_back(k, v);
    }
    void setdefault(const std::string& k, V v) {
        if (!find(k)) items.emplace_back(k, v);
    }
};

// llama.cpp's gguf.SpecialVocab.
struct SpecialVocab {
    std::vector<std::string> merges;
    Ordered<int64_t> ids;
    Ordered<bool> add;
    json chat_template;  // null, a string, or [{name, template}]
    std::optional<bool> lowercase, strip_accents;
    std::vector<std::string> types = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    int64_t n_vocab = -1;  // (-1: no range check)

    bool has_type(const std::string& t) const {
        return std::find(types.begin(), types.end(), t) != types.end();
    }

    void set_id(const std::string& type, const json& id) {
        if (!id.is_number_integer()) return;
        const int64_t v = id.get<int64_t>();
        if (v < 0) throw Error("special token " + type + " has id " + std::to_string(v));
        if (n_vocab >= 0 && v >= n_vocab) return;  // (out of range: skipped, as llama.cpp)
        if (!ids.find(type)) ids.set(type, v);
    }

    void parse_normalizer(const json& n) {
        const std::string type = get(n, "type").is_string() ? get(n, "type").get<std::string>() : "";
        if (type == "Lowercase") {
            lowercase = true;
        } else if (type == "StripAccents") {
            strip_accents = true;
        } else if (type == "BertNormalizer") {
            if (get(n, "lowercase").is_boolean()) lowercase = n["lowercase"].get<bool>();
            if (get(n, "strip_accents").is_boolean()) strip_accents = n["strip_accents"].get<bool>();
        } else if (type == "Sequence" && get(n, "normalizers").is_array()) {
            for (const json& x : n["normalizers"]) parse_normalizer(x);
        }
    }

    void load_merges_from(const json& m) {
        if (!m.is_array() || m.empty()) return;
        if (m[0].is_string()) {
            for (const json& x : m) merges.push_back(x.is_string() ? x.get<std::string>() : "");
        } else if (m[0].is_array() && m[0].size() == 2 && m[0][0].is_string()) {
            // transformers 4.45's pairs: a space inside a part is written as U+0120 ... + 256
            auto part = [](const json& p) {
                std::string s = p.is_string() ? p.get<std::string>() : "";
                return replace_all(s, " ", "\xC5\xA0");  // chr(ord(' ') + 256) = U+0120
            };
            for (const json& x : m) {
                if (!x.is_array() || x.size() != 2) throw Error("tokenizer.json: a merge is not a pair");
                merges.push_back(part(x[0]) + " " + part(x[1]));
            }
        } else {
            throw Error("tokenizer.json: merges in a format llama.cpp does not read");
        }
    }

    void from_tokenizer_json(const std::string& dir, bool load_merges) {
        const auto tj = read_json((fs::path(dir) / "tokenizer.json").string());
        json added = json::array();
        if (tj) {
            if (load_merges) load_merges_from(get(get(*tj, "model"), "merges"));
            if (truthy(get(*tj, "normalizer"))) parse_normalizer((*tj)["normalizer"]);
            added = get(*tj, "added_tokens");
            if (!added.is_array()) added = json::array();
        }
        auto tc_file = read_json((fs::path(dir) / "tokenizer_config.json").string());
        json tc = tc_file ? *tc_file : json();
        if (!tc.is_null() && !tc.is_object()) throw Error("tokenizer_config.json: not a JSON object");
        if (tj) template_processing(*tj, tc);
        if (!truthy(tc)) return;
        chat_template = get(tc, "chat_template");
        if (!tc.contains("chat_template")) chat_template = alternative_template(dir);
        if (!chat_template.is_null() && !chat_template.is_string() && !chat_template.is_array())
            chat_template = json();  // (a bad type: ignored, as llama.cpp)
        for (const std::string& type : types) {
            const json a = get(tc, ("add_" + type + "_token").c_str());
            if (a.is_boolean()) add.setdefault(type, a.get<bool>());
            json entry = get(tc, (type + "_token").c_str());
            if (entry.is_object()) entry = get(entry, "content");
            if (!entry.is_string()) continue;
            for (const json& t : added)
                if (get(t, "content") == entry) {
                    set_id(type, get(t, "id"));
                    break;
                }
        }
    }

    // chat_template.jinja (with additional_chat_templates/*.jinja: a list), else
    // chat_template.json's chat_template.
    static json alternative_template(const std::string& dir) {
        const fs::path jinja = fs::path(dir) / "chat_template.jinja";
        std::error_code ec;
        if (fs::is_regular_file(jinja, ec)) {
            std::ifstream in(jinja, std::ios::binary);
            std::stringstream ss;
            ss << in.rdbuf();
            json t = ss.str();
            std::vector<fs::path> more;
            for (const auto& e : fs::directory_iterator(fs::path(dir) / "additional_chat_templates", ec))
                if (e.path().extension() == ".jinja") more.push_back(e.path());
            if (more.empty()) return t;
            std::sort(more.begin(), more.end());
            json list = json::array({{{"name", "default"}, {"template", t}}});
            for (const fs::path& p : more) {
                std::ifstream f(p, std::ios::binary);
                std::stringstream s2;
                s2 << f.rdbuf();
                list.push_back({{"name", p.stem().string()}, {"template", s2.str()}});
            }
            return list;
        }
        if (auto j = read_json((fs::path(dir) / "chat_template.json").string())) return get(*j, "chat_template");
        return json();
    }

    // What the post-processor says about BOS, EOS and SEP (llama.cpp's reading of it).
    void template_processing(const json& tj, json& tc) {
        json bos = get(tc, "bos_token"), cls = get(tc, "cls_token");
        json eos = get(tc, "eos_token"), sep = get(tc, "sep_token");
        const bool have_tc = truthy(tc);
        if (!truthy(bos) && truthy(cls) && have_tc) tc["bos_token"] = bos = cls;
        if (!truthy(eos) && truthy(sep) && have_tc) tc["eos_token"] = eos = sep;
        const json pp = get(tj, "post_processor");
        if (!truthy(pp)) return;
        const json procs = pp.contains("processors") ? pp["processors"] : json::array({pp});
        for (const json& p : procs) {
            const json type = get(p, "type");
            if (type == "ByteLevel") {
                add.setdefault("bos", false);
                add.setdefault("eos", false);
            } else if (type == "RobertaProcessing") {
                add.set("bos", true);
                add.set("eos", true);
                add.set("sep", true);
                if (!truthy(cls) && have_tc) tc["cls_token"] = cls = get(p, "cls").is_array() ? p["cls"][0] : bos;
                if (!truthy(sep) && have_tc) tc["sep_token"] = sep = get(p, "sep").is_array() ? p["sep"][0] : eos;
            } else if (type == "TemplateProcessing") {
                const json single = get(p, "single").is_array() ? p["single"] : json::array();
                json pair = get(p, "pair").is_array() ? p["pair"] : json::array();
                json first, last;
                if (single.size() > 1) {
                    first = special_id(single[0]);
                    if (truthy(first)) {
                        if (!have_tc) {
                            bos = first;
                        } else if (first != bos && first != cls) {
                            if (!truthy(bos)) tc["bos_token"] = bos = first;
                            if (!truthy(cls)) tc["cls_token"] = cls = first;
                        }
                        add.set("bos", first == bos || first == cls);
                    }
                    last = special_id(single[single.size() - 1]);
                    if (truthy(last)) {
                        if (!have_tc) {
                            eos = last;
                        } else if (last != eos) {
                            if (!has_type("eot")) {
                                types.push_back("eot");
                                tc["eot_token"] = eos;
                            } else if (!has_type("eom")) {
                                types.push_back("eom");
                                tc["eom_token"] = eos;
                            }
                            tc["eos_token"] = eos = last;
                        }
                        add.set("eos", last == eos);
                    }
                }
                if (!pair.empty()) {
                    const size_t start = truthy(first) && special_id(pair[0]) == first ? 1 : 0;
                    const size_t stop = truthy(last) && special_id(pair[pair.size() - 1]) == last
                                            ? pair.size() - 1
                                            : pair.size();
                    if (start < stop) {
                        const json mid(pair.begin() + (long)start, pair.begin() + (long)stop);
                        const json a = get(get(mid[0], "Sequence"), "id");
                        const json b = get(get(mid[mid.size() - 1], "Sequence"), "id");
                        if (a == "A" && b == "B" && mid.size() > 2) {
                            bool add_sep = false;
                            const json e1 = special_id(mid[1]);
                            if (truthy(e1) && (e1 == sep || e1 == eos) && !truthy(last)) add_sep = true;
                            if (mid.size() == 4) {
                                const json e2 = special_id(mid[2]);
                                if (truthy(e2) && (e2 == sep || e2 == eos)) add_sep = true;
                            }
                            add.set("sep", add_sep);
                            if (add_sep && !truthy(sep) && have_tc) tc["sep_token"] = eos;
                        }
                    }
                }
            }
        }
    }

    // config.json's *_token_id, at its top level or else (null or absent there) in text_config.
    void from_config_json(const std::string& dir) {
        const auto cfg = read_json((fs::path(dir) / "config.json").string());
        if (!cfg) return;
        for (const std::string& type : types) {
            json id = get(*cfg, (type + "_token_id").c_str());
            if (id.is_null()) id = get(get(*cfg, "text_config"), (type + "_token_id").c_str());
            set_id(type, id);
        }
    }

    void load_merges_txt(const std::string& dir) {
        std::ifstream in(fs::path(dir) / "merges.txt");
        if (!in) return;
        std::string line;
        bool first = true;
        while (std::getline(in, line)) {
            const size_t b = line.find_first_not_of(" \t\r\n"), e = line.find_last_not_of(" \t\r\n");
            line = b == std::string::npos ? "" : line.substr(b, e - b + 1);
            if (first && line.starts_with("#")) {
                first = false;
                continue;
            }
            first = false;
            std::istringstream ss(line);
            std::string x, y, z;
            if (ss >> x >> y && !(ss >> z)) merges.push_back(x + " " + y);
        }
    }

    void write(const std::function<void(const std::string&, GgufValue)>& set) const {
        if (!merges.empty()) set("tokenizer.ggml.merges", gguf_value(gguf_string_array(merges)));
        for (const auto& [type, id] : ids.items)
            if (auto it = kIdKeys.find(type); it != kIdKeys.end()) set(it->second, gguf_value((uint32_t)id));
        for (const auto& [type, v] : add.items)
            if (auto it = kAddKeys.find(type); it != kAddKeys.end()) set(it->second, gguf_value(v));
        if (chat_template.is_string()) {
            set("tokenizer.chat_template", gguf_value(chat_template.get<std::string>()));
        } else if (chat_template.is_array()) {
            std::vector<std::string> names;
            for (const json& c : chat_template) {
                std::string name = get(c, "name").is_string() ? c["name"].get<std::string>() : "";
                for (char& ch : name)
                    if (!std::isalnum((unsigned char)ch)) ch = '_';
                const json t = get(c, "template");
                if (name.empty() || !t.is_string()) continue;
                if (name == "default") {
                    set("tokenizer.chat_template", gguf_value(t.get<std::string>()));
                } else {
                    names.push_back(name);
                    set("tokenizer.chat_template." + name, gguf_value(t.get<std::string>()));
                }
            }
            std::sort(names.begin(), names.end());
            if (!names.empty()) set("tokenizer.chat_templates", gguf_value(gguf_string_array(names)));
        }
        if (lowercase) set("tokenizer.ggml.normalizer.lowercase", gguf_value(*lowercase));
        if (strip_accents) set("tokenizer.ggml.normalizer.strip_accents", gguf_value(*strip_accents));
    }
};

// A special token as tokenizer_config.json writes it: its text, or an AddedToken's object.
std::optional<std::string> token_text(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && get(v, "content").is_string()) return v["content"].get<std::string>();
    return std::nullopt;
}

// The texts of a tokenizer's special tokens (its all_special_tokens) as transformers 5 reads
// tokenizer_config.json (and special_tokens_map.json when that has no added_tokens_decoder):
// bos, eos, unk, sep, pad, cls and mask (GemmaTokenizer's defaults for those it leaves
// out), additional_special_tokens, extra_special_tokens (a list, or named tokens), and every
// other "*_token" key naming a token (model-specific ones: Gemma 4's "sot_token", ...).
// transformers 4 reads the same set from a file it can read (its named tokens also in the
// extra_special_tokens object, as it writes them; a list there it cannot read at all).
std::vector<std::string> special_token_texts(const std::string& dir) {
    const auto tc_file = read_json((fs::path(dir) / "tokenizer_config.json").string());
    json tc = tc_file ? *tc_file : json::object();
    if (!tc.is_object()) throw Error("tokenizer_config.json: not a JSON object");
    const std::string cls = get(tc, "tokenizer_class").is_string() ? tc["tokenizer_class"].get<std::string>() : "";
    const bool gemma = cls.empty() || cls == "GemmaTokenizer" || cls == "GemmaTokenizerFast";
    if (!gemma && cls != "PreTrainedTokenizerFast" && cls != "TokenizersBackend")
        throw Error("tokenizer_config.json: tokenizer_class \"" + cls +
                    "\" is not one whose special tokens edgellm convert knows here (GemmaTokenizer, "
                    "PreTrainedTokenizerFast)");
    if (gemma)
        for (auto [k, v] : {std::pair{"bos_token", "<bos>"}, {"eos_token", "<eos>"}, {"unk_token", "<unk>"},
                            {"pad_token", "<pad>"}})
            if (!tc.contains(k)) tc[k] = v;
    if (!tc.contains("added_tokens_decoder"))
        if (auto m = read_json((fs::path(dir) / "special_tokens_map.json").string()); m && m->is_object())
            for (auto it = m->begin(); it != m->end(); ++it) {
                json& to = tc[it.key()];
                if (it.value().is_array() && to.is_array())
                    to.insert(to.end(), it.value().begin(), it.value().end());
                else
                    to = it.value();
            }
    std::vector<std::string> out;
    auto add = [&](const json& v) {
        if (auto t = token_text(v); t && std::find(out.begin(), out.end(), *t) == out.end()) out.push_back(*t);
    };
    for (auto it = tc.begin(); it != tc.end(); ++it) {
        const std::string& k = it.key();
        if (k == "additional_special_tokens" || k == "extra_special_tokens") {
            if (it.value().is_array() || it.value().is_object())
                for (const json& v : it.value()) add(v);
        } else if (k.ends_with("_token")) {
            add(it.value());
        }
    }
    return out;
}

bool is_byte_token(const std::string& t) {
    return t.size() == 6 && t.starts_with("<0x") && t[5] == '>' && std::isxdigit((unsigned char)t[3]) &&
           std::isxdigit((unsigned char)t[4]);
}

}  // namespace

bool token_looks_special(const std::string& t) {
    if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
    if (t.starts_with("<|") && t.ends_with("|>")) return true;
    if (t.starts_with("<\xEF\xBD\x9C") && t.ends_with("\xEF\xBD\x9C>")) return true;  // <｜ ... ｜>
    return t.starts_with("<unused") && t.ends_with(">");
}

VocabReader::VocabReader(std::string dir, const HfConfig& cfg, std::string family_pre)
    : dir_(std::move(dir)), cfg_(cfg), family_pre_(std::move(family_pre)) {}

void VocabReader::set(const std::string& key, GgufValue v) {
    for (auto& [k, old] : kv_)
        if (k == key) {
            old = std::move(v);
            return;
        }
    kv_.emplace_back(key, std::move(v));
}

void VocabReader::remove(const std::string& key) {
    std::erase_if(kv_, [&](const auto& kv) { return kv.first == key; });
}

void VocabReader::special_vocab(bool load_merges, int64_t n_vocab) {
    SpecialVocab sv;
    sv.n_vocab = n_vocab;
    sv.from_tokenizer_json(dir_, load_merges);
    sv.from_config_json(dir_);
    if (load_merges && sv.merges.empty()) sv.load_merges_txt(dir_);
    sv.write([this](const std::string& k, GgufValue v) { set(k, std::move(v)); });
}

bool VocabReader::sentencepiece(bool phi3) {
    const std::string path = (fs::path(dir_) / "tokenizer.model").string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) return false;
    const std::vector<SpmPiece> pieces = read_spm_model(path);
    const int64_t n_spm = (int64_t)pieces.size();
    int64_t n = 0;
    if (phi3) {
        n = cfg_.integer("vocab_size").value_or(n_spm);
    } else {
        const auto per_layer = cfg_.integer("vocab_size_per_layer_input");
        n = per_layer ? *per_layer : cfg_.integer("vocab_size").value_or(0);
        if (n == 0) n = n_spm;
    }
    if (phi3 && n_spm > n)
        throw Error("tokenizer.model has " + std::to_string(n_spm) + " pieces, more than config.json's vocab_size " +
                    std::to_string(n));
    std::vector<std::string> tokens;
    std::vector<float> scores((size_t)n, -10000.0f);
    std::vector<int32_t> types((size_t)n, (int32_t)TokenAttr::Unused);
    for (int64_t i = 0; i < n; ++i) tokens.push_back(pad_token(i));
    for (int64_t i = 0; i < std::min(n, n_spm); ++i) {
        const SpmPiece& p = pieces[(size_t)i];
        tokens[(size_t)i] = p.piece;
        scores[(size_t)i] = p.score;
        types[(size_t)i] = (int32_t)(p.type == 2   ? TokenAttr::Unknown
                                     : p.type == 3 ? TokenAttr::Control
                                     : p.type == 5 ? TokenAttr::Unused
                                     : p.type == 6 ? TokenAttr::Byte
                                                   : TokenAttr::Normal);
    }
    auto put = [&](int64_t id, const std::string& text, TokenAttr type) {
        tokens[(size_t)id] = text;
        scores[(size_t)id] = -1000.0f;
        types[(size_t)id] = (int32_t)type;
    };
    auto in_range = [&](int64_t id, const char* file) {
        if (id < 0) throw Error(std::string(file) + ": added token id " + std::to_string(id));
        return id < n;
    };
    if (auto a = read_json((fs::path(dir_) / "added_tokens.json").string()); a && a->is_object())
        for (auto it = a->begin(); it != a->end(); ++it)
            if (it.value().is_number_integer() && in_range(it.value().get<int64_t>(), "added_tokens.json"))
                put(it.value().get<int64_t>(), it.key(), TokenAttr::UserDefined);
    // added_tokens_decoder of tokenizer_config.json, then (Phi-3) tokenizer.json's added_tokens
    auto added = [&](const json& t, int64_t id, const char* file) {
        const json content = get(t, "content");
        if (!content.is_string()) throw Error(std::string(file) + ": added token " + std::to_string(id) + " has no content");
        if (phi3 && id >= n)
            throw Error(std::string(file) + ": added token id " + std::to_string(id) +
                        " is past config.json's vocab_size " + std::to_string(n));
        if (!in_range(id, file)) return;
        std::string text = content.get<std::string>();
        const bool special = truthy(get(t, "special"));
        if (phi3)
            put(id, text, special ? TokenAttr::Control : TokenAttr::UserDefined);
        else if (special || token_looks_special(text))
            put(id, text, TokenAttr::Control);
        else
            put(id, replace_all(text, kU2581, " "), TokenAttr::UserDefined);
    };
    if (auto tc = read_json((fs::path(dir_) / "tokenizer_config.json").string())) {
        const json dec = get(*tc, "added_tokens_decoder");
        if (dec.is_object())
            for (auto it = dec.begin(); it != dec.end(); ++it) {
                int64_t id = 0;
                try {
                    id = std::stoll(it.key());
                } catch (const std::exception&) {
                    throw Error("tokenizer_config.json: added_tokens_decoder key \"" + it.key() + "\" is not an id");
                }
                added(it.value(), id, "tokenizer_config.json");
            }
    }
    if (phi3)
        if (auto tj = read_json((fs::path(dir_) / "tokenizer.json").string()))
            for (const json& t : get(*tj, "added_tokens").is_array() ? (*tj)["added_tokens"] : json::array()) {
                if (!get(t, "id").is_number_integer()) throw Error("tokenizer.json: an added token without an id");
                added(t, t["id"].get<int64_t>(), "tokenizer.json");
            }

    set("tokenizer.ggml.model", gguf_value("llama"));
    set("tokenizer.ggml.pre", gguf_value("default"));
    set("tokenizer.ggml.tokens", gguf_value(gguf_string_array(tokens)));
    set("tokenizer.ggml.scores", gguf_value(gguf_float_array(scores)));
    set("tokenizer.ggml.token_type", gguf_value(gguf_int32_array(types)));
    n_tokens_ = n;
    special_vocab(false, n);
    return true;
}

void VocabReader::bpe() {
    const auto tj = read_json((fs::path(dir_) / "tokenizer.json").string());
    if (!tj) throw Error("tokenizer.json missing (and no tokenizer.model): no tokenizer to convert");
    const json model = get(*tj, "model");
    const std::string type = get(model, "type").is_string() ? model["type"].get<std::string>() : "";
    if (type != "BPE")
        throw Error("tokenizer.json: model type \"" + type + "\" is not byte-level BPE (" +
                    "edgellm convert reads BPE and SentencePiece tokenizers)");
    if (truthy(get(model, "byte_fallback")) && get(get(*tj, "decoder"), "type") == "Sequence")
        throw Error("tokenizer.json: a SentencePiece-style BPE (byte fallback) without tokenizer.model, "
                    "which llama.cpp reads through transformers; edgellm convert needs the "
                    "tokenizer.model beside it");
    // the vocabulary and the added tokens (these override: transformers' get_vocab)
    std::map<int64_t, std::string> by_id;
    std::map<std::string, const json*> added_by_text;
    const json vocab = get(model, "vocab");
    if (!vocab.is_object()) throw Error("tokenizer.json: model.vocab is not an object");
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
            throw Error("tokenizer.json: model.vocab[\"" + it.key() + "\"] is not a token id");
        by_id[it.value().get<int64_t>()] = it.key();
    }
    const json added = get(*tj, "added_tokens").is_array() ? (*tj)["added_tokens"] : json::array();
    for (const json& t : added) {
        if (!get(t, "id").is_number_integer() || !get(t, "content").is_string() || t["id"].get<int64_t>() < 0)
            throw Error("tokenizer.json: an added token without an id or content");
        by_id[t["id"].get<int64_t>()] = t["content"].get<std::string>();
        added_by_text[t["content"].get<std::string>()] = &t;
    }
    std::map<std::string, int64_t> distinct;
    for (const auto& [id, text] : by_id) distinct[text] = id;
    const int64_t n = cfg_.integer("vocab_size").value_or((int64_t)distinct.size());
    if (!by_id.empty() && by_id.rbegin()->first >= n)
        throw Error("tokenizer.json has token id " + std::to_string(by_id.rbegin()->first) +
                    ", past config.json's vocab_size " + std::to_string(n));
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int64_t i = 0; i < n; ++i) {
        auto it = by_id.find(i);
        if (it == by_id.end()) {
            tokens.push_back(pad_token(i));
            types.push_back((int32_t)TokenAttr::Unused);
            continue;
        }
        std::string text = it->second;
        if (auto a = added_by_text.find(text); a != added_by_text.end()) {
            if (truthy(get(*a->second, "special")) || token_looks_special(text)) {
                types.push_back((int32_t)TokenAttr::Control);
            } else {
                text = replace_all(text, kU2581, " ");
                types.push_back((int32_t)TokenAttr::UserDefined);
            }
        } else {
            types.push_back((int32_t)TokenAttr::Normal);
        }
        tokens.push_back(std::move(text));
    }
    // The special tokens first: naming the pre-tokenizer tokenizes with them (BOS).
    Kv base = {{"tokenizer.ggml.model", gguf_value("gpt2")},
               {"tokenizer.ggml.pre", gguf_value("default")},
               {"tokenizer.ggml.tokens", gguf_value(gguf_string_array(tokens))},
               {"tokenizer.ggml.token_type", gguf_value(gguf_int32_array(types))}};
    for (auto& [k, v] : base) set(k, v);
    special_vocab(true, -1);
    const PreTokenizerName pre = name_pre_tokenizer(kv_, *tj, family_pre_);
    set("tokenizer.ggml.pre", gguf_value(pre.name));
    pre_how_ = "pre-tokenizer " + pre.name + " (" + pre.how + ")";
    n_tokens_ = n;
}

void VocabReader::llama_hf(const std::string& model_name, const std::vector<std::string>& user_defined) {
    const auto tj = read_json((fs::path(dir_) / "tokenizer.json").string());
    if (!tj) throw Error("tokenizer.json missing: no tokenizer to convert");
    const json model = get(*tj, "model");
    if (get(model, "type") != "BPE" || !truthy(get(model, "byte_fallback")) ||
        get(get(*tj, "decoder"), "type") != "Sequence")
        throw Error("tokenizer.json: not a SentencePiece-style BPE (model type BPE with byte_fallback, a "
                    "Sequence decoder), the tokenizer llama.cpp reads for this family");
    // the model's vocabulary (ids 0 .. n-1, every one there), then the added tokens: those
    // within it keep its ids, those past it follow in id order
    const json vocab = get(model, "vocab");
    if (!vocab.is_object()) throw Error("tokenizer.json: model.vocab is not an object");
    const int64_t n_base = (int64_t)vocab.size();
    std::vector<std::string> tokens((size_t)n_base);
    std::vector<bool> seen((size_t)n_base);
    std::map<std::string, int64_t> ids;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        const json& id = it.value();
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n_base ||
            seen[(size_t)id.get<int64_t>()])
            throw Error("tokenizer.json: model.vocab[\"" + it.key() + "\"] is not one of ids 0 to " +
                        std::to_string(n_base - 1) + " once each");
        tokens[(size_t)id.get<int64_t>()] = it.key();
        seen[(size_t)id.get<int64_t>()] = true;
        ids[it.key()] = id.get<int64_t>();
    }
    std::map<int64_t, std::string> past;
    for (const json& t : get(*tj, "added_tokens").is_array() ? (*tj)["added_tokens"] : json::array()) {
        if (!get(t, "id").is_number_integer() || !get(t, "content").is_string() || t["id"].get<int64_t>() < 0)
            throw Error("tokenizer.json: an added token without an id or content");
        const int64_t id = t["id"].get<int64_t>();
        const std::string text = t["content"].get<std::string>();
        (id < n_base ? tokens[(size_t)id] : past[id]) = text;
        ids[text] = id;
    }
    const auto tc = read_json((fs::path(dir_) / "tokenizer_config.json").string());
    if (const json dec = tc ? get(*tc, "added_tokens_decoder") : json(); dec.is_object())
        for (const auto& [id, t] : dec.items())
            if (const auto text = token_text(t); !text || ids.find(*text) == ids.end() || std::to_string(ids[*text]) != id)
                throw Error("tokenizer_config.json: added token " + id +
                            " is not tokenizer.json's (edgellm convert reads the added tokens from tokenizer.json)");
    std::set<int64_t> special;
    for (const std::string& s : special_token_texts(dir_)) {
        const auto it = ids.find(s);
        if (it == ids.end())
            throw Error("tokenizer_config.json: special token \"" + s + "\" is not in tokenizer.json's vocabulary");
        special.insert(it->second);
    }
    std::vector<int32_t> types;
    for (int64_t i = 0; i < n_base; ++i)
        types.push_back((int32_t)(is_byte_token(tokens[(size_t)i]) ? TokenAttr::Byte
                                  : special.count(i)                ? TokenAttr::Control
                                                                    : TokenAttr::Normal));
    for (const auto& [id, text] : past) {
        tokens.push_back(text);
        types.push_back((int32_t)(special.count(id) ? TokenAttr::Control : TokenAttr::UserDefined));
    }
    for (size_t i = 0; i < tokens.size(); ++i)
        if (std::find(user_defined.begin(), user_defined.end(), tokens[i]) != user_defined.end())
            types[i] = (int32_t)TokenAttr::UserDefined;
    set("tokenizer.ggml.model", gguf_value(model_name));
    set("tokenizer.ggml.tokens", gguf_value(gguf_string_array(tokens)));
    set("tokenizer.ggml.scores", gguf_value(gguf_float_array(std::vector<float>(tokens.size(), -1000.0f))));
    set("tokenizer.ggml.token_type", gguf_value(gguf_int32_array(types)));
    n_tokens_ = (int64_t)tokens.size();
    special_vocab(true, -1);
}

}  // namespace edgellm::convert
