// Where tests find the shared reference data: $EDGELLM_SHARED_DIR, else ../shared next to
// the repository (fixed at configure time).
#pragma once

#include <cstdlib>
#include <filesystem>

namespace edgellm::test {

inline std::filesystem::path shared_dir() {
    if (const char* env = std::getenv("EDGELLM_SHARED_DIR"); env && *env) return env;
    return EDGELLM_SHARED_DIR;
}

inline std::filesystem::path golden_dir() { return shared_dir() / "reference" / "golden"; }

}  // namespace edgellm::test
