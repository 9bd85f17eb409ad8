// Where tests find the shared reference data: $EDGELLM_SHARED_DIR, else ../shared next to
// the repository (fixed at configure time).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace edgellm::test {

inline std::filesystem::path shared_dir() {
    if (const char* env = std::getenv("EDGELLM_SHARED_DIR"); env && *env) return env;
    return EDGELLM_SHARED_DIR;
}

inline std::filesystem::path golden_dir() {
    return shared_dir() / "reference" / "golden";
}

// Where scripts/fetch-models.sh puts the real models: $EDGELLM_MODELS, else
// ~/.cache/edgellm/models.
inline std::filesystem::path models_dir() {
    if (const char* env = std::getenv("EDGELLM_MODELS"); env && *env) return env;
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : "/root") / ".cache" / "edgellm" / "models";
}

// Where scripts/fetch-vocabs.sh puts llama.cpp's vocabulary-only GGUFs and their test
// cases: $EDGELLM_VOCABS, else ~/.cache/edgellm/vocab.
inline std::filesystem::path vocab_dir() {
    if (const char* env = std::getenv("EDGELLM_VOCABS"); env && *env) return env;
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : "/root") / ".cache" / "edgellm" / "vocab";
}

// llama.cpp's file models/<name> (e.g. "ggml-vocab-gpt-2.gguf"): from vocab_dir(), else
// from the shared reference data, which holds some of them; empty when neither has it.
inline std::filesystem::path vocab_file(const std::string& name) {
    for (const auto& dir : {vocab_dir(), shared_dir() / "reference" / "tokenizer"})
        if (std::filesystem::exists(dir / name)) return dir / name;
    return {};
}

// The first of the named model files that has been fetched; empty when none has.
inline std::filesystem::path real_model(std::initializer_list<const char*> files) {
    for (const char* f : files)
        if (std::filesystem::exists(models_dir() / f)) return models_dir() / f;
    return {};
}

// The Qwen2.5 models the packages ship (both have the same vocabulary).
inline std::filesystem::path qwen_model() {
    return real_model(
        {"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"});
}

// How much longer a time bound may be: 1 natively, 10 when the tests run under an emulator
// (qemu for a cross-compiled build; EDGELLM_TEST_WRAPPER is its command).
inline double emulation_slowdown() {
#ifdef EDGELLM_TEST_WRAPPER
    return EDGELLM_TEST_WRAPPER[0] ? 10.0 : 1.0;
#else
    return 1.0;
#endif
}

// A directory of the test's own under /tmp (mkdtemp: a fresh name each time), removed with
// everything in it when the test ends.
struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& prefix = "edgellm-test") {
        std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + " failed");
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    // A file at rel (its directories made) holding text.
    std::filesystem::path file(const std::string& rel, const std::string& text = "GGUF") const {
        const std::filesystem::path p = path / rel;
        std::filesystem::create_directories(p.parent_path());
        std::ofstream(p) << text;
        return p;
    }
};

}  // namespace edgellm::test
