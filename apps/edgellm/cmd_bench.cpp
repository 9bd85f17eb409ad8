// edgellm bench -m MODEL [-p 512] [-n 128] [-t 1,2] [-r 3] [-c CTX] [--kv-type T] [-o md|json|csv]
// In the spirit of llama-bench: prompt processing (pp) and generation (tg) tokens/s, mean
// and standard deviation over the repetitions after a warm-up. Also the weight-read
// bandwidth each tg row achieves and its share of the machine's measured read bandwidth.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include <fstream>

#include "commands.h"
#include "edgellm/chat.h"
#include "edgellm/grammar.h"
#include "edgellm/json_schema.h"
#include "edgellm/model.h"
#include "edgellm/session.h"
#include "edgellm/speculative.h"
#include "edgellm/tokenizer.h"
#include "edgellm/kernels.h"

namespace edgellm::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Streaming read bandwidth in GB/s with n threads over a buffer far larger than the caches:
// each thread sums its share with independent accumulators; the best of a few passes.
double measure_read_bandwidth(int n_threads) {
    const size_t bytes = (size_t)1 << 30;
    const size_t n = bytes / sizeof(uint64_t);
    std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
    for (size_t i = 0; i < n; ++i) buf[i] = i;  // touch every page
    std::atomic<uint64_t> sink{0};
    double best = 0.0;
    for (int pass = 0; pass < 3; ++pass) {
        const auto t0 = Clock::now();
        std::vector<std::thread> th;
        for (int k = 0; k < n_threads; ++k)
            th.emplace_back([&, k] {
                const size_t b = n / n_threads * k,
                             e = k + 1 == n_threads ? n : n / n_threads * (k + 1);
                uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
                for (size_t i = b; i + 4 <= e; i += 4) {
                    a0 += buf[i];
                    a1 += buf[i + 1];
                    a2 += buf[i + 2];
                    a3 += buf[i + 3];
                }
                sink += a0 ^ a1 ^ a2 ^ a3;
            });
        for (auto& t : th) t.join();
        best = std::max(best, (double)bytes / seconds_since(t0) / 1e9);
    }
    return best;
}

struct Row {
    std::string test;  // "pp512", "tg128"
    int n_prompt = 0, n_gen = 0, n_threads = 0;
    std::vector<double> samples;  // tokens/s
    double avg = 0, stddev = 0, median = 0;
    double bw_gbps = 0, bw_share = 0;       // tg rows only
    double int8_gmacs = 0, int8_share = 0;  // pp rows: the matrices' multiply-adds per second
};

void finish(Row& r) {
    double s = 0;
    for (double x : r.samples) s += x;
    r.avg = s / (double)r.samples.size();
    double v = 0;
    for (double x : r.samples) v += (x - r.avg) * (x - r.avg);
    r.stddev = r.samples.size() > 1 ? std::sqrt(v / (double)(r.samples.size() - 1)) : 0.0;
    std::vector<double> sorted = r.samples;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    r.median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if ((unsigned char)c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
            continue;
        }
        o += c;
    }
    return o;
}

