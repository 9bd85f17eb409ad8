// Grammars that constrain sampling: GBNF (llama.cpp's grammar syntax), compiled once and
// matched against the model's tokens.
//
// GBNF, as llama.cpp reads it (grammars/README.md there):
//
//   root   ::= object                      # a rule; `root` is where matching starts
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= string ":" ws value
//   string ::= "\"" [^"\\\x00-\x1f]* "\""   # literals and character classes, with escapes
//   digit  ::= [0-9]                        # ranges; [^...] negates
//   ws     ::= [ \t\n]{0,20}                # x* x+ x? x{m} x{m,} x{m,n}; ( ... ) groups
//   any    ::= .                            # any character
//
// Escapes: \n \r \t \\ \" \] \[ \- \xHH \uHHHH \UHHHHHHHH. A rule may be defined over
// several lines (continuation inside parentheses or after `|`). Rules may refer to rules
// defined later; a rule that is used but never defined, a missing root, and left
// recursion (a rule that can reach itself without consuming a character) are errors.
// Errors name the line and column ("line 3, column 14: expected ::=").
//
// Matching works on Unicode code points: the matcher's state is a set of pushdown stacks
// (positions in the rules) plus a partial UTF-8 sequence (a token may end inside a
// character). States are interned in tables shared by a matcher and its clones, so a state
// is one integer: cloning a matcher (speculative decoding drafts on a clone) copies an int
// and a pointer. Transitions (state, byte) -> state are memoised, so after the first pass a
// token is checked in one table lookup per byte. The allowed-token mask of a state is
// computed by walking a byte trie of the vocabulary and cached per state.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/error.h"

namespace edgellm {

class Tokenizer;

// GBNF source for one code point inside a literal (in_class false) or a character class:
// quotes, backslash, the class's own syntax and control characters escaped, anything beyond
// ASCII as \uHHHH / \UHHHHHHHH.
std::string gbnf_escape(uint32_t cp, bool in_class);
// A GBNF literal ("...") matching exactly this UTF-8 text (invalid bytes read as U+FFFD).
std::string gbnf_literal(std::string_view utf8);

// A parsed and compiled grammar. Immutable: share it between requests and threads.
class Grammar {
  public:
    // Parse GBNF text. `root` names the start rule. Errors: "line L, column C: what".
    static Result<std::shared_ptr<const Grammar>> parse(std::string_view text,
                                                        std::string_view root = "root");
    ~Grammar();

    // The rules as GBNF again, one per line (generated rules for repetitions included);
    // for logs and tests.
    std::string to_string() const;
    size_t n_rules() const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

  private:
    Grammar() = default;
    std::unique_ptr<Impl> impl_;
};

// The vocabulary as the grammar sees it: each token's bytes (empty for control tokens, which
// a grammar never admits), the end-of-generation tokens, and a byte trie of all pieces.
// Built once per tokenizer (about 0.1 s for 150k tokens); immutable, shared.
class GrammarVocab {
  public:
    static std::shared_ptr<const GrammarVocab> build(const Tokenizer& tok);
    // For tests: the pieces directly; eog: the end-of-generation token ids.
    static std::shared_ptr<const GrammarVocab> from_pieces(std::vector<std::string> pieces,
                                                           std::vector<int32_t> eog);
    ~GrammarVocab();
    int32_t n_vocab() const;
    const std::string& piece(int32_t id) const;
    bool is_eog(int32_t id) const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

  private:
    GrammarVocab() = default;
    std::unique_ptr<Impl> impl_;
};

// Where a generation stands in a grammar. Copyable (a copy is a clone: cheap, independent
// state, the same memo tables). Not thread-safe: a matcher and its clones are used by one
// thread at a time.
class GrammarMatcher {
  public:
    GrammarMatcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const GrammarVocab> v);
    GrammarMatcher(const GrammarMatcher&);
    GrammarMatcher& operator=(const GrammarMatcher&);
    GrammarMatcher(GrammarMatcher&&) noexcept;
    GrammarMatcher& operator=(GrammarMatcher&&) noexcept;
    ~GrammarMatcher();

    // Would `token` fit here? An end-of-generation token fits only where the grammar may
    // end; a token with no bytes (a control token) never fits otherwise.
    bool allows(int32_t token) const;
    // Advance by a token (an end-of-generation token ends the match). False, with the state
    // unchanged, when it does not fit.
    bool accept(int32_t token);
    // Advance by raw bytes (text already in the output, e.g. a tool call's opening).
    // False, with the state unchanged, when they do not fit.
    bool accept_bytes(std::string_view bytes);
    // Set logits[t] = -inf for every token that cannot fit. PRECONDITION: logits.size() ==
    // n_vocab.
    void mask(std::span<float> logits) const;
    // How many tokens fit here (computes the mask).
    size_t count_allowed() const;

    // The grammar may end here (an end-of-generation token fits).
    bool can_end() const;
    // The grammar can only end here: nothing but end-of-generation fits.
    bool must_end() const;
    // No continuation at all (only after accept() of an end-of-generation token).
    bool finished() const;
    // The grammar proved too ambiguous to follow (one position with more than 4096 parses,
    // e.g. nested optional repetitions): states past that point are dead. Check it after
    // construction to refuse such a grammar up front.
    bool overflowed() const;
    // Back to the start of the grammar.
    void reset();

    struct Tables;

  private:
    std::shared_ptr<Tables> tables_;
    uint32_t state_ = 0;
    bool finished_ = false;
};

}  // namespace edgellm
