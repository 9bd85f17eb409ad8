// The option table, part 1: the model, and what the small commands read and write.
#include "options.h"

namespace edgellm::cli {

// (a row an option, laid out by hand)
// clang-format off
std::vector<Option> model_options() {
    auto set_model = [](Settings& s, const std::string& v) { s.model = v; };
    // --lora / --lora-scaled: every value with its place (the adapters' ids follow it)
    auto lora = [](bool scaled) -> Apply {
        return [scaled](const Arg& a, Settings& s, std::string*) {
            for (size_t i = 0; i < a.values.size(); ++i)
                s.serve.lora_args.push_back({a.positions[i], a.values[i], scaled});
            return true;
        };
    };
    return {
        // ---- the model ----
        {.names = {"-m", "--model"}, .metavar = "FILE", .scope = kServeAll, .group = Group::Model,
         .help = "GGUF model; without it the server is a router: every model it knows is served, "
                 "each in its own process, the request's \"model\" choosing (a request naming "
                 "none gets the default model, the one scripts/fetch-models.sh installed)",
         .apply = store(set_model), .env = "EDGELLM_MODEL"},
        {.names = {"-m", "--model"}, .metavar = "FILE",
         .scope = kRun | kBench | kPerplexity, .group = Group::Model,
         .help = "GGUF model (default: the model scripts/fetch-models.sh installed)",
         .apply = store(set_model), .env = "EDGELLM_MODEL"},
        {.names = {"-m", "--model"}, .metavar = "FILE", .scope = kLogits, .group = Group::Model,
         .help = "GGUF model file",
         .apply = store(set_model)},
        {.names = {"-m", "--model"}, .metavar = "FILE", .scope = kInspect, .group = Group::Model,
         .help = "GGUF model file (or give it as the first argument)",
         .apply = store(set_model)},
        {.names = {"-m", "--model"}, .metavar = "FILE",
         .scope = kTokenize | kDetokenize, .group = Group::Model,
         .help = "GGUF model (only its vocabulary is read)",
         .apply = store(set_model)},
        {.names = {"-hf", "-hfr", "--hf-repo"}, .metavar = "ORG/NAME[:QUANT]",
         .scope = kServe, .group = Group::Model,
         .help = "the model llama.cpp downloaded with -hf (its cache: $LLAMA_CACHE, else Hugging "
                 "Face's); edgellm never downloads",
         .apply = store([](Settings& s, const std::string& v) { s.serve.hf_repo = v; })},
        {.names = {"-hff", "--hf-file"}, .metavar = "FILE", .scope = kServe, .group = Group::Model,
         .help = "with -hf: that file of the repository",
         .apply = store([](Settings& s, const std::string& v) { s.serve.hf_file = v; })},
        {.names = {"-mu", "--model-url"}, .metavar = "URL", .scope = kServe, .group = Group::Model,
         .help = "refused: edgellm never downloads (fetch the file, pass -m)",
         .apply = refuse("edgellm never downloads; fetch the file and pass -m FILE"),
         .label = "--model-url"},
        {.names = {"-a", "--alias"}, .metavar = "NAME[,NAME...]",
         .scope = kServe, .group = Group::Model,
         .help = "the model's name in responses (default: the file name); several: all listed in "
                 "/models, the first in sorted order is its id",
         .apply = store([](Settings& s, const std::string& v) {
             s.server.aliases = split_list(v);
             s.server.alias = s.server.aliases.empty() ? "" : s.server.aliases.front();
         })},
        {.names = {"--tags"}, .metavar = "LIST", .scope = kServe, .group = Group::Model,
         .help = "comma-separated labels of the model, listed in GET /models",
         .apply = store([](Settings& s, const std::string& v) { s.server.tags = split_list(v); })},
        {.names = {"--fallback-model"}, .metavar = "FILE", .scope = kServe, .group = Group::Model,
         .help = "serve this model (GET /health: degraded) when -m cannot be loaded or does not "
                 "fit",
         .apply = store([](Settings& s, const std::string& v) { s.server.fallback_model = v; })},
        {.names = {"--lora"}, .metavar = "FILE[,FILE...]", .scope = kServe, .group = Group::Model,
         .help = "LoRA adapter (llama.cpp's GGUF adapter file) applied at scale 1; repeatable; "
                 "ids in the order given (GET /lora-adapters, a request's \"lora\": [{\"id\", "
                 "\"scale\"}])",
         .apply = lora(false)},
        {.names = {"--lora-scaled"}, .metavar = "FILE:SCALE[,...]",
         .scope = kServe, .group = Group::Model,
         .help = "LoRA adapter applied at SCALE; repeatable",
         .apply = lora(true)},
        {.names = {"--lora-init-without-apply"}, .scope = kServe, .group = Group::Model,
         .help = "load the adapters at scale 0 (POST /lora-adapters sets the scales)",
         .apply = set_flag([](Settings& s) { s.server.lora_init_without_apply = true; })},

        // ---- what the small commands read ----
        {.names = {"-p", "--prompt"}, .metavar = "TEXT", .scope = kRun, .group = Group::Input,
         .help = "prompt (with --chat: the user's message)",
         .apply = store([](Settings& s, const std::string& v) { s.io.text = v; })},
        {.names = {"-f", "--file"}, .metavar = "FILE", .scope = kRun, .group = Group::Input,
         .help = "read the prompt from a file",
         .apply = store([](Settings& s, const std::string& v) { s.io.file = v; })},
        {.names = {"-p", "--prompt"}, .metavar = "TEXT", .scope = kTokenize, .group = Group::Input,
         .help = "text to tokenize",
         .apply = store([](Settings& s, const std::string& v) { s.io.text = v; })},
        {.names = {"-f", "--file"}, .metavar = "FILE", .scope = kTokenize, .group = Group::Input,
         .help = "read the text from a file",
         .apply = store([](Settings& s, const std::string& v) { s.io.file = v; })},
        {.names = {"--tokens"}, .metavar = "\"ID ...\"", .scope = kLogits, .group = Group::Input,
         .help = "token ids, space-separated, evaluated at positions 0..n-1",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             s.io.ids.emplace();
             return parse_token_ids(a.value, &*s.io.ids, err);
         }},
        {.names = {"--tokens", "-p"}, .metavar = "\"ID ...\"",
         .scope = kDetokenize, .group = Group::Input,
         .help = "token ids, space-separated",
         .apply = [](const Arg& a, Settings& s, std::string* err) {
             s.io.ids.emplace();
             return parse_token_ids(a.value, &*s.io.ids, err);
         }},
        {.names = {"--no-bos"}, .scope = kRun, .group = Group::Input,
         .help = "do not add BOS even if the model asks for it",
         .apply = set_flag([](Settings& s) { s.run.no_bos = true; })},
        {.names = {"--no-bos"}, .scope = kTokenize, .group = Group::Input,
         .help = "do not add BOS/EOS even if the model asks for them",
         .apply = set_flag([](Settings& s) { s.io.no_bos = true; })},
        {.names = {"--parse-special"}, .scope = kTokenize, .group = Group::Input,
         .help = "turn texts such as <|im_start|> into their control tokens",
         .apply = set_flag([](Settings& s) { s.io.parse_special = true; })},

        // ---- and write ----
        {.names = {"--out", "-o"}, .metavar = "FILE", .scope = kLogits, .group = Group::Output,
         .help = "output: float32 little-endian [n_tokens][n_vocab]",
         .apply = store([](Settings& s, const std::string& v) { s.io.out = v; })},
        {.names = {"--special"}, .scope = kDetokenize, .group = Group::Output,
         .help = "render control tokens as their text",
         .apply = set_flag([](Settings& s) { s.io.special = true; })},
        {.names = {"--no-tensors"}, .scope = kInspect, .group = Group::Output,
         .help = "do not list the tensors",
         .apply = set_flag([](Settings& s) { s.io.no_tensors = true; })},
    };
}
// clang-format on

}  // namespace edgellm::cli
