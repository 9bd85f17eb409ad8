// The option table, part 2: the context, the KV cache, and the CPU and memory.
#include <filesystem>
#include <sstream>
#include <thread>

#include "edgellm/cpu.h"
#include "options.h"

namespace edgellm::cli {

namespace {

// --prompt-cache DIR: not a symbolic link (the cache writes where it was told, and a link
// could be turned elsewhere while it does).
bool prompt_cache_dir(const Arg& a, Settings& s, std::string* err) {
    std::string dir = a.value;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // ("link/" would be followed)
    std::error_code ec;
    if (std::filesystem::is_symlink(dir, ec)) {
        *err = a.name + " " + a.value + " is a symbolic link (to " +
               std::filesystem::read_symlink(dir, ec).string() + "): give the directory itself";
        return false;
    }
    s.server.prompt_cache_dir = a.value;
    return true;
}

// "1,2,4" -> thread counts in 1..1024.
bool parse_int_list(const std::string& s, std::vector<int>* out) {
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char* end = nullptr;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < 1 || v > 1024) return false;
        out->push_back((int)v);
    }
    return !out->empty();
}

// -C / --cpus: the CPUs to pin the threads to.
Apply cpus(std::optional<std::vector<int>> (*parse)(std::string_view), const char* like) {
    return [=](const Arg& a, Settings& s, std::string* err) {
        auto cpus = parse(a.value);
        if (!cpus) {
            *err = a.name + " must be " + like + ", got \"" + a.value + "\"";
            return false;
        }
        s.ctx.cpus = *cpus;
        return true;
    };
}

}  // namespace

