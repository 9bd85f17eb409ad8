// Errors that cross a layer boundary carry their context (file, offset, field, expected vs
// found) in the message; internal invariants use EDGELLM_ASSERT, which stays on in release.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace edgellm {

// Thrown inside a module, caught at its public edge and turned into a Result.
class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A value or an error message. Public entry points that read user input return this.
template <typename T>
class Result {
  public:
    Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit on purpose
    static Result fail(std::string message) { return Result(ErrorTag{std::move(message)}); }

    bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }
    T& value() { return std::get<0>(v_); }
    const T& value() const { return std::get<0>(v_); }
    T& operator*() { return value(); }
    T* operator->() { return &value(); }
    const T& operator*() const { return value(); }
    const T* operator->() const { return &value(); }
    const std::string& error() const { return std::get<1>(v_).message; }

  private:
    struct ErrorTag {
        std::string message;
    };
    explicit Result(ErrorTag e) : v_(std::move(e)) {}
    std::variant<T, ErrorTag> v_;
};

[[noreturn]] inline void assert_fail(const char* cond, const char* file, int line,
                                     const char* msg) {
    std::fprintf(stderr, "edgellm: internal error at %s:%d: %s (%s)\n", file, line, msg, cond);
    std::abort();
}

}  // namespace edgellm

#define EDGELLM_ASSERT(cond, msg) \
    ((cond) ? (void)0 : ::edgellm::assert_fail(#cond, __FILE__, __LINE__, (msg)))
