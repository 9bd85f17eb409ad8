// edgellm run -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]
//             [-t N] [-c CTX] [--chat] [--system TEXT] ...
// Streams the continuation (or, with --chat, the assistant's reply) to stdout and ends
// with one line of timings on stderr.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "args.h"
#include "commands.h"
#include "edgellm/cpu.h"
#include "edgellm/chat.h"
#include "edgellm/json_schema.h"
#include "edgellm/session.h"

namespace edgellm::cli {

void add_sampling_options(ArgParser& p) {
    p.option({"--temp", "--temperature"}, "T", "temperature; 0 = greedy (default 0.8)");
    p.option({"--top-k"}, "K", "keep the K most likely tokens; 0 = off (default 40)");
    p.option({"--top-p"}, "P", "nucleus sampling; 1 = off (default 0.95)");
    p.option({"--min-p"}, "P", "drop tokens below P x the best; 0 = off (default 0.05)");
    p.option({"--repeat-penalty"}, "X", "penalise repeated tokens; 1 = off (default 1.0)");
    p.option({"--repeat-last-n"}, "N", "tokens the penalties look back on; -1 = all (default 64)");
    p.option({"--presence-penalty"}, "X", "subtract X once from repeated tokens (default 0)");
    p.option({"--frequency-penalty"}, "X", "subtract X per repetition (default 0)");
    p.option({"-s", "--seed"}, "S", "random seed; -1 = random (default)");
    p.option({"--typical"}, "P", "locally typical sampling; 1 = off (default 1)");
    p.option({"--top-nsigma"}, "N", "keep logits within N standard deviations of the best; -1 = off");
    p.option({"--xtc-probability"}, "P", "XTC: chance per token of dropping the top choices (default 0)");
    p.option({"--xtc-threshold"}, "P", "XTC: probability from which a token is a top choice (default 0.1)");
    p.option({"--mirostat"}, "N", "mirostat 1 or 2 instead of top-k/top-p/min-p; 0 = off (default)");
    p.option({"--mirostat-lr"}, "ETA", "mirostat learning rate (default 0.1)");
    p.option({"--mirostat-ent"}, "TAU", "mirostat target entropy (default 5.0)");
    p.option({"--samplers"}, "LIST",
             "stage order, ';'-separated: penalties;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature");
    p.option({"--sampling-seq", "--sampler-seq"}, "CODES", "stage order as letters, e.g. ekypmxt");
    p.option({"-l", "--logit-bias"}, "ID(+|-)BIAS",
             "add BIAS to token ID's logit, e.g. 15043+1 or 15043-inf (several: comma-separated)");
    p.option({"--dry-multiplier"}, "X", "refused unless 0: DRY is not implemented");
}

void add_grammar_options(ArgParser& p) {
    p.option({"--grammar"}, "GBNF", "constrain the output to this grammar (llama.cpp's GBNF)");
    p.option({"--grammar-file"}, "FILE", "constrain the output to the grammar in FILE");
    p.option({"-j", "--json-schema"}, "JSON", "constrain the output to JSON matching this schema");
    p.option({"-jf", "--json-schema-file"}, "FILE",
             "constrain the output to JSON matching the schema in FILE");
}

bool read_grammar_options(const ArgParser& p, std::shared_ptr<const Grammar>* out,
                          std::string* err) {
    out->reset();
    int given = 0;
    for (const char* name : {"--grammar", "--grammar-file", "--json-schema", "--json-schema-file"})
        given += p.has(name);
    if (given == 0) return true;
    if (given > 1) {
        *err = "give only one of --grammar, --grammar-file, --json-schema, --json-schema-file";
        return false;
    }
    auto read = [&](const std::string& flag, std::string* text) {
        const std::string path = *p.get(flag);
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            *err = flag + ": cannot read " + path;
            return false;
        }
        text->assign(std::istreambuf_iterator<char>(in), {});
        return true;
    };
    std::string text, where;
    bool schema = false;
    if (p.has("--grammar")) {
        text = *p.get("--grammar");
        where = "--grammar";
    } else if (p.has("--grammar-file")) {
        if (!read("--grammar-file", &text)) return false;
        where = "--grammar-file " + *p.get("--grammar-file");
    } else if (p.has("--json-schema-file")) {
        if (!read("--json-schema-file", &text)) return false;
        where = "--json-schema-file " + *p.get("--json-schema-file");
        schema = true;
    } else {
        text = *p.get("--json-schema");
        where = "--json-schema";
        schema = true;
    }
    *out = compile_grammar_text(text, schema, where, err);
    return *out != nullptr;
}