double median_of(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// A model with its tokenizer, loaded and prepared as the flags ask (--no-repack, --mlock,
// the warm-up read); false with the reason.
struct LoadedModel {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
};
bool load_model(const Settings& s, const std::string& path, LoadedModel* out, std::string* err) {
    auto m = Model::load(path, load_options(s));
    if (!m) {
        *err = m.error();
        return false;
    }
    if (!prepare_model(s, **m, err)) return false;
    auto t = Tokenizer::load((*m)->file());
    if (!t) {
        *err = t.error();
        return false;
    }
    out->model = std::move(*m);
    out->tok = std::move(*t);
    return true;
}

// The context of the constrained and speculative tests: the KV flags, the CPUs, --swa-full.
ContextParams test_context(const Settings& s, int64_t n_ctx, int threads) {
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_threads = threads;
    cp.type_k = s.ctx.type_k;
    cp.type_v = s.ctx.type_v;
    cp.swa_full = s.ctx.swa_full;
    cp.cpus = s.ctx.cpus;
    return cp;
}

// bench --grammar FILE / --json-schema FILE: decode with the grammar beside decode without
// it, on the same model, prompt and threads. Each repetition starts from an empty cache, so
// the first-token times include the prompt; the constrained one also compiles the grammar
// (and the schema) and builds its first state, which is what a request pays.
int bench_constrained(const Settings& s, const std::string& model_path, int64_t n_gen, int64_t reps,
                      int threads) {
    const bool schema = s.bench.schema_file.has_value();
    const std::string file = schema ? *s.bench.schema_file : *s.bench.grammar_file;
    std::ifstream in(file, std::ios::binary);
    if (!in) return fail("bench", "cannot read " + file, 2);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    // Compile once up front to report errors before loading the model.
    auto compile = [&](std::string* err) { return compile_grammar_text(text, schema, file, err); };
    std::string err;
    if (!compile(&err)) return fail("bench", err, 2);

    LoadedModel lm;
    if (!load_model(s, model_path, &lm, &err)) return fail("bench", err);
    auto& model = lm.model;
    auto& tok = lm.tok;
    auto ctx = Context::create(*model, test_context(s, 4096, threads));
    if (!ctx) return fail("bench", ctx.error());
    const auto t_vocab = Clock::now();
    auto vocab = GrammarVocab::build(*tok);
    const double vocab_ms = seconds_since(t_vocab) * 1000.0;

    const std::string user =
        s.bench.prompt.value_or(schema ? "Describe a user of our app as a JSON object."
                                       : "北京明天天气怎么样？用 JSON 回答，包含 tool 和 args。");
    const ChatPrompt chat = chat_prompt(model->file(), *tok, {{"user", user}}, true);
    const auto prompt = tok->tokenize(chat.text, !chat.bos_in_text, true);
    Session session(*model, *tok, **ctx);

    struct Run {
        std::vector<double> tps, first_ms;
        int64_t tokens = 0;
        std::string text;
    } free_run, constrained_run;
    std::vector<double> compile_ms;
    for (int64_t rep = -1; rep < reps; ++rep) {  // rep -1 warms up
        for (int which = 0; which < 2; ++which) {
            session.clear();
            GenerateParams gp;
            gp.n_predict = (int32_t)n_gen;
            gp.sampling.temperature = 0.0f;
            const auto t0 = Clock::now();
            if (which == 1) {
                gp.sampling.grammar = compile(&err);
                gp.sampling.grammar_vocab = vocab;
                if (rep >= 0) compile_ms.push_back(seconds_since(t0) * 1000.0);
            } else {
                gp.ignore_eos = true;  // as many tokens as asked
            }
            auto r = session.generate(prompt, gp, nullptr);
            if (!r) return fail("bench", r.error());
            Run& run = which ? constrained_run : free_run;
            const double first = seconds_since(t0) * 1000.0 - r->generate_ms;
            std::fprintf(
                stderr, "bench: %s %s %lld/%lld: %lld tokens, %.2f tokens/s, first token %.1f ms\n",
                which ? "constrained" : "free", rep < 0 ? "warm-up" : "run", (long long)rep + 1,
                (long long)reps, (long long)r->n_generated, r->generate_per_second(), first);
            if (rep < 0) continue;
            run.tps.push_back(r->generate_per_second());
            run.first_ms.push_back(first);
            run.tokens = r->n_generated;
            run.text = r->text;
        }
    }
    const double free_tps = median_of(free_run.tps), con_tps = median_of(constrained_run.tps);
    std::printf("model: %s; threads: %d; kernels: %s\n", model_path.c_str(),
                (*ctx)->params().n_threads, active_kernel_set().c_str());
    std::printf("%s: %s; vocabulary for grammars built in %.1f ms (once per model)\n",
                schema ? "JSON schema" : "grammar", file.c_str(), vocab_ms);
    std::printf("prompt: %zu tokens; median of %lld runs after a warm-up, greedy\n\n",
                prompt.size(), (long long)reps);
    std::printf(
        "| decode | tokens | t/s (median) | first token ms (median) | compile ms (median) |\n");
    std::printf("|---|---:|---:|---:|---:|\n");
    std::printf("| free | %lld | %.2f | %.1f | |\n", (long long)free_run.tokens, free_tps,
                median_of(free_run.first_ms));
    std::printf("| constrained | %lld | %.2f | %.1f | %.2f |\n", (long long)constrained_run.tokens,
                con_tps, median_of(constrained_run.first_ms), median_of(compile_ms));
    std::printf("\nconstrained / free decode: %.3f; first token: %+.1f ms\n",
                free_tps > 0 ? con_tps / free_tps : 0.0,
                median_of(constrained_run.first_ms) - median_of(free_run.first_ms));
    std::printf("constrained output: %s\n", constrained_run.text.c_str());
    return 0;
}

// bench --draft MODEL / --spec-type ngram: speculative decoding beside plain decoding, on
// prompt classes a user sends (chat in Chinese and English, a code edit, JSON, quoting a
// given text), greedy, the same model and threads. Each repetition starts from empty caches
// (the draft model's prompt evaluation counts in its decode time); each class and mode has
// its own AdaptiveDrafter, kept across repetitions as a slot keeps it across requests.
struct SpecPrompt {
    const char* name;
    const char* system;
    const char* user;
};

const SpecPrompt kSpecPrompts[] = {
    {"chat (zh)", "你是车载助手，回答简短口语化。", "今晚吃什么好"},
    {"chat (en)", "You are a helpful in-car assistant. Answer briefly.",
     "What should I cook tonight? Give me three quick ideas."},
    {"code edit", "You are a coding assistant.",
     "Rename the variable `total` to `acc` in this function and return the whole function, "
     "nothing else:\n```python\ndef summarize(orders):\n    total = 0\n    count = 0\n"
     "    for order in orders:\n        if order.status != \"paid\":\n            continue\n"
     "        total += order.amount\n        count += 1\n    if count == 0:\n"
     "        return {\"total\": 0, \"average\": 0}\n"
     "    return {\"total\": total, \"average\": total / count}\n```"},
    {"json", "You convert text to JSON.",
     "Turn this into a JSON array of objects with keys name, city and age, nothing else:\n"
     "Alice Zhang lives in Shanghai and is 34. Bob Li lives in Shenzhen and is 28. "
     "Carol Wang lives in Chengdu and is 41. David Chen lives in Hangzhou and is 25."},
    {"quote", "You answer from the given text.",
     "Repeat the following paragraph word for word, then stop:\n"
     "The navigation system recalculates the route whenever traffic conditions change. "
     "Drivers can choose between the fastest route, the shortest route, and a route that "
     "avoids toll roads. Voice guidance announces each turn two hundred meters in advance."},
};

int bench_speculative(const Settings& s, const std::string& model_path, int64_t n_gen, int64_t reps,
                      int threads) {
    std::string err;
    BenchSpeculation sc;
    if (!bench_speculation(s, &sc, &err)) return fail("bench", err, 2);
    LoadedModel lm;
    if (!load_model(s, model_path, &lm, &err)) return fail("bench", err);
    auto& model = lm.model;
    auto& tok = lm.tok;
    ContextParams cp = test_context(s, 2048, threads);
    cp.n_outputs = sc.n_max + 1;
    auto ctx = Context::create(*model, cp);
    if (!ctx) return fail("bench", ctx.error());
    LoadedModel draft;
    std::unique_ptr<Context> draft_ctx;
    std::unique_ptr<ModelDrafter> model_drafter;
    if (!sc.draft_model.empty()) {
        if (!load_model(s, sc.draft_model, &draft, &err))
            return fail("bench", "the draft model: " + err);
        const std::string why = draft_vocab_mismatch(*tok, *draft.tok);
        if (!why.empty())
            return fail("bench", "the draft model cannot draft for the model: " + why);
        ContextParams dcp = cp;
        dcp.n_outputs = 1;
        auto dc = Context::create(*draft.model, dcp);
        if (!dc) return fail("bench", dc.error());
        draft_ctx = std::move(*dc);
        model_drafter = std::make_unique<ModelDrafter>(*draft.model, *draft_ctx, 0, sc.p_min,
                                                       model->hparams().n_vocab);
        model_drafter->set_max_draft(sc.draft_n_max);
    }
    NgramDrafter ngram(NgramDrafter::kMinLookup, NgramDrafter::kMaxLookup, sc.ngram_n_max);
    struct Mode {
        std::string name;
        Drafter* drafter;
        int n_max;  // its most per step
    };
    std::vector<Mode> modes = {{"plain", nullptr, 0}};
    if (model_drafter) modes.push_back({"draft model", model_drafter.get(), sc.draft_n_max});
    if (sc.ngram) modes.push_back({"ngram", &ngram, sc.ngram_n_max});
    Session session(*model, *tok, **ctx);

    std::printf("model: %s; draft: %s; threads: %d; kernels: %s\n", model_path.c_str(),
                sc.draft_model.empty() ? "(none)" : sc.draft_model.c_str(),
                (*ctx)->params().n_threads, active_kernel_set().c_str());
    std::printf(
        "greedy, %lld tokens, median of %lld runs after a warm-up; drafts per step at "
        "most %d (draft model), %d (ngram), at least %d; --draft-p-min %.2f; draft length %s\n\n",
        (long long)n_gen, (long long)reps, sc.draft_n_max, sc.ngram_n_max, sc.n_min, sc.p_min,
        sc.adaptive ? "chosen per step from the measured accept rate and costs"
                    : "fixed (--spec-fixed)");
    std::string header = "| prompt | tokens | plain t/s |";
    std::string rule = "|---|---:|---:|";
    for (size_t m = 1; m < modes.size(); ++m) {
        header += " " + modes[m].name + " t/s | speed-up | accept rate | same text |";
        rule += "---:|---:|---:|---|";
    }
    std::vector<std::string> rows;
    for (const SpecPrompt& sp : kSpecPrompts) {
        const ChatPrompt chat =
            chat_prompt(model->file(), *tok, {{"system", sp.system}, {"user", sp.user}}, true);
        const auto prompt = tok->tokenize(chat.text, !chat.bos_in_text, true);
        std::vector<std::vector<double>> tps(modes.size());
        std::vector<int64_t> drafted(modes.size()), accepted(modes.size());
        std::vector<std::string> text(modes.size());
        int64_t tokens = 0;
        std::vector<std::unique_ptr<AdaptiveDrafter>> adaptive;
        for (size_t m = 0; m < modes.size(); ++m)
            adaptive.push_back(modes[m].drafter ? std::make_unique<AdaptiveDrafter>(
                                                      *modes[m].drafter, modes[m].n_max, sc.n_min)
                                                : nullptr);
        for (int64_t rep = -1; rep < reps; ++rep) {
            for (size_t m = 0; m < modes.size(); ++m) {
                session.clear();
                if (model_drafter) model_drafter->clear();
                GenerateParams gp;
                gp.n_predict = (int32_t)n_gen;
                gp.sampling.temperature = 0.0f;
                gp.spec.drafter = sc.adaptive && adaptive[m] ? adaptive[m].get() : modes[m].drafter;
                gp.spec.n_max = sc.n_max;
                gp.spec.n_min = sc.n_min;
                auto r = session.generate(prompt, gp, nullptr);
                if (!r) return fail("bench", r.error());
                const double t =
                    r->generate_ms > 0 ? 1000.0 * (double)r->n_generated / r->generate_ms : 0;
                std::fprintf(
                    stderr,
                    "bench: %s, %s, %s %lld/%lld: %lld tokens, %.2f t/s, drafted %lld, kept %lld\n",
                    sp.name, modes[m].name.c_str(), rep < 0 ? "warm-up" : "run", (long long)rep + 1,
                    (long long)reps, (long long)r->n_generated, t, (long long)r->n_drafted,
                    (long long)r->n_accepted);
                if (rep < 0) continue;
                tps[m].push_back(t);
                drafted[m] += r->n_drafted;
                accepted[m] += r->n_accepted;
                text[m] = r->text;
                tokens = r->n_generated;
            }
        }
        char cell[256];
        const double plain = median_of(tps[0]);
        std::snprintf(cell, sizeof cell, "| %s | %lld | %.2f |", sp.name, (long long)tokens, plain);
        std::string row = cell;
        for (size_t m = 1; m < modes.size(); ++m) {
            const double v = median_of(tps[m]);
            std::snprintf(
                cell, sizeof cell, " %.2f | %.2f× | %s | %s |", v, plain > 0 ? v / plain : 0.0,
                drafted[m] > 0
                    ? std::to_string((double)accepted[m] / (double)drafted[m]).substr(0, 4).c_str()
                    : "–",
                text[m] == text[0] ? "yes" : "NO");
            row += cell;
        }
        rows.push_back(row);
    }
    std::printf("%s\n%s\n", header.c_str(), rule.c_str());
    for (const std::string& r : rows) std::printf("%s\n", r.c_str());
    return 0;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
    Settings s;
    if (auto done = parse_options("bench", args, &s)) return *done;
    auto model_path = model_path_or_default(s);
    if (!model_path) return fail("bench", model_path.error(), 2);
    const BenchSettings& b = s.bench;
    const int64_t n_prompt = b.n_prompt, n_gen = b.n_gen, reps = b.reps, n_ctx = b.n_ctx,
                  depth = b.depth, n_batch = b.n_batch;
    std::vector<int> threads = b.threads;
    if (threads.empty()) threads.push_back((int)std::max(1u, std::thread::hardware_concurrency()));
    if (b.draft_model || b.spec_types) {
        if (threads.size() != 1) return fail("bench", "--draft / --spec-type take one -t", 2);
        if (std::string err = choose_kernels(s.kernels); !err.empty()) return fail("bench", err, 2);
        return bench_speculative(s, *model_path, n_gen, s.has("-r") ? reps : 3, threads[0]);
    }
    if (b.grammar_file || b.schema_file) {
        if (b.grammar_file && b.schema_file)
            return fail("bench", "give one of --grammar and --json-schema", 2);
        if (threads.size() != 1) return fail("bench", "--grammar / --json-schema take one -t", 2);
        if (std::string err = choose_kernels(s.kernels); !err.empty()) return fail("bench", err, 2);
        return bench_constrained(s, *model_path, n_gen, reps, threads[0]);
    }
    const std::string& fmt = b.format;
    const TensorType type_k = s.ctx.type_k, type_v = s.ctx.type_v;
    const std::string kv_name =
        type_k == type_v ? std::string(tensor_type_name(type_k))
                         : std::string(tensor_type_name(type_k)) + "/" + tensor_type_name(type_v);
    std::string err = choose_kernels(s.kernels);
    if (!err.empty()) return fail("bench", err, 2);

    auto model = Model::load(*model_path, load_options(s));
    if (!model) return fail("bench", model.error());
    const Model& m = **model;
    if (!prepare_model(s, m, &err)) return fail("bench", err);
    const HParams& h = m.hparams();
    std::string name = model_path->substr(model_path->find_last_of('/') + 1);
    const std::string mtype = m.main_weight_type();

    // Bytes one generated token reads: every weight matrix once (the embedding table only
    // when it doubles as the output projection; a table read lazily, a row of it), plus on
    // average half the KV cache (of the layers with a cache of their own).
    size_t weight_read = 0;
    int64_t n_params = 0;
    for (const auto& t : m.file().tensors()) {
        n_params += t.n_elements();
        if (t.name == "token_embd.weight" && !h.tied_output) continue;
        weight_read += t.n_bytes;
    }
    weight_read -= m.lazy_bytes();
    double kv_per_token = 0;
    for (int64_t il = 0; il < h.n_layer; ++il)
        if (h.has_kv(il))
            kv_per_token += (double)(row_size(type_k, h.n_embd_kv_at(il)) +
                                     row_size(type_v, h.n_embd_kv_at(il)));

    // The layers' matrix multiply-adds per prompt token (the output projection runs for the
    // last token only): what a pp row's speed is in int8 multiply-adds.
    double macs_per_token = 0;
    for (const auto& t : m.file().tensors())
        if (t.n_dims == 2 && t.name.rfind("blk.", 0) == 0)
            macs_per_token += (double)t.ne[0] * (double)t.ne[1];
    std::vector<std::pair<int, Int8Limit>> int8_limits;  // threads -> the kernel set's limit
    if (!b.no_int8_limit && n_prompt > 0)
        for (int t : threads) {
            std::fprintf(stderr, "bench: measuring the int8 limit with %d thread%s...\n", t,
                         t > 1 ? "s" : "");
            int8_limits.emplace_back(t, measure_int8_limit(t));
        }
    std::vector<std::pair<int, double>> bandwidth;  // threads -> GB/s
    if (!b.no_bandwidth && n_gen > 0)
        for (int t : threads) {
            std::fprintf(stderr, "bench: measuring read bandwidth with %d thread%s...\n", t,
                         t > 1 ? "s" : "");
            bandwidth.emplace_back(t, measure_read_bandwidth(t));
        }

    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> tok(0, (int32_t)h.n_vocab - 1);
    std::vector<Row> rows;
    for (int nt : threads) {
        ContextParams cp;
        cp.n_ctx = n_ctx > 0 ? n_ctx : std::max<int64_t>(depth + std::max(n_prompt, n_gen), 16);
        cp.n_batch = n_batch;  // a longer prompt goes in steps (so does the depth fill)
        cp.type_k = type_k;
        cp.type_v = type_v;
        cp.n_threads = nt;
        cp.cpus = s.ctx.cpus;
        auto ctx = Context::create(m, cp);
        if (!ctx) return fail("bench", ctx.error());
        std::fprintf(stderr, "bench: %s\n", (*ctx)->affinity_report().c_str());
        nt = (*ctx)->params().n_threads;  // the threads used (at most the usable CPUs)
        Context& c = **ctx;
        // Empty the cache, then (untimed) fill it to the requested depth.
        std::vector<int32_t> filler((size_t)std::min<int64_t>(depth, cp.n_batch));
        auto reset = [&]() -> std::string {
            c.truncate(0);
            for (int64_t done = 0; done < depth;) {
                const int64_t k = std::min<int64_t>((int64_t)filler.size(), depth - done);
                for (int64_t i = 0; i < k; ++i) filler[(size_t)i] = tok(rng);
                auto r = c.eval(std::span<const int32_t>(filler.data(), (size_t)k), false);
                if (!r) return r.error();
                done += k;
            }
            return {};
        };
        const std::string at = depth > 0 ? " @ d" + std::to_string(depth) : "";
        if (n_prompt > 0) {
            Row r{"pp" + std::to_string(n_prompt) + at,
                  (int)n_prompt,
                  0,
                  nt,
                  {},
                  0,
                  0,
                  0,
                  0,
                  0,
                  0,
                  0};
            std::vector<int32_t> prompt((size_t)n_prompt);
            for (int rep = -1; rep < reps; ++rep) {  // rep -1 is the warm-up
                for (auto& x : prompt) x = tok(rng);
                if (auto e = reset(); !e.empty()) return fail("bench", e);
                const auto t0 = Clock::now();
                auto res = c.eval(prompt, false);
                const double s = seconds_since(t0);
                if (!res) return fail("bench", res.error());
                if (rep >= 0) r.samples.push_back((double)n_prompt / s);
                std::fprintf(stderr, "bench: %s t=%d %s %d/%lld: %.2f tokens/s\n", r.test.c_str(),
                             nt, rep < 0 ? "warm-up" : "run", rep + 1, (long long)reps,
                             (double)n_prompt / s);
            }
            finish(r);
            r.int8_gmacs = r.median * macs_per_token / 1e9;
            for (auto& [t, lim] : int8_limits)
                if (t == nt && lim.macs_per_s > 0)
                    r.int8_share = r.int8_gmacs * 1e9 / lim.macs_per_s;
            rows.push_back(r);
        }
        if (n_gen > 0) {
            Row r{"tg" + std::to_string(n_gen) + at, 0, (int)n_gen, nt, {}, 0, 0, 0, 0, 0, 0, 0};
            for (int rep = -1; rep < reps; ++rep) {
                if (auto e = reset(); !e.empty()) return fail("bench", e);
                const auto t0 = Clock::now();
                for (int64_t i = 0; i < n_gen; ++i) {
                    const int32_t t = tok(rng);
                    auto res = c.eval(std::span<const int32_t>(&t, 1), false);
                    if (!res) return fail("bench", res.error());
                }
                const double s = seconds_since(t0);
                if (rep >= 0) r.samples.push_back((double)n_gen / s);
                std::fprintf(stderr, "bench: %s t=%d %s %d/%lld: %.2f tokens/s\n", r.test.c_str(),
                             nt, rep < 0 ? "warm-up" : "run", rep + 1, (long long)reps,
                             (double)n_gen / s);
            }
            finish(r);
            const double bytes =
                (double)weight_read + kv_per_token * ((double)depth + (double)n_gen / 2.0);
            r.bw_gbps = bytes * r.median / 1e9;
            for (auto& [t, bw] : bandwidth)
                if (t == nt && bw > 0) r.bw_share = r.bw_gbps / bw;
            rows.push_back(r);
        }
    }

    const double size_mib = (double)m.weight_bytes() / (1 << 20);
    const std::string kernels = active_kernel_set();
    if (fmt == "json") {
        std::printf("[\n");
        for (size_t i = 0; i < rows.size(); ++i) {
            const Row& r = rows[i];
            std::printf(
                "  {\"model\": \"%s\", \"model_type\": \"%s\", \"model_size\": %zu, "
                "\"model_n_params\": %lld, "
                "\"kernels\": \"%s\", \"kv_type\": \"%s\", \"test\": \"%s\", \"n_prompt\": %d, "
                "\"n_gen\": %d, "
                "\"n_threads\": %d, \"avg_ts\": %.6f, \"stddev_ts\": %.6f, \"median_ts\": %.6f, "
                "\"samples_ts\": [",
                json_escape(name).c_str(), mtype.c_str(), m.weight_bytes(), (long long)n_params,
                kernels.c_str(), kv_name.c_str(), r.test.c_str(), r.n_prompt, r.n_gen, r.n_threads,
                r.avg, r.stddev, r.median);
            for (size_t k = 0; k < r.samples.size(); ++k)
                std::printf("%s%.6f", k ? ", " : "", r.samples[k]);
            std::printf("]");
            if (r.n_gen > 0)
                std::printf(", \"bw_gbps\": %.4f, \"bw_share\": %.4f", r.bw_gbps, r.bw_share);
            if (r.n_prompt > 0)
                std::printf(", \"int8_gmacs\": %.4f, \"int8_share\": %.4f", r.int8_gmacs,
                            r.int8_share);
            std::printf("}%s\n", i + 1 < rows.size() ? "," : "");
        }
        std::printf("]\n");
        return 0;
    }
    if (fmt == "csv") {
        std::printf(
            "model,model_type,model_size,n_params,kernels,n_threads,test,n_prompt,n_gen,avg_ts,"
            "stddev_ts,median_ts,bw_gbps,bw_share,int8_gmacs,int8_share\n");
        for (const Row& r : rows)
            std::printf("\"%s\",%s,%zu,%lld,%s,%d,%s,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n",
                        name.c_str(), mtype.c_str(), m.weight_bytes(), (long long)n_params,
                        kernels.c_str(), r.n_threads, r.test.c_str(), r.n_prompt, r.n_gen, r.avg,
                        r.stddev, r.median, r.bw_gbps, r.bw_share, r.int8_gmacs, r.int8_share);
        return 0;
    }
    for (auto& [t, bw] : bandwidth)
        std::printf("memory read bandwidth, %d thread%s: %.1f GB/s\n", t, t > 1 ? "s" : "", bw);
    for (auto& [t, lim] : int8_limits)
        if (lim.macs_per_s > 0)
            std::printf(
                "int8 limit, %d thread%s: %.1f GMAC/s (the %s set's dot-product instruction from "
                "registers)\n",
                t, t > 1 ? "s" : "", lim.macs_per_s / 1e9, lim.set.c_str());
        else
            std::printf(
                "int8 limit, %d thread%s: not measured (the %s set has no int8 dot-product "
                "instruction)\n",
                t, t > 1 ? "s" : "", kernels.c_str());
    std::printf("matrix multiply-adds per prompt token: %.3f G\n", macs_per_token / 1e9);
    std::printf(
        "kernels: %s; weights read per generated token: %.1f MiB (%.1f MiB of them "
        "repacked for decode)\n\n",
        kernels.c_str(), (double)weight_read / (1 << 20), (double)m.repacked_bytes() / (1 << 20));
    std::printf(
        "| model | type | size | params | threads | test | t/s (median) | mean ± sd | weight read "
        "GB/s | bandwidth share | int8 GMAC/s | int8 share |\n");
    std::printf("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows) {
        std::printf("| %s | %s | %.1f MiB | %.2f B | %d | %s | %.2f | %.2f ± %.2f |", name.c_str(),
                    mtype.c_str(), size_mib, (double)n_params / 1e9, r.n_threads, r.test.c_str(),
                    r.median, r.avg, r.stddev);
        if (r.n_gen > 0 && r.bw_share > 0)
            std::printf(" %.1f | %.0f %% | | |\n", r.bw_gbps, 100.0 * r.bw_share);
        else if (r.n_gen > 0)
            std::printf(" %.1f | | | |\n", r.bw_gbps);
        else if (r.int8_share > 0)
            std::printf(" | | %.1f | %.0f %% |\n", r.int8_gmacs, 100.0 * r.int8_share);
        else
            std::printf(" | | %.1f | |\n", r.int8_gmacs);
    }
    return 0;
}

}  // namespace edgellm::cli
