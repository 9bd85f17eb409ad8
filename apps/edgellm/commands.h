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
int cmd_convert(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_accept(const std::vector<std::string>& args);

// Shared by commands: print "edgellm <cmd>: <reason>" on stderr, return the code.
int fail(const std::string& command, const std::string& reason, int code = 1);

// Apply --kernels NAME (or $EDGELLM_KERNELS); empty reason when fine.
std::string choose_kernels(const std::string& requested);

}  // namespace edgellm::cli

#include <filesystem>

#include "edgellm/error.h"
#include "edgellm/model.h"
#include "options/options.h"

namespace edgellm::cli {
// The model used when -m is not given: $EDGELLM_MODEL, else the first default model that
// scripts/fetch-models.sh installed in $EDGELLM_MODELS (default ~/.cache/edgellm/models).
Result<std::string> default_model_path();
// $EDGELLM_MODELS, else ~/.cache/edgellm/models.
std::filesystem::path models_dir();
// Where --repack-cache keeps repacked weights by default: ~/.cache/edgellm/repacked.
std::filesystem::path repack_cache_dir();
// -m if given, else default_model_path().
Result<std::string> model_path_or_default(const Settings& s);
// The text of -p TEXT or -f FILE (exactly one; `what` names -p's value in the message); an
// exit code when there is none.
std::optional<int> input_text(const std::string& command, const Settings& s, const char* what,
                              std::string* out);
// --mlock and the warm-up read of every weight page.
bool prepare_model(const Settings& s, const Model& m, std::string* err);
}  // namespace edgellm::cli
