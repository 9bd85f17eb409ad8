// The model commands use when -m is not given: the one scripts/fetch-models.sh installs.
#include <cstdlib>
#include <filesystem>

#include "commands.h"

namespace edgellm::cli {

namespace {

// In order of preference; the first that exists is the default.
const char* const kDefaultModels[] = {
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
};

}  // namespace

namespace {
// ~/.cache/edgellm: the models' and the repacked weights' directories are in it.
std::filesystem::path cache_home() {
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home && *home ? home : "/root") / ".cache" / "edgellm";
}
}  // namespace

std::filesystem::path models_dir() {
    if (const char* env = std::getenv("EDGELLM_MODELS"); env && *env) return env;
    return cache_home() / "models";
}

std::filesystem::path repack_cache_dir() {
    return cache_home() / "repacked";
}

Result<std::string> default_model_path() {
    if (const char* env = std::getenv("EDGELLM_MODEL"); env && *env) return std::string(env);
    const auto dir = models_dir();
    for (const char* f : kDefaultModels)
        if (std::filesystem::exists(dir / f)) return (dir / f).string();
    return Result<std::string>::fail("no -m MODEL given and no default model in " + dir.string() +
                                     " (run scripts/fetch-models.sh)");
}

Result<std::string> model_path_or_default(const Settings& s) {
    if (s.model) return *s.model;
    return default_model_path();
}

}  // namespace edgellm::cli
