#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/pretokenizer.h"

#include <pcre2.h>

#include <utility>

#include "text/unicode.h"

namespace edgellm {

namespace {

// The expressions of each pre-tokenizer family, applied in order.
const char* const kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen 3.5: Qwen 2's, with combining marks (\p{M}) part of words rather than punctuation.
const char* const kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// GPT-4o's (o200k, Phi-4-mini, Llama 4): upper-case runs split from the next word, the
// contractions case-blind, digits in threes; tokenizer.json's own expression (PCRE2 takes
// it as it is; llama.cpp also lists a lookahead rewrite of it for its own engine).
const char* const kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Letters of the scripts DeepSeek's tokenizer lists explicitly, as code point ranges.
const char* const kDeepseekLetters =
    "\\s?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}"
    "\\x{1c4}-\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}"
    "\\x{37f}\\x{386}\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}"
    "\\x{48a}-\\x{52f}\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}"
    "\\x{1c90}-\\x{1cba}\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}"
    "\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}"
    "\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}"
    "\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}\\x{1fc6}-\\x{1fcc}"
    "\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}\\x{1ff2}-\\x{1ff4}"
    "\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}\\x{2115}\\x{2119}-\\x{211d}"
    "\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}\\x{212f}-\\x{2134}\\x{2139}"
    "\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}"
    "\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}"
    "\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}\\x{a771}-\\x{a787}\\x{a78b}-\\x{a78e}"
    "\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}\\x{ff21}-\\x{ff3a}"
    "\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}\\x{104d8}-\\x{104fb}"
    "\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}\\x{1e900}-\\x{1e943}]+";
const char* const kDeepseekPunct =
    "\\s?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}\\x{3000}-\\x{3002}]+";
const char* const kCjk = "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+";

struct Family {
    std::vector<const char*> names;
    std::vector<const char*> regexes;
    PreTokenizer::Traits traits;
};

// The names llama.cpp gives each family (src/llama-vocab.cpp), with its flags.
const std::vector<Family>& families() {
    using T = PreTokenizer::Traits;
    static const std::vector<Family> f = {
        {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}, {}},
        {{"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es",
          "jina-v2-de", "gigachat", "jais", "trillion", "a.x-4.0", "mellum", "modern-bert",
          "exaone4", "granite-docling"},
         {kGpt2},
         {}},
        // Llama 3 (and SmolLM3, LFM2, ...): whole-token words, BOS by default.
        {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
          "jina-v5-nano"},
         {kLlama3},
         T{.ignore_merges = true, .add_bos = true}},
        // The same expression without Llama 3's whole-token words.
        {{"dbrx", "smaug-bpe", "chatglm-bpe"}, {kLlama3}, {}},
        {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
          "grok-2", "solar-open"},
         {kQwen2},
         {}},
        {{"qwen35"}, {kQwen35}, {}},
        {{"gpt-4o", "llama4", "kanana2", "talkie"}, {kGpt4o}, {}},
        {{"deepseek-llm"},
         {"[\\r\\n]", kDeepseekLetters, kDeepseekPunct, "\\s+$", kCjk, "\\p{N}+"},
         {}},
        {{"deepseek-coder"}, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"}, {}},
        {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}, {}},
        // SmolLM and SmolLM2 too ("smollm").
        {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
          "mellum2"},
         {"\\p{N}", kGpt2},
         {}},
        // Gemma 4: SentencePiece-style BPE. Spaces become U+2581 and merges run over whole
        // lines of raw UTF-8 (a newline is never inside a merge).
        {{"gemma4", "granite-embed-multi-311m"},
         {"[^\\n]+|[\\n]+"},
         T{.force_bos = true,
           .byte_level = false,
           .spaces_as_u2581 = true,
           .whole_newline_runs = true}},
    };
    return f;
}

// Every name, for the error that refuses another.
std::string known_names() {
    std::string s;
    for (const Family& f : families())
        for (const char* n : f.names) s += (s.empty() ? "" : ", ") + std::string(n);
    return s;
}

}  // namespace

struct PreTokenizer::Regex {
    pcre2_code* code = nullptr;
    pcre2_match_data* match = nullptr;
    ~Regex() {
        if (match) pcre2_match_data_free(match);
        if (code) pcre2_code_free(code);
    }
};

PreTokenizer::~PreTokenizer() = default;

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::create(const std::string& name) {
    using R = Result<std::unique_ptr<PreTokenizer>>;
    const Family* fam = nullptr;
    for (const Family& f : families())
        for (const char* n : f.names)
            if (name == n) fam = &f;
    if (!fam)
        return R::fail("pre-tokenizer \"" + name +
                       "\" (tokenizer.ggml.pre) is not supported; supported: " + known_names());
    std::unique_ptr<PreTokenizer> p(new PreTokenizer());
    p->name_ = name;
    p->traits_ = fam->traits;
    for (const char* src : fam->regexes) {
        auto re = std::make_unique<Regex>();
        int err = 0;
        PCRE2_SIZE err_off = 0;
        // UTF + UCP: \s, \d and \w follow Unicode; $ only at the very end of the piece.
        re->code = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK,
                                 &err, &err_off, nullptr);
        if (!re->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return R::fail("pre-tokenizer \"" + name + "\": regex error at " +
                           std::to_string(err_off) + ": " + (const char*)msg);
        }
        pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // optional speed-up
        re->match = pcre2_match_data_create_from_pattern(re->code, nullptr);
        p->regexes_.push_back(std::move(re));
    }
    return p;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
    std::vector<std::string_view> pieces;
    if (!text.empty()) pieces.push_back(text);
    std::vector<std::string_view> next;
    for (const auto& re : regexes_) {
        next.clear();
        for (std::string_view piece : pieces) {
            // Each expression sees only its piece: lookaheads and $ stop at its end.
            size_t gap = 0;  // start of the text not yet emitted
            size_t pos = 0;  // where the next search starts
            while (pos < piece.size()) {
                const int rc = pcre2_match(re->code, (PCRE2_SPTR)piece.data(), piece.size(), pos,
                                           PCRE2_NO_UTF_CHECK, re->match, nullptr);
                if (rc < 0) break;
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(re->match);
                const size_t ms = ov[0], me = ov[1];
                if (me == ms) {
                    // An empty match splits nothing: search again one character later.
                    if (ms >= piece.size()) break;
                    pos = ms + unicode::utf8_len((uint8_t)piece[ms]);
                    continue;
                }
                if (ms > gap) next.push_back(piece.substr(gap, ms - gap));
                next.push_back(piece.substr(ms, me - ms));
                gap = pos = me;
            }
            if (gap < piece.size()) next.push_back(piece.substr(gap));
        }
        pieces.swap(next);
    }
    return pieces;
}

}  // namespace edgellm
