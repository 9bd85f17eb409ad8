// The option table, part 7: the measuring and model-making commands (bench, perplexity,
// accept, quantize, convert, synth).
#include "edgellm/arch.h"
#include "edgellm/synth.h"
#include "options.h"

namespace edgellm::cli {

namespace {

// --output-type / --token-embedding-type: a type quantize can write.
Apply quantize_type(void (*set)(Settings&, TensorType)) {
    return [set](const Arg& a, Settings& s, std::string* err) {
        const auto t = tensor_type_from_name(a.value);
        if (!t || !can_quantize(*t)) {
            *err = a.name + ": unknown tensor type \"" + a.value + "\"";
            return false;
        }
        set(s, *t);
        return true;
    };
}

}  // namespace

// (a row an option, laid out by hand)
// clang-format off
std::vector<Option> tool_options() {
    auto text = [](std::optional<std::string> BenchSettings::*field) -> Apply {
        return [field](const Arg& a, Settings& s, std::string*) {
            s.bench.*field = a.value;
            return true;
        };
    };
    return {
        // ---- bench: the pp/tg tests ----
        {.names = {"-p", "--n-prompt"}, .metavar = "N", .scope = kBench, .group = Group::Measure,
         .help = "prompt tokens for the pp test; 0 = skip (default 512)",
         .apply = integer(0, 1 << 16, [](Settings& s, int64_t v) { s.bench.n_prompt = v; }),
         .needs = Needs::PlainBench},
        {.names = {"-n", "--n-gen"}, .metavar = "N", .scope = kBench, .group = Group::Measure,
         .help = "tokens for the tg test; 0 = skip (default 128)",
         .apply = integer(0, 1 << 16, [](Settings& s, int64_t v) { s.bench.n_gen = v; })},
        {.names = {"-r", "--repetitions"}, .metavar = "N", .scope = kBench, .group = Group::Measure,
         .help = "repetitions after the warm-up (default 5)",
         .apply = integer(1, 1000, [](Settings& s, int64_t v) { s.bench.reps = v; })},
        {.names = {"-d", "--n-depth"}, .metavar = "N", .scope = kBench, .group = Group::Measure,
         .help = "fill the KV cache with N tokens before each test (default 0)",
         .apply = integer(0, 1 << 20, [](Settings& s, int64_t v) { s.bench.depth = v; }),
         .needs = Needs::PlainBench},
        {.names = {"-o", "--output"}, .metavar = "FMT", .scope = kBench, .group = Group::Output,
         .help = "md (default), json or csv",
         .apply = must_be({"md", "json", "csv"}, "md, json or csv",
                          [](Settings& s, const std::string& v) { s.bench.format = v; }),
         .needs = Needs::PlainBench},
        {.names = {"--no-bandwidth"}, .scope = kBench, .group = Group::Measure,
         .help = "skip measuring the machine's read bandwidth",
         .apply = set_flag([](Settings& s) { s.bench.no_bandwidth = true; }),
         .needs = Needs::PlainBench},
        {.names = {"--no-int8-limit"}, .scope = kBench, .group = Group::Measure,
         .help = "skip measuring the kernel set's int8 multiply-add limit",
         .apply = set_flag([](Settings& s) { s.bench.no_int8_limit = true; }),
         .needs = Needs::PlainBench},
        // ---- bench: instead of them, constrained or speculative decoding ----
        {.names = {"--grammar"}, .metavar = "FILE", .scope = kBench, .group = Group::Grammar,
         .help = "instead: decode constrained by the GBNF grammar in FILE beside free decode",
         .apply = text(&BenchSettings::grammar_file)},
        {.names = {"--json-schema"}, .metavar = "FILE", .scope = kBench, .group = Group::Grammar,
         .help = "instead: decode constrained by the JSON schema in FILE beside free decode",
         .apply = text(&BenchSettings::schema_file)},
        {.names = {"--prompt"}, .metavar = "TEXT", .scope = kBench, .group = Group::Grammar,
         .help = "the user message for --grammar / --json-schema",
         .apply = text(&BenchSettings::prompt)},
        {.names = {"--draft", "-md", "--model-draft"}, .metavar = "FILE",
         .scope = kBench, .group = Group::Speculative,
         .help = "instead: speculative decoding with this draft model beside plain decoding, on "
                 "chat, code-edit, JSON and quoting prompts",
         .apply = text(&BenchSettings::draft_model)},
        {.names = {"--spec-type"}, .metavar = "LIST", .scope = kBench, .group = Group::Speculative,
         .help = "with or instead of --draft: ngram (prompt lookup), draft",
         .apply = text(&BenchSettings::spec_types)},
        {.names = {"--draft-max", "--spec-draft-n-max"}, .metavar = "N",
         .scope = kBench, .group = Group::Speculative,
         .help = "most drafts per step (default 3, ngram only 16)",
         .apply = text(&BenchSettings::draft_max)},
        {.names = {"--draft-min", "--spec-draft-n-min"}, .metavar = "N",
         .scope = kBench, .group = Group::Speculative,
         .help = "fewer drafts than this: none (default 0)",
         .apply = text(&BenchSettings::draft_min)},
        {.names = {"--draft-p-min", "--spec-draft-p-min"}, .metavar = "P",
         .scope = kBench, .group = Group::Speculative,
         .help = "the draft model's least probability (default 0)",
         .apply = text(&BenchSettings::draft_p_min)},
        {.names = {"--spec-fixed"}, .scope = kBench, .group = Group::Speculative,
         .help = "always draft up to --draft-max (default: adaptive)",
         .apply = set_flag([](Settings& s) { s.bench.spec_fixed = true; })},

        // ---- perplexity ----
        {.names = {"-f", "--file"}, .metavar = "FILE", .scope = kPerplexity, .group = Group::Input,
         .help = "text to measure (with --kl-base: optional, checked against the saved tokens)",
         .apply = store([](Settings& s, const std::string& v) { s.perplexity.file = v; })},
        {.names = {"--chunks"}, .metavar = "N", .scope = kPerplexity, .group = Group::Measure,
         .help = "score at most N chunks (default: all)",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             if (!a.integer(-1, 1 << 24, &s.perplexity.max_chunks, err)) return false;
             if (s.perplexity.max_chunks != 0) return true;
             *err = "--chunks must be at least 1 (or -1: all)";
             return false;
         }},
        {.names = {"--kl-save"}, .metavar = "FILE", .scope = kPerplexity, .group = Group::Measure,
         .help = "save this model's top-K distributions and the tokens (the reference)",
         .apply = store([](Settings& s, const std::string& v) { s.perplexity.kl_save = v; })},
        {.names = {"--kl-base"}, .metavar = "FILE", .scope = kPerplexity, .group = Group::Measure,
         .help = "compare with a saved reference: KL divergence, top-1 agreement, PPL ratio",
         .apply = store([](Settings& s, const std::string& v) { s.perplexity.kl_base = v; })},
        {.names = {"--kl-top-k"}, .metavar = "K", .scope = kPerplexity, .group = Group::Measure,
         .help = "tokens kept per position by --kl-save (default 32, at most 4096)",
         .apply = integer(1, PerplexitySettings::kMaxTopK, [](Settings& s, int64_t v) {
             s.perplexity.top_k = v;
         })},

        // ---- accept ----
        {.names = {"--url"}, .metavar = "URL", .scope = kAccept, .group = Group::Measure,
         .help = "measure the server already running there",
         .apply = store([](Settings& s, const std::string& v) { s.accept.url = v; })},
        {.names = {"--pid"}, .metavar = "PID", .scope = kAccept, .group = Group::Measure,
         .help = "its process, for the memory rows (default: the local process listening on the "
                 "URL's port)",
         .apply = integer(1, 1 << 30, [](Settings& s, int64_t v) { s.accept.pid = v; })},
        {.names = {"--turns"}, .metavar = "N", .scope = kAccept, .group = Group::Measure,
         .help = "conversation turns, 3..8 (default 5)",
         .apply = integer(3, AcceptSettings::kMaxTurns, [](Settings& s, int64_t v) {
             s.accept.turns = v;
         })},
        {.names = {"--max-tokens"}, .metavar = "N", .scope = kAccept, .group = Group::Measure,
         .help = "max_tokens of each turn (default 128, seed 000's chat value)",
         .apply = integer(1, 4096, [](Settings& s, int64_t v) { s.accept.max_tokens = v; })},
        {.names = {"--json"}, .metavar = "FILE", .scope = kAccept, .group = Group::Output,
         .help = "also write the table as JSON (- for stdout)",
         .apply = store([](Settings& s, const std::string& v) { s.accept.json = v; })},
        {.names = {"--target-decode"}, .metavar = "TOK_S",
         .scope = kAccept, .group = Group::Measure,
         .help = "decode speed at least (default 15)",
         .apply = number(0, 1e6, [](Settings& s, float v) { s.accept.target_decode = v; })},
        {.names = {"--target-first-token"}, .metavar = "MS",
         .scope = kAccept, .group = Group::Measure,
         .help = "first token of the cold turn below (default 1000)",
         .apply = number(0, 1e7, [](Settings& s, float v) { s.accept.target_first_token = v; })},
        {.names = {"--target-first-token-turn"}, .metavar = "MS",
         .scope = kAccept, .group = Group::Measure,
         .help = "first token from the third turn on below (default 500)",
         .apply = number(0, 1e7, [](Settings& s, float v) {
             s.accept.target_first_token_turn = v;
         })},
        {.names = {"--target-accept"}, .metavar = "RATE", .scope = kAccept, .group = Group::Measure,
         .help = "draft accept rate at least (default 0.55)",
         .apply = number(0, 1, [](Settings& s, float v) { s.accept.target_accept = v; })},
        {.names = {"--target-memory"}, .metavar = "MIB", .scope = kAccept, .group = Group::Measure,
         .help = "resident memory at most (default 1700)",
         .apply = number(0, 1e9, [](Settings& s, float v) { s.accept.target_memory = v; })},
        {.names = {"--target-startup"}, .metavar = "MS", .scope = kAccept, .group = Group::Measure,
         .help = "start-up to healthy below (default 5000)",
         .apply = number(0, 1e9, [](Settings& s, float v) { s.accept.target_startup = v; })},
        {.names = {"--startup-timeout"}, .metavar = "S", .scope = kAccept, .group = Group::Measure,
         .help = "give up waiting for the server after (default 120)",
         .apply = integer(1, 3600, [](Settings& s, int64_t v) { s.accept.startup_timeout = v; })},

        // ---- quantize ----
        {.names = {"--allow-requantize"}, .scope = kQuantize, .group = Group::Output,
         .help = "allow tensors that are already quantized to be quantized again",
         .apply = set_flag([](Settings& s) { s.quantize.allow_requantize = true; })},
        {.names = {"--output-type"}, .metavar = "T", .scope = kQuantize, .group = Group::Output,
         .help = "type of output.weight (e.g. q8_0, q6_K, f16)",
         .apply = quantize_type([](Settings& s, TensorType t) {
             s.quantize.opts.output_type = t;
         })},
        {.names = {"--token-embedding-type"}, .metavar = "T",
         .scope = kQuantize, .group = Group::Output,
         .help = "type of token_embd.weight",
         .apply = quantize_type([](Settings& s, TensorType t) {
             s.quantize.opts.token_embedding_type = t;
         })},
        {.names = {"--pure"}, .scope = kQuantize, .group = Group::Output,
         .help = "no mixture: every quantizable tensor gets TYPE's base type",
         .apply = set_flag([](Settings& s) { s.quantize.opts.pure = true; })},

        // ---- convert ----
        {.names = {"--outfile"}, .metavar = "FILE", .scope = kConvert, .group = Group::Output,
         .help = "GGUF to write (default: llama.cpp's name for the model, in HF_DIR; a directory: "
                 "that name in it); {ftype} becomes the type",
         .apply = store([](Settings& s, const std::string& v) { s.convert.outfile = v; })},
        {.names = {"--outtype"}, .metavar = "T", .scope = kConvert, .group = Group::Output,
         .help = "type of the matrices: f32, f16, bf16, q8_0, or auto (default): bf16 for a bf16 "
                 "checkpoint, else f16",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             const auto t = out_type_from_name(a.value);
             if (!t) {
                 *err = "unknown --outtype \"" + a.value + "\" (one of: " + out_type_names() + ")";
                 return false;
             }
             s.convert.outtype = *t;
             return true;
         }},
        {.names = {"-t", "--threads"}, .metavar = "N", .scope = kConvert, .group = Group::Cpu,
         .help = "threads (default: all cores)",
         .apply = integer(1, 1024, [](Settings& s, int64_t v) { s.convert.n_threads = v; })},

