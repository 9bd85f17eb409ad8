// The option table, part 5: serve's speculative decoding (llama-server's names, old and new).
// speculative_config() (checks.cpp) makes the server's SpecConfig of them.
#include "options.h"

namespace edgellm::cli {

namespace {
const char* const kSynthRefusal =
    "synthetic draft acceptance (a benchmarking mode whose output is not the model's) is not "
    "built; edgellm checks every draft with the model";
}  // namespace

// (a row an option, laid out by hand)
// clang-format off
std::vector<Option> speculative_options() {
    return {
        {.names = {"-md", "--model-draft", "--spec-draft-model"}, .metavar = "FILE",
         .scope = kServe, .group = Group::Speculative,
         .help = "draft model for speculative decoding: a small model with the same vocabulary",
         .apply = store([](Settings& s, const std::string& v) { s.server.spec.draft_model = v; })},
        {.names = {"-hfd", "-hfrd", "--hf-repo-draft"}, .metavar = "ORG/NAME[:QUANT]",
         .scope = kServe, .group = Group::Speculative,
         .help = "the draft model (-md) from the same cache",
         .apply = store([](Settings& s, const std::string& v) { s.serve.hf_draft = v; })},
        {.names = {"--spec-type"}, .metavar = "LIST", .scope = kServe, .group = Group::Speculative,
         .help = "speculative decoding: draft (draft-simple), ngram (ngram-simple, ngram-map-k, "
                 "ngram-map-k4v, ngram-mod, ngram-cache: prompt lookup), both comma-separated, or "
                 "none (default: draft with -md, else none)",
         .apply = store([](Settings& s, const std::string& v) { s.serve.spec_types = v; })},
        {.names = {"--draft-max", "--draft", "--draft-n", "--spec-draft-n-max"}, .metavar = "N",
         .scope = kServe, .group = Group::Speculative,
         .help = "most tokens drafted per step (default 3 with a draft model, 16 for lookup)",
         .apply = integer(0, 64, [](Settings& s, int64_t v) { s.serve.draft_n_max = v; }),
         .needs = Needs::Speculation},
        {.names = {"--draft-min", "--draft-n-min", "--spec-draft-n-min"}, .metavar = "N",
         .scope = kServe, .group = Group::Speculative,
         .help = "fewer tokens drafted than this: the step goes without them (default 0)",
         .apply = integer(0, 64, [](Settings& s, int64_t v) { s.serve.draft_n_min = v; }),
         .needs = Needs::Speculation},
        {.names = {"--draft-p-min", "--spec-draft-p-min"}, .metavar = "P",
         .scope = kServe, .group = Group::Speculative,
         .help = "the draft model drafts while its most likely token has at least this "
                 "probability (default 0)",
         .apply = number(0.0, 1.0, [](Settings& s, float v) { s.serve.draft_p_min = v; }),
         .needs = Needs::DraftModel},
        {.names = {"-cd", "--ctx-size-draft", "--spec-draft-ctx-size"}, .metavar = "N",
         .scope = kServe, .group = Group::Speculative,
         .help = "the draft model's context, shared by the slots (default: the same as -c)",
         .apply = integer(0, 1 << 24, [](Settings& s, int64_t v) { s.serve.draft_ctx = v; }),
         .needs = Needs::DraftModel},
        {.names = {"-td", "--threads-draft", "--spec-draft-threads"}, .metavar = "N",
         .scope = kServe, .group = Group::Speculative,
         .help = "threads for the draft model (default: -t)",
         .apply = integer(1, 1024, [](Settings& s, int64_t v) { s.serve.draft_threads = v; }),
         .needs = Needs::DraftModel},
        {.names = {"-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"}, .metavar = "T",
         .scope = kServe, .group = Group::Speculative,
         .help = "the draft model's KV cache type of the keys (default f16; the types of -ctk)",
         .apply = kv_type([](Settings& s, TensorType t) { s.server.spec.type_k = t; }),
         .needs = Needs::DraftModel},
        {.names = {"-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"}, .metavar = "T",
         .scope = kServe, .group = Group::Speculative,
         .help = "the draft model's KV cache type of the values (default f16)",
         .apply = kv_type([](Settings& s, TensorType t) { s.server.spec.type_v = t; }),
         .needs = Needs::DraftModel},
        {.names = {"-devd", "--device-draft", "--spec-draft-device"}, .metavar = "LIST",
         .scope = kServe, .group = Group::Speculative,
         .help = "none or cpu: the draft model runs on the CPU",
         .apply = cpu_only("the draft model "), .needs = Needs::DraftModel},
        {.names = {"--spec-fixed"}, .scope = kServe, .group = Group::Speculative,
         .help = "always draft up to --draft-max (default: per slot, the draft length that the "
                 "measured accept rate and costs say is fastest, 0 when drafting does not pay)",
         .apply = set_flag([](Settings& s) { s.server.spec.adaptive = false; }),
         .needs = Needs::Speculation},
        {.names = {"--spec-ngram-simple-size-n", "--spec-ngram-size-n"}, .metavar = "N",
         .scope = kServe, .group = Group::Speculative,
         .help = "longest run of tokens prompt lookup matches (default 5; it tries down to 3)",
         .apply = integer(1, 64, [](Settings& s, int64_t v) { s.serve.ngram_size_n = v; }),
         .needs = Needs::Speculation},
        {.names = {"--spec-ngram-simple-size-m", "--spec-ngram-size-m", "--spec-ngram-mod-n-max"},
         .metavar = "N", .scope = kServe, .group = Group::Speculative,
         .help = "most tokens prompt lookup drafts per step (default: --draft-max, else 16)",
         .apply = integer(1, 64, [](Settings& s, int64_t v) { s.serve.ngram_size_m = v; }),
         .needs = Needs::Speculation},
        {.names = {"--spec-synth-len"}, .metavar = "L",
         .scope = kServe, .group = Group::Speculative,
         .help = "refused: synthetic draft acceptance (llama-server's benchmarking mode, whose "
                 "output is not the model's) is not built; every draft is checked by the model",
         .apply = refuse(kSynthRefusal)},
        {.names = {"--spec-synth-rates"}, .metavar = "P0,P1,...",
         .scope = kServe, .group = Group::Speculative,
         .help = "refused: the same",
         .apply = refuse(kSynthRefusal)},
    };
}
// clang-format on

}  // namespace edgellm::cli
