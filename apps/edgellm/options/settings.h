// What the command line asks for, as the option table's rows store it (options.h): one
// struct for every command, llama.cpp's common_params. A command reads the parts it has
// rows for; a field keeps its default while no row of the command sets it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "edgellm/grammar.h"
#include "edgellm/model.h"
#include "edgellm/convert.h"
#include "edgellm/quantize.h"
#include "edgellm/server.h"
#include "edgellm/session.h"

namespace edgellm::cli {

// serve's settings that are not the server's own config: the router's, the ones checked or
// combined after the table (checks.cpp), and what the command does before serving.
struct ServeSettings {
    int64_t n_ubatch = 512;                  // -ub: the batch is the smaller of -b and -ub
    std::string hf_repo, hf_file, hf_draft;  // -hf, -hff, -hfd: from llama.cpp's download cache
    std::string pid_file;
    std::optional<std::string> log_file;
    bool list_devices = false;
    // speculative decoding as given (speculative_config() makes server.spec of it)
    std::optional<std::string> spec_types;  // --spec-type
    int64_t draft_n_max = 3, draft_n_min = 0, draft_ctx = 0, draft_threads = 0;
    int64_t ngram_size_n = NgramDrafter::kMaxLookup, ngram_size_m = -1;
    float draft_p_min = 0.0f;
    std::optional<server::ContextPolicy> context_policy;  // --context-policy
    // --lora FILE[,FILE...] and --lora-scaled FILE:SCALE[,...] as given, with their places in
    // the arguments: llama-server numbers the adapters in the order given, both flags mixed.
    struct LoraArg {
        size_t position;
        std::string value;
        bool scaled;
    };
    std::vector<LoraArg> lora_args;
    // the router (serve without -m)
    std::string models_dir, models_preset;
    int models_max = 4;
    bool autoload = true;
};

struct RunSettings {  // (its -p and -f: IoSettings')
    bool chat = false, no_bos = false;
    std::optional<std::string> system, chat_template_kwargs, chat_template_file;
};

// bench's speculative and grammar options stay text until bench runs those tests (the
// pp/tg tests ignore them): bench_speculation() reads them then.
struct BenchSettings {
    int64_t n_prompt = 512, n_gen = 128, reps = 5, n_ctx = 0, depth = 0, n_batch = 512;
    std::vector<int> threads;  // -t LIST; empty: all cores
    std::string format = "md";
    bool no_bandwidth = false, no_int8_limit = false;
    std::optional<std::string> grammar_file, schema_file, prompt;
    std::optional<std::string> draft_model, spec_types, draft_max, draft_min, draft_p_min;
    bool spec_fixed = false;
};

struct PerplexitySettings {
    static constexpr int64_t kMinCtx = 8;   // smaller chunks score (almost) nothing
    static constexpr int32_t kKlTopK = 32;  // tokens kept per position by --kl-save (--kl-top-k)
    static constexpr int32_t kMaxTopK =
        4096;  // most a KL file may claim (guards the size arithmetic)
    int64_t n_ctx = 512, n_batch = 512, max_chunks = -1, top_k = kKlTopK;
    std::optional<std::string> file, kl_save, kl_base;
};

// What logits, tokenize, detokenize, inspect (and run's -p, -f) read and write.
struct IoSettings {
    std::optional<std::string> text, file, out;  // -p, -f, --out
    std::optional<std::vector<int32_t>> ids;     // --tokens
    bool no_bos = false, parse_special = false, special = false, no_tensors = false;
};

struct QuantizeSettings {
    QuantizeOptions opts;  // (ftype from the arguments)
    bool allow_requantize = false;
};

struct SynthSettings {
    std::optional<std::string> arch, shape, out, vocab;
    FileType type = FileType::F16;
    int64_t seed = 1, n_threads = 0;
};

struct ConvertSettings {
    std::optional<std::string> outfile;
    OutType outtype = OutType::Auto;
    int64_t n_threads = 0;
};

struct AcceptSettings {
    static constexpr int kMaxTurns = 8;  // the conversation seed 000 has
    std::string url;
    std::optional<std::string> json;
    int64_t turns = 5, max_tokens = 128, startup_timeout = 120, pid = -1;
    float target_decode = 15, target_first_token = 1000, target_first_token_turn = 500,
          target_accept = 0.55f, target_memory = 1700, target_startup = 5000;
};

struct Settings {
    std::vector<std::string> positional;  // the arguments that are no option's
    std::set<std::string> given;          // every name of the rows given
    bool has(const std::string& name) const { return given.count(name) > 0; }

    // ---- the model commands ----
    std::optional<std::string> model;  // -m
    std::string kernels;               // --kernels ("": $EDGELLM_KERNELS, else the best)
    ContextParams ctx;                 // -c, -b, -t, the KV cache types, the CPUs, --swa-full
    bool repack = true;                // -nr: false
    std::optional<std::string> repack_cache;  // --repack-cache DIR (load_options() has the default)
    bool no_repack_cache = false;
    bool mlock = false, warmup = true;
    // ---- generation: run and serve ----
    GenerateParams gen;  // -n, the sampling flags, --ignore-eos, --stop, --keep
    // --grammar, --grammar-file, --json-schema, --json-schema-file as given; compiled into
    // `grammar` by compile_grammar_option() once the table has been applied
    std::vector<std::pair<std::string, std::string>> grammar_sources;  // (flag, value)
    std::shared_ptr<const Grammar> grammar;

    // serve's config (its ctx, defaults, load, grammar: the above, once checked)
    server::ServerConfig server;
    ServeSettings serve;
    std::vector<std::string> notes;  // serve logs them: accepted flags that change nothing here

    RunSettings run;
    BenchSettings bench;
    PerplexitySettings perplexity;
    IoSettings io;
    QuantizeSettings quantize;
    SynthSettings synth;
    ConvertSettings convert;
    AcceptSettings accept;
};

}  // namespace edgellm::cli