        // ---- synth ----
        {.names = {"--arch"}, .metavar = "A", .scope = kSynth, .group = Group::Model,
         .help = "architecture, a family edgellm runs (default: the shape's own)",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             if (!find_arch(a.value)) {
                 *err = "unknown --arch \"" + a.value + "\" (one of: " + arch_names() + ")";
                 return false;
             }
             s.synth.arch = a.value;
             return true;
         }},
        {.names = {"--shape"}, .metavar = "NAME", .scope = kSynth, .group = Group::Model,
         .help = "tensor shapes of this model",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             if (!find_model_shape(a.value)) {
                 *err = "unknown --shape \"" + a.value + "\" (one of: " + shape_names() + ")";
                 return false;
             }
             s.synth.shape = a.value;
             return true;
         }},
        {.names = {"--vocab"}, .metavar = "GGUF", .scope = kSynth, .group = Group::Model,
         .help = "take this GGUF's vocabulary (tokenizer.* keys: tokens, merges or scores, "
                 "special tokens, chat template), e.g. llama.cpp's ggml-vocab-*.gguf",
         .apply = store([](Settings& s, const std::string& v) { s.synth.vocab = v; })},
        {.names = {"-o", "--out"}, .metavar = "FILE", .scope = kSynth, .group = Group::Output,
         .help = "output GGUF",
         .apply = store([](Settings& s, const std::string& v) { s.synth.out = v; })},
        {.names = {"--type"}, .metavar = "T", .scope = kSynth, .group = Group::Output,
         .help = "file type as for quantize: F16 (default), Q4_K_M, Q8_0, ...",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             const auto ft = file_type_from_name(a.value);
             if (!ft) {
                 *err = "unknown --type \"" + a.value + "\"";
                 return false;
             }
             s.synth.type = *ft;
             return true;
         }},
        {.names = {"--seed"}, .metavar = "S", .scope = kSynth, .group = Group::Output,
         .help = "random seed (default 1); the same seed writes the same bytes",
         .apply = integer(0, INT64_MAX, [](Settings& s, int64_t v) { s.synth.seed = v; })},
        {.names = {"-t", "--threads"}, .metavar = "N", .scope = kSynth, .group = Group::Cpu,
         .help = "threads (default: all cores)",
         .apply = integer(1, 1024, [](Settings& s, int64_t v) { s.synth.n_threads = v; })},
    };
}
// clang-format on

}  // namespace edgellm::cli
