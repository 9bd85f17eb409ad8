// Pre-tokenization for BPE: the text is split into words by a sequence of regular
// expressions named by `tokenizer.ggml.pre` (each splits the pieces the previous one
// produced; matches and the gaps between them both become pieces), as the model's original
// tokenizer does. Unicode classes (\p{L}, \p{N}, \p{P}, \p{M}, \s) come from PCRE2.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/error.h"

namespace edgellm {

class PreTokenizer {
  public:
    // What a family's tokenizer does besides splitting (llama.cpp's flags per pre-tokenizer).
    struct Traits {
        bool ignore_merges = false;  // a word that is itself a token is taken whole (Llama 3)
        bool add_bos = false;        // BOS by default (the vocabulary's add_bos_token overrides)
        bool force_bos = false;      // BOS even when add_bos_token says no (Gemma 4)
        // false: words stay raw UTF-8 (no GPT-2 byte-to-character mapping) and a symbol that
        // is not a token falls back to <0xXX> byte tokens (Gemma 4's SentencePiece-style BPE)
        bool byte_level = true;
        bool spaces_as_u2581 = false;     // ' ' becomes U+2581 before splitting (Gemma 4)
        bool whole_newline_runs = false;  // a run of newlines that is a token stays whole
    };

    // The pre-tokenizer a vocabulary names in tokenizer.ggml.pre (llama.cpp's names: default,
    // gpt-2, llama-bpe, qwen2, qwen35, gemma4, smollm, gpt-4o, ...). An unknown name is an error that
    // names it: another family's expressions would give ids the model was not trained on.
    static Result<std::unique_ptr<PreTokenizer>> create(const std::string& name);
    ~PreTokenizer();

    // Split valid UTF-8 text into words (byte ranges of `text`).
    std::vector<std::string_view> split(std::string_view text) const;

    const std::string& name() const { return name_; }
    const Traits& traits() const { return traits_; }

  private:
    PreTokenizer() = default;
    struct Regex;
    std::string name_;
    Traits traits_;
    std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace edgellm
