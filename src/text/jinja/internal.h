// What every part of the Jinja2 interpreter (text/jinja.h) shares: the limits that keep a bad
// template from crashing or hanging the process, the two exceptions, and the work budget.
//
// The parts, in the order a template goes through them:
//   lexer.cpp        the template's text as tokens (lexer.h: Token)
//   parser.cpp       the tokens as a tree of statements and expressions (parser.h: Node, Expr)
//   interpreter.cpp  the tree walked: statements, expressions, operators, attribute and item
//                    access, the globals, render() (interpreter.h: Interpreter)
//   builtins_filters.cpp  the filters (`x | f`) and tests (`x is t`)
//   builtins_methods.cpp  the methods of str, list and dict (`x.strip()`)
//   value.cpp        the value type and its Python behaviour: str(), repr(), ==, <,
//                    json.dumps, values from JSON (value.h: Value)
//   py_strings.cpp   Python's text semantics: UTF-8 code points, whitespace, case mapping,
//                    split/strip/replace, float repr, int()/float() of text, % formatting
//
// Errors: the lexer and parser throw TemplateError (with the line); the value helpers and
// the interpreter throw EvalError (message only), which the innermost expression or
// statement being evaluated turns into a TemplateError carrying its line. render() turns
// both into Result::fail; nothing escapes it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace edgellm::jinja::detail {

// ---- limits: a bad template gets an error, never a crash or a hang ----------------------
constexpr int kMaxParseDepth = 100;        // nesting of expressions and of blocks
constexpr int kMaxCallDepth = 50;          // nested macro calls
constexpr int kMaxRunDepth = 400;          // nested evaluations at run time (~1 KiB of stack each)
constexpr int kMaxValueDepth = 256;        // nesting of lists and dicts
constexpr int64_t kMaxSteps = 10'000'000;  // evaluated expressions + statements + iterations
constexpr size_t kMaxStringBytes = 32u << 20;  // any one string (the output included)
constexpr size_t kMaxBuiltBytes = 256u << 20;  // all strings and lists built, summed
constexpr int64_t kMaxListLength = 100'000;    // range(), list repetition, split()

struct TemplateError : std::runtime_error {
    TemplateError(int l, const std::string& message) : std::runtime_error(message), line(l) {}
    int line;
};

struct EvalError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Work done inside one step: one expression can do far more than the steps count (compare,
// copy or print a structure shared at every level, 2^60 leaves from 60 lists; search
// 32 MiB for a needle that almost matches everywhere; `x in big_list` in a loop). It is
// counted here, in items compared, copied or printed and bytes decoded or compared.
// render() runs on one thread from start to end and resets it.
constexpr int64_t kMaxWork = 250'000'000;  // ~1-4 s of the slowest units
inline thread_local int64_t t_work = 0;
inline void work(size_t units) {
    t_work += static_cast<int64_t>(std::min<size_t>(units, kMaxWork));
    if (t_work > kMaxWork)
        throw EvalError("template takes too long (more than " + std::to_string(kMaxWork) +
                        " units of work)");
}

}  // namespace edgellm::jinja::detail
