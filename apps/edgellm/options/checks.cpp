// What is checked or derived across options once the table's rows have been applied: pairs
// that contradict each other, options that need another (or a mode), and the settings
// several options make together.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "../commands.h"
#include "edgellm/agent.h"
#include "options.h"

namespace edgellm::cli {

namespace {

// "A and B contradict each other": the rows with `contradicts`, given with the other.
bool contradictions(const Settings& s, uint32_t scope, std::string* err) {
    for (const Option& o : option_table())
        if ((o.scope & scope) && o.contradicts && s.has(o.names[0]) && s.has(o.contradicts)) {
            *err =
                std::string(o.message_name()) + " and " + o.contradicts + " contradict each other";
            return false;
        }
    return true;
}

// The rows given that need what is not there: "<name><why>".
bool needs(const Settings& s, uint32_t scope, std::initializer_list<Needs> what,
           const std::string& why, std::string* err) {
    for (const Option& o : option_table())
        if ((o.scope & scope) && std::count(what.begin(), what.end(), o.needs) &&
            s.has(o.names[0])) {
            *err = o.message_name() + why;
            return false;
        }
    return true;
}

bool repack_cache_or_no_repack(const Settings& s, std::string* err) {
    if (!s.repack_cache || s.repack) return true;
    *err = "--repack-cache keeps repacked weights, and --no-repack repacks none: give one";
    return false;
}

// --grammar, --grammar-file, --json-schema, --json-schema-file: one of them, compiled.
bool compile_grammar_option(Settings& s, std::string* err) {
    s.grammar.reset();
    if (s.grammar_sources.empty()) return true;
    if (s.grammar_sources.size() > 1) {
        *err = "give only one of --grammar, --grammar-file, --json-schema, --json-schema-file";
        return false;
    }
    const auto& [flag, value] = s.grammar_sources.front();
    const bool file = flag == "--grammar-file" || flag == "--json-schema-file";
    std::string text = value, where = flag;
    if (file) {
        if (!read_text_file(value, &text)) {
            *err = flag + ": cannot read " + value;
            return false;
        }
        where = flag + " " + value;
    }
    s.grammar = compile_grammar_text(text, flag.find("json") != std::string::npos, where, err);
    return s.grammar != nullptr;
}

// serve's speculative decoding: the drafters --spec-type and -md choose, and their lengths.
bool speculative_config(Settings& s, std::string* err) {
    server::SpecConfig& sc = s.server.spec;
    const ServeSettings& o = s.serve;
    const std::string types = o.spec_types.value_or(sc.draft_model.empty() ? "none" : "draft");
    size_t at = 0;
    bool none = false;
    while (at <= types.size()) {
        const size_t comma = std::min(types.find(',', at), types.size());
        const std::string t = types.substr(at, comma - at);
        at = comma + 1;
        if (t == "draft" || t == "draft-simple") {
            sc.draft = true;
        } else if (t == "ngram" || t == "ngram-simple" || t == "ngram-map-k" ||
                   t == "ngram-map-k4v" || t == "ngram-mod" || t == "ngram-cache" ||
                   t == "lookup") {
            sc.ngram = true;
        } else if (t == "none") {
            none = true;
        } else if (t == "draft-eagle3" || t == "draft-mtp" || t == "draft-dflash" ||
                   t == "draft-dspark") {
            *err = "--spec-type " + t +
                   " needs a model-specific draft head, which edgellm does not run; "
                   "use draft (with -md) or ngram";
            return false;
        } else if (!t.empty()) {
            *err = "--spec-type: unknown type \"" + t + "\" (none, draft, ngram)";
            return false;
        }
    }
    if (none && (sc.draft || sc.ngram)) {
        *err = "--spec-type: none together with another type";
        return false;
    }
    if (sc.draft && sc.draft_model.empty()) {
        *err = "--spec-type draft needs a draft model (-md FILE)";
        return false;
    }
    if (!sc.draft && !sc.draft_model.empty()) {
        *err = "-md is given but --spec-type " + types + " does not use a draft model (add draft)";
        return false;
    }
    if (!sc.on() && !needs(s, kServe, {Needs::Speculation, Needs::DraftModel},
                           " is for speculative decoding, which is off: give -md DRAFT_MODEL or "
                           "--spec-type ngram",
                           err))
        return false;
    if (sc.on() && !sc.draft &&
        !needs(s, kServe, {Needs::DraftModel}, " is for the draft model, and there is none (-md)",
               err))
        return false;
    // Lookup drafts up to --spec-ngram-simple-size-m, else --draft-max when given, else 16;
    // the draft model up to --draft-max (default 3, llama-server's).
    const int64_t ngram_n_max = o.ngram_size_m > 0     ? o.ngram_size_m
                                : s.has("--draft-max") ? o.draft_n_max
                                                       : 16;
    const int64_t most = std::max(sc.draft ? o.draft_n_max : 0, sc.ngram ? ngram_n_max : 0);
    if (o.draft_n_min > most) {
        *err = "--draft-min " + std::to_string(o.draft_n_min) +
               " is above the most drafted per step (" + std::to_string(most) + ", --draft-max)";
        return false;
    }
    sc.draft_n_max = (int)o.draft_n_max;
    sc.ngram_n_max = (int)ngram_n_max;
    sc.n_max = (int)most;
    sc.n_min = (int)o.draft_n_min;
    sc.p_min = o.draft_p_min;
    sc.ngram_max = (int)o.ngram_size_n;
    sc.ngram_min = (int)std::min<int64_t>(NgramDrafter::kMinLookup, o.ngram_size_n);
    sc.n_ctx = o.draft_ctx;
    sc.n_threads = (int)o.draft_threads;
    return true;
}

// One model (-m, or -hf which becomes -m) or a router (neither): their own options only.
bool one_model_or_router(const Settings& s, std::string* err) {
    if (s.has("-hf") && s.has("-m")) {
        *err = "-m and -hf both name the model: give one";
        return false;
    }
    if (!s.has("-hf") && s.has("-hff")) {
        *err = "--hf-file needs -hf ORG/NAME";
        return false;
    }
    if (!s.has("-hf") && s.has("-hfd") && s.has("-md")) {
        *err = "-md and -hfd both name the draft model: give one";
        return false;
    }
    // (-hf and -hfd are replaced by -m and -md in the command line served: checked then)
    for (const Option& o : option_table())
        if (s.has("-m") && o.scope == kRouter && s.has(o.names[0])) {
            *err = o.names[0] + " is for router mode (no -m): with -m FILE one model is served";
            return false;
        }
    if (!s.has("-m") && !s.has("-hf") && !s.has("-hfd") && s.has("-a")) {
        *err =
            "--alias names the one model of -m FILE; a router's models are named by their files or "
            "by --models-preset sections";
        return false;
    }
    return true;
}

// --context-policy, and --context-shift as llama-server's name for its shift.
bool context_policy(Settings& s, std::string* err) {
    using server::ContextPolicy;
    const ContextPolicy cp = s.serve.context_policy.value_or(
        s.has("--context-shift") ? ContextPolicy::Shift : ContextPolicy::Error);
    const char* names[] = {"error", "shift", "summarize"};
    if (s.has("--context-shift") && cp != ContextPolicy::Shift) {
        *err = std::string("--context-shift contradicts --context-policy ") + names[(int)cp];
        return false;
    }
    if (s.has("--no-context-shift") && cp == ContextPolicy::Shift) {
        *err = "--no-context-shift contradicts --context-policy shift";
        return false;
    }
    s.server.context_policy = cp;
    s.gen.context_shift = cp == ContextPolicy::Shift;
    if (s.has("--keep") && !s.gen.context_shift) {
        *err =
            "--keep needs --context-shift or --context-policy shift (without it the context is "
            "never "
            "shifted)";
        return false;
    }
    return true;
}

// The options that go with another: their messages say which.
bool serve_pairs(const Settings& s, std::string* err) {
    const char* why = nullptr;
    if (s.has("--timeout-first-token") != s.has("--fallback-reply"))
        why = "--timeout-first-token and --fallback-reply go together (what to answer, and when)";
    else if (s.has("--fallback-reply") && s.server.fallback_reply.empty())
        why = "--fallback-reply must not be empty";
    else if (s.server.fit && s.server.memory_limit == 0)
        why = "--fit needs --memory-limit (edgellm does not guess the memory it may take)";
    else if (s.has("--prompt-cache-max-mib") && s.server.prompt_cache_dir.empty())
        why = "--prompt-cache-max-mib needs --prompt-cache DIR";
    else if (s.has("--pooling") && !s.server.embeddings)
        why = "--pooling needs --embedding or --reranking (it shapes their vectors)";
    if (why) *err = why;
    return !why;
}

// --reasoning-budget 0 turns thinking off; an enable_thinking in --chat-template-kwargs
// must be a boolean (it decides whether a reply may think).
bool reasoning_settings(Settings& s, std::string* err) {
    if (s.server.reasoning_budget == 0) s.server.enable_thinking = false;
    const std::string& kwargs = s.server.chat_template_kwargs;
    if (kwargs.empty()) return true;
    const auto kw = nlohmann::json::parse(kwargs, nullptr, false);
    if (!kw.is_object()) {
        *err = "--chat-template-kwargs must be a JSON object";
        return false;
    }
    if (kw.contains("enable_thinking") && !kw["enable_thinking"].is_boolean()) {
        *err = "--chat-template-kwargs: enable_thinking must be true or false, got " +
               kw["enable_thinking"].dump();
        return false;
    }
    return true;
}

// --lora / --lora-scaled in the order given (their ids), as llama-server numbers them.
bool lora_adapters(Settings& s, std::string* err) {
    auto args = s.serve.lora_args;
    std::sort(args.begin(), args.end(),
              [](const auto& a, const auto& b) { return a.position < b.position; });
    for (const auto& arg : args) {
        size_t at = 0;
        while (at <= arg.value.size()) {
            const size_t comma = std::min(arg.value.find(',', at), arg.value.size());
            std::string item = arg.value.substr(at, comma - at);
            at = comma + 1;
            if (item.empty()) continue;
            float scale = 1.0f;
            if (arg.scaled) {
                const size_t colon = item.rfind(':');
                char* end = nullptr;
                const double v =
                    colon == std::string::npos ? 0 : std::strtod(item.c_str() + colon + 1, &end);
                if (colon == std::string::npos || colon + 1 >= item.size() || *end != '\0' ||
                    !std::isfinite(v)) {
                    *err = "--lora-scaled takes FILE:SCALE, got \"" + item + "\"";
                    return false;
                }
                scale = (float)v;
                item = item.substr(0, colon);
            }
            if (!std::filesystem::is_regular_file(item)) {
                *err = "LoRA adapter " + item + ": no such file";
                return false;
            }
            s.server.lora.emplace_back(item, scale);
        }
    }
    return true;
}

// Tools that write, on a --host other machines reach, without a key: refused (exit 2) unless
// --tools-allow-remote. The built-in ones are known from --tools; an MCP server's tools only
// once it runs, so the server is told to refuse those at start-up (exposed_on).
bool tools_off_this_machine(Settings& s, std::string* err) {
    server::ServerConfig& c = s.server;
    if (loopback_only(c.http.host) || !c.api_keys.empty() || s.has("--tools-allow-remote"))
        return true;
    const std::vector<std::string> writers = agent::writing_builtin_tools(c.tools);
    if (!writers.empty()) {
        *err = agent::remote_tools_refusal(writers, {}, c.tools_runtime, c.http.host);
        return false;
    }
    c.tools_exposed_on = c.http.host;
    return true;
}

}  // namespace

bool loopback_only(const std::string& hosts) {
    const std::vector<std::string> list = split_list(hosts);
    return !list.empty() && std::all_of(list.begin(), list.end(), [](std::string h) {
        if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
        in_addr v4{};
        in6_addr v6{};
        if (h == "localhost") return true;
        if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
        if (::inet_pton(AF_INET6, h.c_str(), &v6) != 1) return false;
        return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
    });
}

LoadOptions load_options(const Settings& s) {
    LoadOptions o;
    o.repack = s.repack;
    if (s.no_repack_cache) return o;
    if (s.repack_cache) {
        o.repack_cache_dir = *s.repack_cache;
    } else {
        o.repack_cache_dir = repack_cache_dir().string();
        o.repack_cache_min_bytes = (size_t)64 << 20;
    }
    return o;
}

bool check_nothing(Settings&, std::string*) {
    return true;
}

bool check_run(Settings& s, std::string* err) {
    return compile_grammar_option(s, err) && repack_cache_or_no_repack(s, err);
}

bool check_serve(Settings& s, std::string* err) {
    // $EDGELLM_API_KEY: the keys when no flag gives one (how the router gives its children
    // theirs: out of `ps`, unlike an argument)
    if (s.server.api_keys.empty())
        if (const char* env = std::getenv("EDGELLM_API_KEY"); env && *env) add_api_keys(env, &s.server.api_keys);
    if (!compile_grammar_option(s, err) || !speculative_config(s, err) ||
        !one_model_or_router(s, err) || !contradictions(s, kServeAll, err) ||
        !context_policy(s, err) || !serve_pairs(s, err) || !repack_cache_or_no_repack(s, err) ||
        !reasoning_settings(s, err) || !lora_adapters(s, err) || !tools_off_this_machine(s, err))
        return false;
    // tools act on this machine: no page of another origin, unless --cors-origins says so
    if ((s.has("--tools") || s.has("--mcp-servers-config") || s.has("--mcp-servers-json")) &&
        !s.has("--cors-origins"))
        s.server.cors.origins = "localhost";
    // the server's config: the shared settings into it
    s.server.ctx = s.ctx;
    s.server.ctx.n_batch = std::min(s.ctx.n_batch, s.serve.n_ubatch);
    s.server.defaults = s.gen;
    s.server.grammar = s.grammar;
    s.server.load = load_options(s);
    s.server.mlock = s.mlock;
    s.server.warmup = s.warmup;
    // POST /models/load: edgellm's model directory, then every --models-allow-dir
    s.server.models_allow_dirs.insert(s.server.models_allow_dirs.begin(), models_dir().string());
    return true;
}

bool check_bench(Settings& s, std::string* err) {
    const bool instead =
        s.has("--draft") || s.has("--spec-type") || s.has("--grammar") || s.has("--json-schema");
    if (instead &&
        !needs(s, kBench, {Needs::PlainBench},
               " is for the pp/tg tests; --draft, --spec-type, --grammar and --json-schema take "
               "-n, -r, -t",
               err))
        return false;
    return repack_cache_or_no_repack(s, err);
}

bool check_perplexity(Settings& s, std::string* err) {
    const char* why = nullptr;
    if (s.perplexity.kl_save && s.perplexity.kl_base)
        why = "give at most one of --kl-save and --kl-base";
    else if (s.has("--kl-top-k") && !s.perplexity.kl_save)
        why = "--kl-top-k goes with --kl-save";
    if (why) *err = why;
    return !why;
}

bool bench_speculation(const Settings& s, BenchSpeculation* sc, std::string* err) {
    const BenchSettings& b = s.bench;
    sc->draft_model = b.draft_model.value_or("");
    const bool draft = !sc->draft_model.empty();
    if (const auto& t = b.spec_types) {
        size_t at = 0;
        while (at <= t->size()) {
            const size_t comma = std::min(t->find(',', at), t->size());
            const std::string one = t->substr(at, comma - at);
            at = comma + 1;
            if (one.rfind("ngram", 0) == 0 || one == "lookup") {
                sc->ngram = true;
            } else if (one == "draft" || one == "draft-simple") {
                if (!draft) {
                    *err = "--spec-type draft needs --draft MODEL";
                    return false;
                }
            } else if (!one.empty()) {
                *err = "--spec-type: unknown type \"" + one + "\" (ngram, draft)";
                return false;
            }
        }
    }
    // (checked only now: the pp/tg tests ignore them)
    auto value = [](const char* name, const std::optional<std::string>& v) {
        return Arg{name, v.value_or(""), {}, {}};
    };
    int64_t n_max = 3, n_min = 0;
    if ((b.draft_max && !value("--draft-max", b.draft_max).integer(1, 64, &n_max, err)) ||
        (b.draft_min && !value("--draft-min", b.draft_min).integer(0, 64, &n_min, err)) ||
        (b.draft_p_min && !value("--draft-p-min", b.draft_p_min).number(0.0, 1.0, &sc->p_min, err)))
        return false;
    sc->draft_n_max = (int)n_max;
    sc->ngram_n_max = b.draft_max ? (int)n_max : 16;
    sc->n_max = std::max(draft ? sc->draft_n_max : 0, sc->ngram ? sc->ngram_n_max : 0);
    if (n_min > sc->n_max) {
        *err = "--draft-min " + std::to_string(n_min) + " is above the most drafted per step (" +
               std::to_string(sc->n_max) + ")";
        return false;
    }
    sc->n_min = (int)n_min;
    sc->adaptive = !b.spec_fixed;
    return true;
}

}  // namespace edgellm::cli