std::shared_ptr<const Grammar> compile_grammar_text(const std::string& text, bool schema,
                                                    const std::string& where, std::string* err) {
    std::string gbnf = text;
    if (schema) {
        const auto j = nlohmann::ordered_json::parse(text, nullptr, false);
        if (j.is_discarded()) {
            *err = where + ": not valid JSON";
            return nullptr;
        }
        SchemaRefusal why;
        auto g = json_schema_to_gbnf(j, &why);
        if (!g) {
            *err = where + ": " + why.message + (why.path.empty() ? "" : " (at " + why.path + ")");
            return nullptr;
        }
        gbnf = std::move(*g);
    }
    auto g = Grammar::parse(gbnf);
    if (!g) {
        *err = where + ": " + g.error();
        return nullptr;
    }
    return std::move(*g);
}

void add_cpu_options(ArgParser& p) {
    p.option({"-C", "--cpu-mask"}, "HEX", "pin threads to the CPUs of this mask (e.g. 0xF0)");
    p.option({"--cpus", "--cpu-range", "-Cr"}, "LIST",
             "pin threads to these CPUs (e.g. 4-7 or 0,2)");
    p.flag({"--mlock"}, "keep the weights in RAM (mlock)");
    p.flag({"--no-warmup"}, "do not read every weight page before the first request");
    p.flag({"-nr", "--no-repack"},
           "keep the weights in the file's layout (no repacking for decode at load)");
    p.option({"--repack-cache"}, "DIR",
             "keep the repacked weights in DIR, so that the next start maps them instead of "
             "repacking (default: ~/.cache/edgellm/repacked for models with 64 MiB or more of "
             "them; a DIR given: for every model)");
    p.flag({"--no-repack-cache"}, "repack at every start, keep no file of the repacked weights");
    p.flag({"--swa-full"},
           "sliding-window layers keep the whole context, not a ring of window + batch cells");
}

LoadOptions load_options(const ArgParser& p) {
    LoadOptions o;
    o.repack = !p.has("--no-repack");
    if (p.has("--no-repack-cache")) return o;
    if (auto d = p.get("--repack-cache")) {
        o.repack_cache_dir = *d;
    } else {
        o.repack_cache_dir = repack_cache_dir().string();
        o.repack_cache_min_bytes = (size_t)64 << 20;
    }
    return o;
}

bool read_cpu_options(const ArgParser& p, ContextParams* cp, std::string* err) {
    cp->swa_full = p.has("--swa-full");
    if (p.has("--repack-cache") && p.has("--no-repack")) {
        *err = "--repack-cache keeps repacked weights, and --no-repack repacks none: give one";
        return false;
    }
    if (auto m = p.get("--cpu-mask")) {
        auto cpus = parse_cpu_mask(*m);
        if (!cpus) {
            *err = "--cpu-mask must be a hex mask like 0xF0, got \"" + *m + "\"";
            return false;
        }
        cp->cpus = *cpus;
    }
    if (auto l = p.get("--cpus")) {
        auto cpus = parse_cpu_list(*l);
        if (!cpus) {
            *err = "--cpus must be a list like 4-7 or 0,2, got \"" + *l + "\"";
            return false;
        }
        cp->cpus = *cpus;
    }
    return true;
}

