// The subcommands of the edgellm binary. Each takes its arguments (after the subcommand
// name) and returns the process exit code: 0 ok, 1 failure, 2 bad usage.
#pragma once

#include <string>
#include <vector>

namespace edgellm::cli {

int cmd_logits(const std::vector<std::string>& args);
int cmd_inspect(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);
int cmd_detokenize(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_perplexity(const std::vector<std::string>& args);
int cmd_quantize(const std::vector<std::string>& args);
int cmd_synth(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_accept(const std::vector<std::string>& args);

// Shared by commands: print "edgellm <cmd>: <reason>" on stderr, return the code.
int fail(const std::string& command, const std::string& reason, int code = 1);

// Apply --kernels NAME (or $EDGELLM_KERNELS); empty reason when fine.
std::string choose_kernels(const std::string& requested);

}  // namespace edgellm::cli

#include <memory>
#include <optional>

#include "edgellm/tensor_type.h"

namespace edgellm::cli {
// "f16", "q8_0", ... -> the KV cache type (any of kv_cache_types()).
std::optional<TensorType> parse_kv_type(const std::string& s);
// The KV cache types' names, comma-separated.
std::string kv_type_names();
// "1 2 3" -> ids; false with a reason for anything that is not a non-negative integer.
bool parse_token_ids(const std::string& s, std::vector<int32_t>* out, std::string* err);
}  // namespace edgellm::cli

#include "args.h"
#include <filesystem>

#include "edgellm/error.h"
#include "edgellm/model.h"
#include "edgellm/grammar.h"
#include "edgellm/sampler.h"

namespace edgellm::cli {
// The model used when -m is not given: $EDGELLM_MODEL, else the first default model that
// scripts/fetch-models.sh installed in $EDGELLM_MODELS (default ~/.cache/edgellm/models).
Result<std::string> default_model_path();
// $EDGELLM_MODELS, else ~/.cache/edgellm/models.
std::filesystem::path models_dir();
// Where --repack-cache keeps repacked weights by default: ~/.cache/edgellm/repacked.
std::filesystem::path repack_cache_dir();
// -m if given, else default_model_path().
Result<std::string> model_path_or_default(const ArgParser& p);

// Parse a command's arguments: on a usage error print "edgellm CMD: reason" and give 2;
// on --help print the help and give 0; nullopt when the command should go on.
std::optional<int> parse_command_line(ArgParser& p, const std::vector<std::string>& args);

// The sampling options shared by run and serve (llama.cpp's names).
void add_sampling_options(ArgParser& p);
bool read_sampling_options(const ArgParser& p, SamplerParams* s, std::string* err);

// Grammar options shared by run, serve and bench (llama.cpp's names): --grammar TEXT,
// --grammar-file FILE, -j/--json-schema JSON, -jf/--json-schema-file FILE.
void add_grammar_options(ArgParser& p);
// The grammar they give, parsed (null when none). False with the reason in *err: a GBNF
// error with its line and column, a schema keyword that cannot be enforced (with its JSON
// path), an unreadable file, or more than one of the options.
bool read_grammar_options(const ArgParser& p, std::shared_ptr<const Grammar>* out,
                          std::string* err);
// GBNF text, or a JSON schema's text (schema), compiled; null with "<where>: reason" in *err.
std::shared_ptr<const Grammar> compile_grammar_text(const std::string& text, bool schema,
                                                    const std::string& where, std::string* err);

// Thread placement and memory options shared by run, bench and serve: --cpu-mask, --cpus,
// --mlock, --no-warmup, --no-repack, --repack-cache, --no-repack-cache.
void add_cpu_options(ArgParser& p);
// How to load the model (--no-repack, --repack-cache, --no-repack-cache).
LoadOptions load_options(const ArgParser& p);
bool read_cpu_options(const ArgParser& p, ContextParams* cp, std::string* err);
// --mlock and the warm-up read of every weight page.
bool prepare_model(const ArgParser& p, const Model& m, std::string* err);
}  // namespace edgellm::cli

namespace edgellm::cli {
// The KV cache flags of every command that makes a context: -ctk / --cache-type-k and
// -ctv / --cache-type-v (each f16 unless given, as llama.cpp), and with `both_flag`
// --kv-type T for both at once.
void add_kv_options(ArgParser& p, bool both_flag = true);
// Into *k and *v (untouched for a flag not given); false with the reason.
bool read_kv_options(const ArgParser& p, TensorType* k, TensorType* v, std::string* err);
}  // namespace edgellm::cli
