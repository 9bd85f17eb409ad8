// The models the router can start: every GGUF of edgellm's model directory and of
// --models-dir, the sections of a --models-preset INI file, and what llama.cpp's (Hugging
// Face's) download cache holds, read only.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>

#include "server/router/router_impl.h"
#include "sys/strings.h"

namespace edgellm::server {

namespace fs = std::filesystem;

using sys::lower;
using sys::trim;

namespace router_detail {

std::string bare_id(const std::string& id) { return lower(id).ends_with(".gguf") ? id.substr(0, id.size() - 5) : id; }

bool truthy(const std::string& v) {
    const std::string l = lower(v);
    return l == "1" || l == "true" || l == "on" || l == "yes";
}

}  // namespace router_detail

using router_detail::bare_id;
using router_detail::truthy;

namespace {

bool is_gguf(const fs::path& p) { return lower(p.extension().string()) == ".gguf"; }
bool is_projector(const fs::path& p) { return lower(p.filename().string()).rfind("mmproj", 0) == 0; }

// A split model's later shards ("-00002-of-00003.gguf") are not models of their own.
bool is_later_shard(const std::string& name) {
    static const std::regex shard(R"(-(\d{5})-of-\d{5}\.gguf$)", std::regex::icase);
    std::smatch m;
    return std::regex_search(name, m, shard) && m[1].str() != "00001";
}
std::string without_shard_suffix(const std::string& stem) {
    static const std::regex shard(R"(-00001-of-\d{5}$)");
    return std::regex_replace(stem, shard, "");
}

// Preset keys that are the router's, not serve flags.
bool router_key(const std::string& k) {
    return k == "model" || k == "m" || k == "load-on-startup" || k == "dedup-cache-models" ||
           k == "hf-repo" || k == "hf" || k == "hfr" || k == "hf-file" || k == "hff" ||
           k == "hf-repo-draft" || k == "hfd" || k == "spec-draft-hf" || k == "model-url" || k == "mu";
}

bool falsy(const std::string& v) {
    const std::string l = lower(v);
    return l == "0" || l == "false" || l == "off" || l == "no";
}

// `key = value` as serve flags: "--key value"; a flag that takes no value: "--key" when the
// value is true (1, on, yes), left out when false. Empty: fine; else why not.
std::string preset_flags(const std::vector<std::pair<std::string, std::string>>& keys,
                         const std::function<int(const std::string&)>& kind, std::vector<std::string>* out) {
    for (const auto& [k, v] : keys) {
        if (router_key(k)) continue;
        // the router's front answers for every model (its key, its address)
        if (k == "api-key" || k == "api-key-file" || k == "host" || k == "port" || k == "allowed-hosts")
            return "its preset key `" + k + "` is the router's own (give it to the router's command line)";
        std::string flag = "--" + k;
        int what = kind ? kind(flag) : -2;
        if (what == -1 && kind && kind("-" + k) != -1) {
            flag = "-" + k;  // (a short name: t, c, ngl)
            what = kind(flag);
        }
        if (what == -1) return "its preset key `" + k + "` is not a serve flag";
        const bool no_value = what == 0 || (what == -2 && (truthy(v) || falsy(v)));
        if (no_value) {
            if (truthy(v)) out->push_back(flag);
            else if (!falsy(v)) return "its preset key `" + k + "` takes no value (true or false), got \"" + v + "\"";
            continue;
        }
        out->push_back(flag);
        out->push_back(v);
    }
    return "";
}

const std::string* find_key(const std::vector<std::pair<std::string, std::string>>& keys, const std::string& k) {
    const std::string* found = nullptr;
    for (const auto& kv : keys)
        if (kv.first == k) found = &kv.second;
    return found;
}


// ---- llama.cpp's (Hugging Face's) model cache, read only -----------------------------------

// Where llama.cpp keeps what `-hf` downloaded: $LLAMA_CACHE, $HF_HUB_CACHE,
// $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
fs::path hf_cache_dir() {
    auto env = [](const char* n) -> std::string {
        const char* v = std::getenv(n);
        return v && *v ? v : "";
    };
    if (auto v = env("LLAMA_CACHE"); !v.empty()) return v;
    if (auto v = env("HF_HUB_CACHE"); !v.empty()) return v;
    if (auto v = env("HUGGINGFACE_HUB_CACHE"); !v.empty()) return v;
    if (auto v = env("HF_HOME"); !v.empty()) return fs::path(v) / "hub";
    if (auto v = env("XDG_CACHE_HOME"); !v.empty()) return fs::path(v) / "huggingface" / "hub";
    return fs::path(env("HOME").empty() ? "/root" : env("HOME")) / ".cache" / "huggingface" / "hub";
}

// "name-Q4_K_M.gguf" -> "Q4_K_M" (upper case); "" when the name has none.
std::string quant_tag(const std::string& file) {
    std::string stem = file;
    if (!lower(stem).ends_with(".gguf")) return "";
    stem.resize(stem.size() - 5);
    static const std::regex split(R"(^(.+)-(\d{5})-of-(\d{5})$)", std::regex::icase);
    static const std::regex tag(R"([-.]([A-Z0-9_]+)$)", std::regex::icase);
    std::smatch m;
    if (std::regex_match(stem, m, split)) stem = m[1].str();
    if (!std::regex_search(stem, m, tag)) return "";
    std::string t = m[1].str();
    for (char& c : t) c = (char)std::toupper((unsigned char)c);
    return t;
}

struct CachedModel {
    std::string repo, tag, path;  // id: repo:tag
};

// Every model in the cache: models--ORG--NAME/snapshots/<refs/main or the first>/*.gguf.
std::vector<CachedModel> scan_hf_cache() {
    std::vector<CachedModel> out;
    const fs::path dir = hf_cache_dir();
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return out;
    std::vector<fs::path> repos;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_directory() && it->path().filename().string().rfind("models--", 0) == 0) repos.push_back(it->path());
    std::sort(repos.begin(), repos.end());
    for (const fs::path& r : repos) {
        std::string repo = r.filename().string().substr(8);
        for (size_t at; (at = repo.find("--")) != std::string::npos;) repo.replace(at, 2, "/");
        std::string commit;
        if (std::ifstream ref(r / "refs" / "main"); ref) std::getline(ref, commit);
        commit = trim(commit);
        if (commit.empty() || !fs::is_directory(r / "snapshots" / commit, ec)) {
            commit.clear();
            for (fs::directory_iterator it(r / "snapshots", ec), end; !ec && it != end; it.increment(ec))
                if (it->is_directory()) {
                    commit = it->path().filename().string();
                    break;
                }
        }
        if (commit.empty()) continue;
        const fs::path snap = r / "snapshots" / commit;
        std::vector<fs::path> files;
        for (fs::recursive_directory_iterator it(snap, ec), end; !ec && it != end; it.increment(ec))
            if (is_gguf(it->path()) && !is_projector(it->path()) && !is_later_shard(it->path().filename().string()))
                files.push_back(it->path());
        std::sort(files.begin(), files.end());
        std::set<std::string> tags;
        for (const fs::path& f : files) {
            const std::string t = quant_tag(f.filename().string());
            if (t.empty() || !tags.insert(t).second) continue;
            out.push_back({repo, t, f.string()});
        }
    }
    return out;
}

// "org/name[:TAG]" in the cache: the file with that tag, else (no tag) Q4_K_M, else the first.
std::string resolve_hf(const std::vector<CachedModel>& cache, const std::string& repo_tag) {
    const size_t colon = repo_tag.find(':');
    const std::string repo = repo_tag.substr(0, colon);
    std::string tag = colon == std::string::npos ? "" : repo_tag.substr(colon + 1);
    for (char& c : tag) c = (char)std::toupper((unsigned char)c);
    const CachedModel* first = nullptr;
    for (const CachedModel& c : cache) {
        if (c.repo != repo) continue;
        if (!tag.empty() && c.tag == tag) return c.path;
        if (tag.empty() && c.tag == "Q4_K_M") return c.path;
        if (!first) first = &c;
    }
    return tag.empty() && first ? first->path : "";
}

}  // namespace

