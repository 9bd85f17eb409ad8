// Pre-tokenization for byte-level BPE: the text is split into words by a sequence of
// regular expressions named by `tokenizer.ggml.pre` (each splits the pieces the previous
// one produced; matches and the gaps between them both become pieces), as the model's
// original tokenizer does. Unicode classes (\p{L}, \p{N}, \p{P}, \s) come from PCRE2.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/error.h"

namespace edgellm {

class PreTokenizer {
  public:
    // nullopt-like failure for an unknown name. Known: default, gpt-2 (and its aliases),
    // llama-bpe / llama3, qwen2, deepseek-llm, deepseek-coder, starcoder, falcon, ...
    static Result<std::unique_ptr<PreTokenizer>> create(const std::string& name);
    ~PreTokenizer();

    // Split valid UTF-8 text into words (byte ranges of `text`).
    std::vector<std::string_view> split(std::string_view text) const;

    const std::string& name() const { return name_; }
    // Llama 3's tokenizer takes a word that is itself a token whole, without merges.
    bool ignore_merges() const { return ignore_merges_; }

  private:
    PreTokenizer() = default;
    struct Regex;
    std::string name_;
    bool ignore_merges_ = false;
    std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace edgellm
