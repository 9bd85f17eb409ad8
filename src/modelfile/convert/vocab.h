// A checkpoint's tokenizer as GGUF metadata, read as llama.cpp's converter reads it: its
// SentencePiece readers (tokenizer.model with the added tokens of added_tokens.json,
// tokenizer_config.json and, for Phi-3, tokenizer.json), its byte-level BPE reader
// (tokenizer.json's vocabulary, added tokens and merges, the pre-tokenizer named as
// llama.cpp names it), its reader of SentencePiece-style BPE through transformers' fast
// tokenizer (LlamaHfVocab: Gemma 4's) and its SpecialVocab (the special token ids, whether BOS/EOS are
// added, the chat template). Errors are thrown as edgellm::Error naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "modelfile/convert/hf_config.h"
#include "modelfile/convert/pre_tokenizer.h"

namespace edgellm::convert {

class VocabReader {
  public:
    // family_pre: the pre-tokenizer name to try first (the family's usual one).
    VocabReader(std::string dir, const HfConfig& cfg, std::string family_pre);

    // False (writing nothing) when there is no tokenizer.model. phi3: Phi-3's reading.
    bool sentencepiece(bool phi3);
    void bpe();
    // llama.cpp's LlamaHfVocab (HfConvert::vocab_llama_hf).
    void llama_hf(const std::string& model, const std::vector<std::string>& user_defined);
    void set(const std::string& key, GgufValue v);  // (replacing a key in its place)
    void remove(const std::string& key);

    const Kv& kv() const { return kv_; }
    int64_t n_tokens() const { return n_tokens_; }
    const std::string& pre_how() const { return pre_how_; }  // how the BPE pre-tokenizer was named

  private:
    void special_vocab(bool load_merges, int64_t n_vocab);
    std::string dir_;
    const HfConfig& cfg_;
    std::string family_pre_;
    Kv kv_;
    int64_t n_tokens_ = 0;
    std::string pre_how_;
};

// llama.cpp's does_token_look_special: texts some models mark as not special that are.
bool token_looks_special(const std::string& t);

}  // namespace edgellm::convert