std::string hf_cache_directory() { return hf_cache_dir().string(); }

std::string find_cached_hf_model(const std::string& repo_tag, const std::string& file) {
    const std::vector<CachedModel> cache = scan_hf_cache();
    if (file.empty()) return resolve_hf(cache, repo_tag);
    const std::string repo = repo_tag.substr(0, repo_tag.find(':'));
    for (const CachedModel& c : cache)
        if (c.repo == repo && fs::path(c.path).filename() == fs::path(file).filename()) return c.path;
    return "";
}

Result<std::vector<PresetSection>> parse_preset_ini(const std::string& text) {
    std::vector<PresetSection> out;
    PresetSection global{"*", {}};
    PresetSection* cur = &global;
    std::istringstream in(text);
    std::string line;
    int n = 0;
    std::vector<PresetSection> sections;
    std::vector<std::string> order;
    while (std::getline(in, line)) {
        ++n;
        line = trim(line);
        if (line.empty() || line[0] == ';' || line[0] == '#') continue;
        if (line.front() == '[') {
            if (line.back() != ']' || line.size() < 3)
                return Result<std::vector<PresetSection>>::fail("line " + std::to_string(n) + ": a section is [NAME]: " + line);
            const std::string name = trim(line.substr(1, line.size() - 2));
            if (name == "*") {
                cur = &global;
                continue;
            }
            auto it = std::find_if(sections.begin(), sections.end(), [&](const PresetSection& s) { return s.name == name; });
            if (it == sections.end()) {
                sections.push_back({name, {}});
                it = sections.end() - 1;
            }
            cur = &*it;
            continue;
        }
        const size_t eq = line.find('=');
        if (eq == std::string::npos)
            return Result<std::vector<PresetSection>>::fail("line " + std::to_string(n) + ": not `key = value`: " + line);
        std::string key = trim(line.substr(0, eq));
        while (!key.empty() && key[0] == '-') key.erase(key.begin());
        std::string value = trim(line.substr(eq + 1));
        if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
            value = value.substr(1, value.size() - 2);
        if (key.empty()) return Result<std::vector<PresetSection>>::fail("line " + std::to_string(n) + ": no key: " + line);
        cur->keys.emplace_back(key, value);
    }
    out.push_back(global);
    for (auto& s : sections) out.push_back(std::move(s));
    return out;
}

