// Text <-> token ids, as the model's own tokenizer does it: BPE (GPT-2's byte-level style
// with the pre-tokenizer named by tokenizer.ggml.pre, or Gemma 4's over raw UTF-8),
// SentencePiece-style (scores, byte fallback) or WordPiece (BERT), with special tokens,
// BOS/EOS from metadata, and a streaming detokenizer that never emits half a UTF-8
// character.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/error.h"
#include "edgellm/gguf.h"

namespace edgellm {

// tokenizer.ggml.token_type values.
enum class TokenAttr : uint8_t {
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

class Tokenizer {
  public:
    // llama.cpp's vocabulary types (LLAMA_VOCAB_TYPE_*): BPE also covers Gemma 4's.
    enum class Kind { Bpe, Spm, Wpm };
    static const char* kind_name(Kind k);  // "BPE", "SentencePiece", "WordPiece"

    // Read the vocabulary from GGUF metadata. Refuses tokenizer models it does not know.
    static Result<std::unique_ptr<Tokenizer>> load(const GgufFile& f);
    ~Tokenizer();

    // Text -> ids. add_special: BOS/EOS as the metadata asks. parse_special: text such as
    // "<|im_start|>" becomes the control token (otherwise it is tokenized as plain text;
    // user-defined tokens are always recognised, as in llama.cpp).
    std::vector<int32_t> tokenize(std::string_view text, bool add_special,
                                  bool parse_special) const;

    // The bytes one token stands for. Control tokens give their text only when `special`.
    std::string token_to_piece(int32_t id, bool special) const;
    std::string detokenize(std::span<const int32_t> ids, bool special) const;

    Kind kind() const { return kind_; }
    int32_t n_vocab() const { return (int32_t)text_.size(); }
    const std::string& token_text(int32_t id) const { return text_[(size_t)id]; }
    TokenAttr attr(int32_t id) const { return attr_[(size_t)id]; }
    std::optional<int32_t> find(std::string_view text) const;

    int32_t bos() const { return bos_; }  // -1 when the vocabulary has none
    int32_t eos() const { return eos_; }
    int32_t eot() const { return eot_; }
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    // End of generation: EOS, EOT, and the end-of-turn tokens of the chat formats.
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_tokens() const { return eog_; }
    const std::string& pre() const { return pre_name_; }

    struct Impl;

  private:
    Tokenizer() = default;
    Kind kind_ = Kind::Bpe;
    std::vector<std::string> text_;
    std::vector<float> score_;
    std::vector<TokenAttr> attr_;
    int32_t bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1;
    int32_t sep_ = -1;  // WordPiece: ends the input when special tokens are added
    bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
    // Token texts spell ' ' as U+2581 (SentencePiece, WordPiece, Gemma 4's BPE).
    bool escaped_spaces_ = false;
    std::vector<int32_t> eog_;
    std::string pre_name_;
    std::unique_ptr<Impl> impl_;
};

// Turns a stream of tokens into text, holding back bytes until they form whole UTF-8
// characters (a multi-byte character may span several byte tokens).
class StreamingDetokenizer {
  public:
    explicit StreamingDetokenizer(const Tokenizer& t, bool special = false)
        : tok_(t), special_(special) {}
    // The text that became complete with this token (possibly empty).
    std::string push(int32_t id);
    // Whatever is left at the end (invalid bytes as U+FFFD).
    std::string flush();

  private:
    const Tokenizer& tok_;
    bool special_;
    std::string pending_;
};

}  // namespace edgellm