// (a row an option, laid out by hand)
// clang-format off
std::vector<Option> context_options() {
    auto set_n_ctx = [](Settings& s, int64_t v) { s.ctx.n_ctx = v; };
    auto set_n_predict = [](Settings& s, int64_t v) { s.gen.n_predict = (int32_t)v; };
    const uint32_t kv_commands = kRun | kBench | kLogits | kPerplexity | kInspect;
    return {
        // ---- context and generation ----
        {.names = {"-c", "--ctx-size"}, .metavar = "N", .scope = kServe, .group = Group::Context,
         .help = "context size, shared by the slots (default: training context, at most 4096)",
         .apply = integer(0, 1 << 24, set_n_ctx)},
        {.names = {"-c", "--ctx-size"}, .metavar = "N", .scope = kRun, .group = Group::Context,
         .help = "context size (default: training context, at most 4096)",
         .apply = integer(0, 1 << 24, set_n_ctx)},
        {.names = {"-c", "--ctx-size"}, .metavar = "N", .scope = kLogits, .group = Group::Context,
         .help = "context size (default: the tokens'; it chooses Phi-3's LongRoPE factors)",
         .apply = integer(1, 1 << 24, set_n_ctx)},
        {.names = {"-c", "--ctx-size"}, .metavar = "N", .scope = kInspect, .group = Group::Context,
         .help = "context size for the KV cache (default: training context, at most 4096)",
         .apply = integer(1, (int64_t)1 << 30, set_n_ctx)},
        {.names = {"-c", "--ctx-size"}, .metavar = "N", .scope = kBench, .group = Group::Context,
         .help = "context (default: enough for the tests)",
         .apply = integer(0, 1 << 24, [](Settings& s, int64_t v) { s.bench.n_ctx = v; }),
         .needs = Needs::PlainBench},
        {.names = {"-c", "--ctx-size"}, .metavar = "N",
         .scope = kPerplexity, .group = Group::Context,
         .help = "tokens per chunk; the second half of each is scored (default 512)",
         .apply = integer(PerplexitySettings::kMinCtx, 1 << 24,
                          [](Settings& s, int64_t v) { s.perplexity.n_ctx = v; })},
        {.names = {"-np", "--parallel"}, .metavar = "N", .scope = kServe, .group = Group::Context,
         .help = "slots: requests generated at the same time, sharing the context (default 1)",
         .apply = integer(1, 256, [](Settings& s, int64_t v) { s.server.n_parallel = (int)v; })},
        {.names = {"-kvu", "--kv-unified"}, .scope = kServe, .group = Group::Context,
         .help = "each slot may use the whole -c instead of -c / -np; KV memory follows the "
                 "positions in use (up to -np x -c)",
         .apply = set_flag([](Settings& s) { s.server.kv_unified = true; }),
         .label = "--kv-unified", .contradicts = "--no-kv-unified"},
        {.names = {"-no-kvu", "--no-kv-unified"}, .scope = kServe, .group = Group::Context,
         .help = "each slot holds -c / -np positions (the default)"},
        {.names = {"-b", "--batch-size"}, .metavar = "N",
         .scope = kServe | kRun | kInspect, .group = Group::Context,
         .help = "prompt tokens per forward step (default 512)",
         .apply = integer(1, 1 << 20, [](Settings& s, int64_t v) { s.ctx.n_batch = v; })},
        {.names = {"-ub", "--ubatch-size"}, .metavar = "N",
         .scope = kServe, .group = Group::Context,
         .help = "physical batch; the smaller of -b and -ub is used",
         .apply = integer(1, 1 << 20, [](Settings& s, int64_t v) { s.serve.n_ubatch = v; })},
        {.names = {"-b", "--batch-size", "-ub", "--ubatch-size"}, .metavar = "N",
         .scope = kBench, .group = Group::Context,
         .help = "most prompt tokens in one forward step, as serve's -b (default 512; "
                 "llama-bench's -ub)",
         .apply = integer(1, 1 << 16, [](Settings& s, int64_t v) { s.bench.n_batch = v; }),
         .needs = Needs::PlainBench},
        {.names = {"-b", "--batch-size"}, .metavar = "N",
         .scope = kPerplexity, .group = Group::Context,
         .help = "tokens per forward step (default min(512, -c))",
         .apply = integer(1, 1 << 24, [](Settings& s, int64_t v) { s.perplexity.n_batch = v; })},
        {.names = {"-n", "--n-predict"}, .metavar = "N", .scope = kServe, .group = Group::Context,
         .help = "default most tokens per reply; -1 = no limit (default -1)",
         .apply = integer(-1, 1 << 30, set_n_predict)},
        {.names = {"-n", "--n-predict"}, .metavar = "N", .scope = kRun, .group = Group::Context,
         .help = "most tokens to generate; -1 = until the end (default -1)",
         .apply = integer(-1, 1 << 30, set_n_predict)},
        {.names = {"-r", "--reverse-prompt", "--stop"}, .metavar = "TEXT",
         .scope = kRun, .group = Group::Context,
         .help = "stop when this text appears",
         .apply = store([](Settings& s, const std::string& v) { s.gen.stop = {v}; })},
        {.names = {"--ignore-eos"}, .scope = kRun, .group = Group::Context,
         .help = "keep generating past end-of-sequence tokens",
         .apply = set_flag([](Settings& s) { s.gen.ignore_eos = true; })},
        {.names = {"--ignore-eos"}, .scope = kServe, .group = Group::Context,
         .help = "requests ignore end-of-generation tokens unless they say otherwise",
         .apply = set_flag([](Settings& s) { s.gen.ignore_eos = true; })},
        {.names = {"--context-shift"}, .scope = kServe, .group = Group::Context,
         .help = "when the context fills while generating, drop the oldest tokens after the first "
                 "--keep and go on (default: the reply ends, finish_reason length)",
         .contradicts = "--no-context-shift"},
        {.names = {"--no-context-shift"}, .scope = kServe, .group = Group::Context,
         .help = "a full context ends the reply (the default)"},
        {.names = {"--context-policy"}, .metavar = "error|shift|summarize",
         .scope = kServe, .group = Group::Context,
         .help = "a conversation longer than the context: refused with both counts (error, the "
                 "default), shifted while generating (shift: --context-shift), or its oldest "
                 "turns summarized by the model into the system prompt (summarize; chat only)",
         .apply = takes({"error", "shift", "summarize"}, "error, shift or summarize",
                        [](Settings& s, const std::string& v) {
                            using P = server::ContextPolicy;
                            s.serve.context_policy =
                                v == "error" ? P::Error : v == "shift" ? P::Shift : P::Summarize;
                        })},
        {.names = {"--keep"}, .metavar = "N", .scope = kServe, .group = Group::Context,
         .help = "tokens a context shift keeps at the start (default 0; -1: the whole prompt)",
         .apply = integer(-1, 1 << 30, [](Settings& s, int64_t v) { s.gen.n_keep = v; })},

        // ---- the KV cache ----
        {.names = {"--kv-type"}, .metavar = "T", .scope = kv_commands, .group = Group::Kv,
         .help = "KV cache type of keys and values alike: " + kv_type_names(),
         .apply = kv_type([](Settings& s, TensorType t) { s.ctx.type_k = s.ctx.type_v = t; })},
        {.names = {"-ctk", "--cache-type-k"}, .metavar = "T",
         .scope = kServe | kv_commands, .group = Group::Kv,
         .help = "KV cache type of the keys (default f16): " + kv_type_names(),
         .apply = kv_type([](Settings& s, TensorType t) { s.ctx.type_k = t; }),
         .label = "--cache-type-k"},
        {.names = {"-ctv", "--cache-type-v"}, .metavar = "T",
         .scope = kServe | kv_commands, .group = Group::Kv,
         .help = "KV cache type of the values (default f16)",
         .apply = kv_type([](Settings& s, TensorType t) { s.ctx.type_v = t; }),
         .label = "--cache-type-v"},
        {.names = {"--swa-full"}, .scope = kServe | kRun | kBench, .group = Group::Kv,
         .help = "sliding-window layers keep the whole context, not a ring of window + batch cells",
         .apply = set_flag([](Settings& s) { s.ctx.swa_full = true; })},
        {.names = {"-cram", "--cache-ram"}, .metavar = "N", .scope = kServe, .group = Group::Kv,
         .help = "MiB of earlier prompts' KV kept in RAM to restore into a slot (default 64; -1: "
                 "no limit, 0: off)",
         .apply = integer(-1, 1 << 30, [](Settings& s, int64_t v) { s.server.cache_ram_mib = v; }),
         .label = "--cache-ram"},
        {.names = {"--cache-idle-slots"}, .scope = kServe, .group = Group::Kv,
         .help = "keep a slot's conversation in --cache-ram when a new prompt replaces it (the "
                 "default)",
         .contradicts = "--no-cache-idle-slots"},
        {.names = {"--no-cache-idle-slots"}, .scope = kServe, .group = Group::Kv,
         .help = "do not (a returning conversation is evaluated again)",
         .apply = set_flag([](Settings& s) { s.server.cache_idle_slots = false; })},
        {.names = {"--prompt-cache"}, .metavar = "DIR", .scope = kServe, .group = Group::Kv,
         .help = "keep the KV of each conversation's prefix in DIR (not a symbolic link), so it "
                 "survives a restart; the newest go back into the slots at start-up",
         .apply = prompt_cache_dir},
        {.names = {"--prompt-cache-max-mib"}, .metavar = "N", .scope = kServe, .group = Group::Kv,
         .help = "disk budget of --prompt-cache (default 1024)",
         .apply = integer(1, 1 << 30, [](Settings& s, int64_t v) {
             s.server.prompt_cache_max_mib = v;
         })},
        {.names = {"--cache-prompt"}, .scope = kServe, .group = Group::Kv,
         .help = "a request's cache_prompt defaults to true (the default)",
         .contradicts = "--no-cache-prompt"},
        {.names = {"--no-cache-prompt"}, .scope = kServe, .group = Group::Kv,
         .help = "a request's cache_prompt defaults to false (its prefix is evaluated again)",
         .apply = set_flag([](Settings& s) { s.server.cache_prompt = false; })},

        // ---- CPU and memory ----
        {.names = {"-t", "--threads"}, .metavar = "N",
         .scope = kServe | kRun | kLogits | kPerplexity | kInspect, .group = Group::Cpu,
         .help = "threads (default: all cores, or the big cores)",
         .apply = integer(1, 1024, [](Settings& s, int64_t v) { s.ctx.n_threads = (int)v; })},
        {.names = {"-t", "--threads"}, .metavar = "LIST", .scope = kBench, .group = Group::Cpu,
         .help = "thread counts, comma-separated (default: all cores)",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             if (parse_int_list(a.value, &s.bench.threads)) return true;
             *err = "-t must be a list like 1,2";
             return false;
         }},
        {.names = {"-C", "--cpu-mask"}, .metavar = "HEX",
         .scope = kServe | kRun | kBench, .group = Group::Cpu,
         .help = "pin threads to the CPUs of this mask (e.g. 0xF0)",
         .apply = cpus(parse_cpu_mask, "a hex mask like 0xF0"), .label = "--cpu-mask"},
        {.names = {"--cpus", "--cpu-range", "-Cr"}, .metavar = "LIST",
         .scope = kServe | kRun | kBench, .group = Group::Cpu,
         .help = "pin threads to these CPUs (e.g. 4-7 or 0,2)",
         .apply = cpus(parse_cpu_list, "a list like 4-7 or 0,2")},
        {.names = {"--mlock"}, .scope = kServe | kRun | kBench, .group = Group::Cpu,
         .help = "keep the weights in RAM (mlock)",
         .apply = set_flag([](Settings& s) { s.mlock = true; })},
        {.names = {"--no-warmup"}, .scope = kServe | kRun | kBench, .group = Group::Cpu,
         .help = "do not read every weight page before the first request",
         .apply = set_flag([](Settings& s) { s.warmup = false; })},
        {.names = {"--warmup"}, .scope = kServe, .group = Group::Cpu,
         .help = "read every weight page and run one step before serving (the default)",
         .contradicts = "--no-warmup"},
        {.names = {"-nr", "--no-repack"},
         .scope = kServe | kRun | kBench | kInspect, .group = Group::Cpu,
         .help = "keep the weights in the file's layout (no repacking for decode at load)",
         .apply = set_flag([](Settings& s) { s.repack = false; })},
        {.names = {"--repack-cache"}, .metavar = "DIR",
         .scope = kServe | kRun | kBench, .group = Group::Cpu,
         .help = "keep the repacked weights in DIR, so that the next start maps them instead of "
                 "repacking (default: ~/.cache/edgellm/repacked for models with 64 MiB or more of "
                 "them; a DIR given: for every model)",
         .apply = store([](Settings& s, const std::string& v) { s.repack_cache = v; })},
        {.names = {"--no-repack-cache"}, .scope = kServe | kRun | kBench, .group = Group::Cpu,
         .help = "repack at every start, keep no file of the repacked weights",
         .apply = set_flag([](Settings& s) { s.no_repack_cache = true; })},
        {.names = {"--kernels"}, .metavar = "NAME",
         .scope = kServe | kRun | kBench | kLogits | kPerplexity | kInspect, .group = Group::Cpu,
         .help = "kernel set (default: the best that is not opt-in; amx-bf16 is opt-in)",
         .apply = store([](Settings& s, const std::string& v) { s.kernels = v; }),
         .env = "EDGELLM_KERNELS"},
    };
}
// clang-format on

}  // namespace edgellm::cli