std::vector<RouterModel> scan_router_models(const RouterConfig& cfg, std::vector<std::string>* warnings) {
    std::vector<RouterModel> models;
    std::set<std::string> ids;
    auto add = [&](RouterModel m) {
        if (!ids.insert(bare_id(m.id)).second) return;
        models.push_back(std::move(m));
    };
    bool dedup = false;
    std::set<std::string> preset_paths;
    const std::vector<CachedModel> hf = scan_hf_cache();
    // 1. the preset (its names win)
    if (!cfg.models_preset.empty()) {
        std::ifstream f(cfg.models_preset);
        std::stringstream ss;
        ss << f.rdbuf();
        if (!f) {
            warnings->push_back("cannot read the preset " + cfg.models_preset);
        } else if (auto sections = parse_preset_ini(ss.str()); !sections) {
            warnings->push_back("the preset " + cfg.models_preset + ": " + sections.error());
        } else {
            const PresetSection& global = (*sections)[0];
            if (const std::string* v = find_key(global.keys, "dedup-cache-models")) dedup = truthy(*v);
            const fs::path base = fs::path(cfg.models_preset).parent_path();
            for (size_t i = 1; i < sections->size(); ++i) {
                const PresetSection& s = (*sections)[i];
                auto keys = global.keys;
                keys.insert(keys.end(), s.keys.begin(), s.keys.end());
                RouterModel m;
                m.id = s.name;
                m.source = "preset";
                const std::string* path = find_key(s.keys, "model");
                if (!path) path = find_key(s.keys, "m");
                if (path) {
                    fs::path p(*path);
                    if (p.is_relative()) p = base / p;
                    m.path = p.lexically_normal().string();
                    preset_paths.insert(m.path);
                } else if (const std::string* repo = find_key(keys, "hf-repo") ? find_key(keys, "hf-repo") : find_key(keys, "hf")) {
                    // a repository llama.cpp has downloaded: its file in the cache (never a download)
                    m.path = resolve_hf(hf, *repo);
                    if (m.path.empty())
                        m.why = "its preset names the Hugging Face repository " + *repo + ", which is not in " +
                                hf_cache_dir().string() + " (edgellm never downloads; give `model = FILE`)";
                    else
                        preset_paths.insert(m.path);
                } else {
                    m.why = "its preset section has no `model = FILE`";
                }
                const std::string* draft = find_key(keys, "spec-draft-hf");
                if (!draft) draft = find_key(keys, "hf-repo-draft");
                if (!draft) draft = find_key(keys, "hfd");
                if (draft) {
                    const std::string dp = resolve_hf(hf, *draft);
                    if (dp.empty() && m.why.empty())
                        m.why = "its draft model " + *draft + " is not in " + hf_cache_dir().string() +
                                " (edgellm never downloads; give `model-draft = FILE`)";
                    if (!dp.empty()) {
                        m.args.push_back("-md");
                        m.args.push_back(dp);
                        preset_paths.insert(dp);
                    }
                }
                if (const std::string* v = find_key(keys, "load-on-startup")) m.load_on_startup = truthy(*v);
                if (const std::string* v = find_key(s.keys, "dedup-cache-models"); v && truthy(*v)) dedup = true;
                if (std::string bad = preset_flags(keys, cfg.flag_kind, &m.args); !bad.empty() && m.why.empty()) {
                    m.why = bad;
                    m.path.clear();
                }
                add(std::move(m));
            }
        }
    }
    // 2. --models-dir: each GGUF, and each subdirectory holding one
    if (!cfg.models_dir.empty()) {
        std::error_code ec;
        std::vector<fs::directory_entry> entries;
        for (fs::directory_iterator it(cfg.models_dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(*it);
        if (ec) warnings->push_back("cannot list --models-dir " + cfg.models_dir + ": " + ec.message());
        std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.path() < b.path(); });
        for (const auto& e : entries) {
            const std::string name = e.path().filename().string();
            if (e.is_regular_file(ec) && is_gguf(e.path()) && !is_projector(e.path()) && !is_later_shard(name)) {
                add({without_shard_suffix(e.path().stem().string()), e.path().string(), "", {}, "dir"});
            } else if (e.is_directory(ec)) {
                std::vector<fs::path> files;
                for (fs::directory_iterator it(e.path(), ec), end; !ec && it != end; it.increment(ec))
                    if (it->is_regular_file() && is_gguf(it->path()) && !is_projector(it->path()) &&
                        !is_later_shard(it->path().filename().string()))
                        files.push_back(it->path());
                std::sort(files.begin(), files.end());
                if (!files.empty()) add({name, files[0].string(), "", {}, "dir"});
            }
        }
    }
    // 3. edgellm's model directory and $EDGELLM_MODEL (ids: the file names, as -m names them)
    for (const std::string& f : cfg.cache_files) {
        RouterModel m{fs::path(f).filename().string(), f, "", {}, "cache"};
        m.hidden = dedup && preset_paths.count(fs::path(f).lexically_normal().string());
        add(std::move(m));
    }
    // 4. what llama.cpp downloaded (ids as llama-server names them: ORG/NAME:TAG)
    for (const CachedModel& c : hf) {
        RouterModel m{c.repo + ":" + c.tag, c.path, "", {}, "cache"};
        m.hidden = dedup && preset_paths.count(c.path);
        add(std::move(m));
    }
    return models;
}

}  // namespace edgellm::server
