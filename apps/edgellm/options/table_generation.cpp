// The option table, part 3: sampling, grammars, chat templates and reasoning (run, serve).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "edgellm/chat.h"
#include "options.h"

namespace edgellm::cli {

namespace {

bool parse_logit_bias(const std::string& text, SamplerParams* s, std::string* err) {
    size_t at = 0;
    while (at <= text.size()) {
        size_t end = text.find(',', at);
        if (end == std::string::npos) end = text.size();
        const std::string item = text.substr(at, end - at);
        at = end + 1;
        if (item.empty()) continue;
        const size_t sign = item.find_first_of("+-", 1);
        char* e1 = nullptr;
        const long id = sign == std::string::npos ? -1 : std::strtol(item.c_str(), &e1, 10);
        const std::string bias_text = sign == std::string::npos ? "" : item.substr(sign);
        float bias = 0.0f;
        if (bias_text == "-inf" || bias_text == "-INF") {
            bias = -INFINITY;
        } else if (!bias_text.empty()) {
            char* e2 = nullptr;
            bias = std::strtof(bias_text.c_str(), &e2);
            if (*e2 != '\0' || !std::isfinite(bias)) bias = NAN;
        }
        if (id < 0 || e1 != item.c_str() + sign || std::isnan(bias)) {
            *err = "--logit-bias takes TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1), got \"" +
                   item + "\"";
            return false;
        }
        s->logit_bias.push_back({(int32_t)id, bias});
    }
    return true;
}

// --samplers "top_k;top_p" (names, ';' or ','-separated) or --sampling-seq "kp" (letters):
// the stages in that order.
bool stage_order(const std::string& text, bool letters, SamplerParams* sp, std::string* err) {
    std::vector<std::string> items;
    for (size_t at = 0; at <= text.size() && !letters;) {
        const size_t end = std::min(text.find_first_of(";,", at), text.size());
        if (end > at) items.push_back(text.substr(at, end - at));
        at = end + 1;
    }
    if (letters)
        for (char c : text) items.push_back(std::string(1, c));
    sp->order.clear();
    for (const std::string& item : items) {
        const auto k = letters ? sampler_stage_from_letter(item[0]) : sampler_stage_from_name(item);
        if (!k || *k == SamplerStageKind::Dry) {
            *err = letters ? "--sampling-seq: unknown or unsupported stage letter '" + item + "'"
                           : "--samplers: unknown or unsupported stage \"" + item + "\"";
            return false;
        }
        sp->order.push_back(*k);
    }
    return true;
}

// --chat-template: a format edgellm renders itself, another of llama.cpp's built-in names
// (as Jinja), or Jinja source.
bool chat_template_option(const Arg& a, Settings& s, std::string* err) {
    const std::string& t = a.value;
    if (auto fmt = chat_format_from_name(t)) {
        s.server.chat_format = fmt;
    } else if (auto src = builtin_chat_template(t)) {
        s.server.chat_template = *src;
    } else if (t.find("{%") != std::string::npos || t.find("{{") != std::string::npos) {
        s.server.chat_template = t;
    } else {
        std::string names = "chatml, llama3, gemma";
        for (const std::string& n : builtin_chat_template_names()) names += ", " + n;
        *err = "--chat-template \"" + t + "\" is neither a known name (" + names +
               ") nor a Jinja template";
        return false;
    }
    return true;
}

// The grammar rows keep what they were given: compile_grammar_option() compiles the one.
Apply grammar_source(const char* flag) {
    return [flag](const Arg& a, Settings& s, std::string*) {
        s.grammar_sources.emplace_back(flag, a.value);
        return true;
    };
}

}  // namespace

// (a row an option, laid out by hand)
// clang-format off
std::vector<Option> generation_options() {
    const uint32_t both = kRun | kServe;
    return {
        // ---- sampling (llama.cpp's names) ----
        {.names = {"--temp", "--temperature"}, .metavar = "T",
         .scope = both, .group = Group::Sampling,
         .help = "temperature; 0 = greedy (default 0.8)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.temperature = v; })},
        {.names = {"--top-k"}, .metavar = "K", .scope = both, .group = Group::Sampling,
         .help = "keep the K most likely tokens; 0 = off (default 40)",
         .apply = integer(-1, 1 << 30, [](Settings& s, int64_t v) {
             s.gen.sampling.top_k = (int32_t)v;
         })},
        {.names = {"--top-p"}, .metavar = "P", .scope = both, .group = Group::Sampling,
         .help = "nucleus sampling; 1 = off (default 0.95)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.top_p = v; })},
        {.names = {"--min-p"}, .metavar = "P", .scope = both, .group = Group::Sampling,
         .help = "drop tokens below P x the best; 0 = off (default 0.05)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.min_p = v; })},
        {.names = {"--repeat-penalty"}, .metavar = "X", .scope = both, .group = Group::Sampling,
         .help = "penalise repeated tokens; 1 = off (default 1.0)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.repeat_penalty = v; })},
        {.names = {"--repeat-last-n"}, .metavar = "N", .scope = both, .group = Group::Sampling,
         .help = "tokens the penalties look back on; -1 = all (default 64)",
         .apply = integer(-1, 1 << 30, [](Settings& s, int64_t v) {
             s.gen.sampling.repeat_last_n = (int32_t)v;
         })},
        {.names = {"--presence-penalty"}, .metavar = "X", .scope = both, .group = Group::Sampling,
         .help = "subtract X once from repeated tokens (default 0)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.presence_penalty = v; })},
        {.names = {"--frequency-penalty"}, .metavar = "X", .scope = both, .group = Group::Sampling,
         .help = "subtract X per repetition (default 0)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.frequency_penalty = v; })},
        {.names = {"-s", "--seed"}, .metavar = "S", .scope = both, .group = Group::Sampling,
         .help = "random seed; -1 = random (default)",
         .apply = integer(-1, INT64_MAX, [](Settings& s, int64_t v) {
             s.gen.sampling.seed = v < 0 ? kRandomSeed : (uint64_t)v;
         }),
         .label = "--seed"},
        {.names = {"--typical"}, .metavar = "P", .scope = both, .group = Group::Sampling,
         .help = "locally typical sampling; 1 = off (default 1)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.typical_p = v; })},
        {.names = {"--top-nsigma"}, .metavar = "N", .scope = both, .group = Group::Sampling,
         .help = "keep logits within N standard deviations of the best; -1 = off",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.top_n_sigma = v; })},
        {.names = {"--xtc-probability"}, .metavar = "P", .scope = both, .group = Group::Sampling,
         .help = "XTC: chance per token of dropping the top choices (default 0)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.xtc_probability = v; })},
        {.names = {"--xtc-threshold"}, .metavar = "P", .scope = both, .group = Group::Sampling,
         .help = "XTC: probability from which a token is a top choice (default 0.1)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.xtc_threshold = v; })},
        {.names = {"--mirostat"}, .metavar = "N", .scope = both, .group = Group::Sampling,
         .help = "mirostat 1 or 2 instead of top-k/top-p/min-p; 0 = off (default)",
         .apply = integer(0, 2, [](Settings& s, int64_t v) {
             s.gen.sampling.mirostat = (int32_t)v;
         })},
        {.names = {"--mirostat-lr"}, .metavar = "ETA", .scope = both, .group = Group::Sampling,
         .help = "mirostat learning rate (default 0.1)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.mirostat_eta = v; })},
        {.names = {"--mirostat-ent"}, .metavar = "TAU", .scope = both, .group = Group::Sampling,
         .help = "mirostat target entropy (default 5.0)",
         .apply = finite([](Settings& s, float v) { s.gen.sampling.mirostat_tau = v; })},
        {.names = {"--samplers"}, .metavar = "LIST", .scope = both, .group = Group::Sampling,
         .help = "stage order, ';'-separated: penalties;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;"
                 "temperature",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             return stage_order(a.value, false, &s.gen.sampling, err);
         }},
        // (after --samplers: its order replaces that one)
        {.names = {"--sampling-seq", "--sampler-seq"}, .metavar = "CODES",
         .scope = both, .group = Group::Sampling,
         .help = "stage order as letters, e.g. ekypmxt",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             return stage_order(a.value, true, &s.gen.sampling, err);
         }},
        {.names = {"-l", "--logit-bias"}, .metavar = "ID(+|-)BIAS",
         .scope = both, .group = Group::Sampling,
         .help = "add BIAS to token ID's logit, e.g. 15043+1 or 15043-inf (several: "
                 "comma-separated)",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             return parse_logit_bias(a.value, &s.gen.sampling, err);
         }},
        {.names = {"--dry-multiplier"}, .metavar = "X", .scope = both, .group = Group::Sampling,
         .help = "refused unless 0: DRY is not implemented",
         .apply = [](const Arg& a, Settings&, std::string* err) {
             float dry = 0.0f;
             if (!a.finite(&dry, err)) return false;
             if (dry == 0.0f) return true;
             *err = "--dry-multiplier: DRY sampling is not implemented (use --repeat-penalty, "
                    "--presence-penalty or --frequency-penalty)";
             return false;
         }},

        // ---- grammars: one of them ----
        {.names = {"--grammar"}, .metavar = "GBNF", .scope = both, .group = Group::Grammar,
         .help = "constrain the output to this grammar (llama.cpp's GBNF)",
         .apply = grammar_source("--grammar")},
        {.names = {"--grammar-file"}, .metavar = "FILE", .scope = both, .group = Group::Grammar,
         .help = "constrain the output to the grammar in FILE",
         .apply = grammar_source("--grammar-file")},
        {.names = {"-j", "--json-schema"}, .metavar = "JSON",
         .scope = both, .group = Group::Grammar,
         .help = "constrain the output to JSON matching this schema",
         .apply = grammar_source("--json-schema")},
        {.names = {"-jf", "--json-schema-file"}, .metavar = "FILE",
         .scope = both, .group = Group::Grammar,
         .help = "constrain the output to JSON matching the schema in FILE",
         .apply = grammar_source("--json-schema-file")},

        // ---- run's chat turn ----
        {.names = {"--chat"}, .scope = kRun, .group = Group::Chat,
         .help = "wrap the prompt in the model's chat format and print the reply",
         .apply = set_flag([](Settings& s) { s.run.chat = true; })},
        {.names = {"--system", "-sys"}, .metavar = "TEXT", .scope = kRun, .group = Group::Chat,
         .help = "system message for --chat",
         .apply = store([](Settings& s, const std::string& v) { s.run.system = v; })},
        {.names = {"--chat-template-kwargs"}, .metavar = "JSON",
         .scope = kRun, .group = Group::Chat,
         .help = "further variables for the model's chat template, e.g. "
                 "'{\"enable_thinking\":false}'",
         .apply = store([](Settings& s, const std::string& v) { s.run.chat_template_kwargs = v; })},
        {.names = {"--jinja"}, .scope = kRun, .group = Group::Chat,
         .help = "render the model's own chat template (the default with --chat)"},
        {.names = {"--chat-template-file"}, .metavar = "FILE", .scope = kRun, .group = Group::Chat,
         .help = "a Jinja chat template to use instead of the model's (for a file whose own is "
                 "wrong)",
         .apply = store([](Settings& s, const std::string& v) { s.run.chat_template_file = v; })},

        // ---- serve's chat templates and reasoning ----
        {.names = {"--chat-template"}, .metavar = "NAME|JINJA",
         .scope = kServe, .group = Group::Chat,
         .help = "chat template: a llama.cpp built-in name (chatml, llama3, gemma, llama2, "
                 "mistral-v7, phi3, phi4, command-r, deepseek3, ...: the error lists them) or "
                 "Jinja source (default: the model's)",
         .apply = chat_template_option},
        // (after --chat-template: the file's text wins)
        {.names = {"--chat-template-file"}, .metavar = "FILE",
         .scope = kServe, .group = Group::Chat,
         .help = "chat template from a Jinja file",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             if (read_text_file(a.value, &s.server.chat_template)) return true;
             *err = "cannot read the chat template " + a.value;
             return false;
         }},
        {.names = {"--chat-template-kwargs"}, .metavar = "JSON",
         .scope = kServe, .group = Group::Chat,
         .help = "default template variables, e.g. '{\"enable_thinking\":false}'",
         .apply = store([](Settings& s, const std::string& v) {
             s.server.chat_template_kwargs = v;
         })},
        {.names = {"--jinja"}, .scope = kServe, .group = Group::Chat,
         .help = "render the model's Jinja chat template (the default)"},
        {.names = {"--no-jinja"}, .scope = kServe, .group = Group::Chat,
         .help = "accepted (templates are rendered with Jinja)"},
        {.names = {"--reasoning-format"}, .metavar = "auto|deepseek|none",
         .scope = kServe, .group = Group::Chat,
         .help = "a thinking model's <think> text: as reasoning_content (auto, deepseek; the "
                 "default) or left in the content (none)",
         .apply = takes({"auto", "deepseek", "none", "deepseek-legacy"}, "auto, deepseek or none",
                        [](Settings& s, const std::string& v) {
                            s.server.reasoning = v != "none";
                        })},
        {.names = {"-rea", "--reasoning"}, .metavar = "on|off|auto",
         .scope = kServe, .group = Group::Chat,
         .help = "thinking: the templates' enable_thinking is true (on, auto: the default) or "
                 "false (off)",
         .apply = takes({"on", "auto", "true", "1", "enabled", "off", "false", "0", "disabled"},
                        "on, off or auto",
                        [](Settings& s, const std::string& v) {
                            s.server.enable_thinking =
                                v != "off" && v != "false" && v != "0" && v != "disabled";
                        }),
         .label = "--reasoning"},
        {.names = {"--reasoning-budget"}, .metavar = "N", .scope = kServe, .group = Group::Chat,
         .help = "tokens a thinking block may take before its end (</think>) is forced and the "
                 "answer follows: -1 no limit (the default), 0 no thinking (as --reasoning off)",
         .apply = integer(-1, INT32_MAX, [](Settings& s, int64_t v) {
             s.server.reasoning_budget = (int32_t)v;
         })},
        {.names = {"--reasoning-effort"}, .metavar = "LEVEL", .scope = kServe, .group = Group::Chat,
         .help = "the effort of a request that gives no reasoning_effort: none or minimal turn "
                 "thinking off; low, medium, high, xhigh, max turn it on and go to the template "
                 "as reasoning_effort (default: the template's)",
         .apply = takes({"default", "none", "minimal", "low", "medium", "high", "xhigh", "max"},
                        "default, none, minimal, low, medium, high, xhigh or max",
                        [](Settings& s, const std::string& v) {
                            s.server.reasoning_effort = v == "default" ? "" : v;
                        })},
        {.names = {"--no-prefill-assistant"}, .scope = kServe, .group = Group::Chat,
         .help = "an assistant message last is a finished turn (default: the reply continues it)",
         .apply = set_flag([](Settings& s) { s.server.prefill_assistant = false; })},
    };
}
// clang-format on

}  // namespace edgellm::cli