bool prepare_model(const ArgParser& p, const Model& m, std::string* err) {
    // (a cache refused is worth a line, one mapped as it was is not; a missing one is
    // written before anything is measured or generated, for the next start)
    if (m.repack_cache() == Model::RepackCache::Refused)
        std::fprintf(stderr, "edgellm: %s\n", m.repack_note().c_str());
    if (const std::string note = m.save_repack_cache(); !note.empty())
        std::fprintf(stderr, "edgellm: %s\n", note.c_str());
    if (p.has("--mlock")) {
        auto r = m.lock_memory();
        if (!r) {
            *err = r.error();
            return false;
        }
    }
    if (!p.has("--no-warmup")) m.warm_up();
    return true;
}

namespace {

bool get_float(const ArgParser& p, const std::string& name, float* out, std::string* err) {
    const auto v = p.get(name);
    if (!v) return true;
    char* end = nullptr;
    const float x = std::strtof(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !std::isfinite(x)) {
        *err = name + " must be a number, got \"" + *v + "\"";
        return false;
    }
    *out = x;
    return true;
}

}  // namespace

bool read_sampling_options(const ArgParser& p, SamplerParams* s, std::string* err) {
    int64_t top_k = s->top_k, last_n = s->repeat_last_n, seed = -1;
    if (!get_float(p, "--temp", &s->temperature, err) || !get_float(p, "--top-p", &s->top_p, err) ||
        !get_float(p, "--min-p", &s->min_p, err) ||
        !get_float(p, "--repeat-penalty", &s->repeat_penalty, err) ||
        !get_float(p, "--presence-penalty", &s->presence_penalty, err) ||
        !get_float(p, "--frequency-penalty", &s->frequency_penalty, err))
        return false;
    if (!p.get_int("--top-k", -1, 1 << 30, &top_k, err) ||
        !p.get_int("--repeat-last-n", -1, 1 << 30, &last_n, err) ||
        !p.get_int("--seed", -1, INT64_MAX, &seed, err)) {
        return false;
    }
    s->top_k = (int32_t)top_k;
    s->repeat_last_n = (int32_t)last_n;
    s->seed = seed < 0 ? kRandomSeed : (uint64_t)seed;
    int64_t mirostat = 0;
    float dry = 0.0f;
    if (!get_float(p, "--typical", &s->typical_p, err) ||
        !get_float(p, "--top-nsigma", &s->top_n_sigma, err) ||
        !get_float(p, "--xtc-probability", &s->xtc_probability, err) ||
        !get_float(p, "--xtc-threshold", &s->xtc_threshold, err) ||
        !get_float(p, "--mirostat-lr", &s->mirostat_eta, err) ||
        !get_float(p, "--mirostat-ent", &s->mirostat_tau, err) ||
        !get_float(p, "--dry-multiplier", &dry, err) ||
        !p.get_int("--mirostat", 0, 2, &mirostat, err))
        return false;
    s->mirostat = (int32_t)mirostat;
    if (dry != 0.0f) {
        *err = "--dry-multiplier: DRY sampling is not implemented (use --repeat-penalty, "
               "--presence-penalty or --frequency-penalty)";
        return false;
    }
    if (auto list = p.get("--samplers")) {
        s->order.clear();
        size_t at = 0;
        while (at <= list->size()) {
            size_t end = list->find_first_of(";,", at);
            if (end == std::string::npos) end = list->size();
            const std::string name = list->substr(at, end - at);
            at = end + 1;
            if (name.empty()) continue;
            const auto k = sampler_stage_from_name(name);
            if (!k || *k == SamplerStageKind::Dry) {
                *err = "--samplers: unknown or unsupported stage \"" + name + "\"";
                return false;
            }
            s->order.push_back(*k);
        }
    }
    if (auto seq = p.get("--sampling-seq")) {
        s->order.clear();
        for (char c : *seq) {
            const auto k = sampler_stage_from_letter(c);
            if (!k || *k == SamplerStageKind::Dry) {
                *err = std::string("--sampling-seq: unknown or unsupported stage letter '") + c + "'";
                return false;
            }
            s->order.push_back(*k);
        }
    }
    if (auto lb = p.get("--logit-bias")) {
        size_t at = 0;
        while (at <= lb->size()) {
            size_t end = lb->find(',', at);
            if (end == std::string::npos) end = lb->size();
            const std::string item = lb->substr(at, end - at);
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
    }
    return true;
}

int cmd_run(const std::vector<std::string>& args) {
    ArgParser p("run", "edgellm run -m MODEL -p PROMPT [options]");
    p.option({"-m", "--model"}, "FILE",
             "GGUF model (default: the model scripts/fetch-models.sh installed)");
    p.option({"-p", "--prompt"}, "TEXT", "prompt (with --chat: the user's message)");
    p.option({"-f", "--file"}, "FILE", "read the prompt from a file");
    p.option({"-n", "--n-predict"}, "N",
             "most tokens to generate; -1 = until the end (default -1)");
    p.option({"-c", "--ctx-size"}, "N", "context size (default: training context, at most 4096)");
    p.option({"-t", "--threads"}, "N", "threads (default: all cores)");
    p.option({"-b", "--batch-size"}, "N", "prompt tokens per forward step (default 512)");
    add_kv_options(p);
    p.flag({"--chat"}, "wrap the prompt in the model's chat format and print the reply");
    p.option({"--system", "-sys"}, "TEXT", "system message for --chat");
    p.option({"--chat-template-kwargs"}, "JSON",
             "further variables for the model's chat template, e.g. '{\"enable_thinking\":false}'");
    p.flag({"--jinja"}, "render the model's own chat template (the default with --chat)");
    p.option({"--chat-template-file"}, "FILE",
             "a Jinja chat template to use instead of the model's (for a file whose own is wrong)");
    p.option({"-r", "--reverse-prompt", "--stop"}, "TEXT", "stop when this text appears");
    p.flag({"--ignore-eos"}, "keep generating past end-of-sequence tokens");
    p.flag({"--no-bos"}, "do not add BOS even if the model asks for it");
    p.option({"--kernels"}, "NAME", "kernel set (default: the best that is not opt-in; amx-bf16 is opt-in)");
    add_sampling_options(p);
    add_grammar_options(p);
    add_cpu_options(p);
    if (auto done = parse_command_line(p, args)) return *done;
    std::string err;
    if (!p.positional().empty()) return fail("run", "unexpected argument " + p.positional()[0], 2);
    std::shared_ptr<const Grammar> grammar;
    if (!read_grammar_options(p, &grammar, &err)) return fail("run", err, 2);
    auto model_path = model_path_or_default(p);
    if (!model_path) return fail("run", model_path.error(), 2);
    if (p.has("-p") == p.has("-f"))
        return fail("run", "give exactly one of -p PROMPT or -f FILE", 2);
    std::string prompt;
    if (p.has("-p")) {
        prompt = *p.get("-p");
    } else {
        std::ifstream in(*p.get("-f"), std::ios::binary);
        if (!in) return fail("run", *p.get("-f") + ": cannot read");
        prompt.assign(std::istreambuf_iterator<char>(in), {});
    }
    int64_t n_predict = -1, n_ctx = 0, threads = 0, n_batch = 512;
    if (!p.get_int("-n", -1, 1 << 30, &n_predict, &err) ||
        !p.get_int("-c", 0, 1 << 24, &n_ctx, &err) || !p.get_int("-t", 1, 1024, &threads, &err) ||
        !p.get_int("-b", 1, 1 << 20, &n_batch, &err))
        return fail("run", err, 2);
    GenerateParams gp;
    gp.n_predict = (int32_t)n_predict;
    if (!read_sampling_options(p, &gp.sampling, &err)) return fail("run", err, 2);
    if (auto s = p.get("--stop")) gp.stop.push_back(*s);
    gp.ignore_eos = p.has("--ignore-eos");
    TensorType type_k = TensorType::F16, type_v = TensorType::F16;
    {
        std::string why;
        if (!read_kv_options(p, &type_k, &type_v, &why)) return fail("run", why, 2);
    }
    err = choose_kernels(p.get_or("--kernels", ""));
    if (!err.empty()) return fail("run", err, 2);

    const auto t_load = std::chrono::steady_clock::now();
    auto model = Model::load(*model_path, load_options(p));
    if (!model) return fail("run", model.error());
    auto tok = Tokenizer::load((*model)->file());
    if (!tok) return fail("run", tok.error());
    for (const auto& [id, bias] : gp.sampling.logit_bias)
        if (id >= (*tok)->n_vocab())
            return fail("run", "--logit-bias: token " + std::to_string(id) +
                                   " is outside the vocabulary of " + std::to_string((*tok)->n_vocab()), 2);
    if (grammar) {
        gp.sampling.grammar = grammar;
        gp.sampling.grammar_vocab = GrammarVocab::build(**tok);
    }
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.type_k = type_k;
    cp.type_v = type_v;
    cp.n_threads = (int)threads;
    if (!read_cpu_options(p, &cp, &err)) return fail("run", err, 2);
    if (!prepare_model(p, **model, &err)) return fail("run", err);
    auto ctx = Context::create(**model, cp);
    if (!ctx) return fail("run", ctx.error());
    if (!(*ctx)->params().cpus.empty())
        std::fprintf(stderr, "edgellm run: %s\n", (*ctx)->affinity_report().c_str());
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_load)
            .count();

    std::string text = prompt;
    bool parse_special = false;
    bool add_bos = !p.has("--no-bos");
    if (p.has("--chat")) {
        std::vector<ChatMessage> msgs;
        if (auto sys = p.get("--system")) msgs.push_back({"system", *sys, ""});
        msgs.push_back({"user", prompt, ""});
        std::string tmpl;
        if (auto file = p.get("--chat-template-file")) {
            std::ifstream in(*file, std::ios::binary);
            if (!in) return fail("run", "cannot read the chat template " + *file, 2);
            tmpl.assign(std::istreambuf_iterator<char>(in), {});
        }
        const ChatPrompt cp = chat_prompt((*model)->file(), **tok, msgs, true,
                                          p.get("--chat-template-kwargs").value_or(""), "", tmpl);
        if (!cp.warning.empty())
            std::fprintf(stderr, "edgellm run: warning: %s; using the %s format\n",
                         cp.warning.c_str(), cp.how.c_str());
        text = cp.text;
        parse_special = true;
        if (cp.bos_in_text) add_bos = false;  // the template wrote it
    }
    const auto ids = (*tok)->tokenize(text, add_bos, parse_special);
    if (!p.has("--chat")) {
        std::fwrite(prompt.data(), 1, prompt.size(), stdout);
        std::fflush(stdout);
    }
    Session session(**model, **tok, **ctx);
    auto res = session.generate(ids, gp, [](std::string_view s) {
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
        return true;
    });
    std::printf("\n");
    std::fflush(stdout);
    if (!res) return fail("run", res.error());
    std::fprintf(
        stderr,
        "edgellm run: load %.0f ms | prompt %lld tokens, %.1f ms, %.2f tokens/s | generated "
        "%lld tokens, %.1f ms, %.2f tokens/s | stop: %s\n",
        load_ms, (long long)res->n_prompt, res->prompt_ms, res->prompt_per_second(),
        (long long)res->n_generated, res->generate_ms, res->generate_per_second(),
        stop_reason_name(res->stop));
    return 0;
}

}  // namespace edgellm::cli
