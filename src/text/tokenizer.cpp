// BPE (byte-level, or Gemma 4's over raw UTF-8), SentencePiece-style and WordPiece
// tokenization over a GGUF vocabulary, as llama.cpp does it.
#include "edgellm/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <queue>
#include <unordered_map>

#include "text/pretokenizer.h"
#include "text/unicode.h"

namespace edgellm {

namespace {

const char kSpmSpace[] = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK stands for ' '

// Texts of end-of-turn tokens in the chat formats we know; such control tokens end a reply.
const char* const kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",   "<|endoftext|>",
    "<|eom_id|>", "<EOT>",      "_<EOT>",  "<|end_of_text|>", "<｜end▁of▁sentence｜>",
    "<|return|>", "<|call|>",
};

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    size_t pos = 0;
    while ((pos = s.find(from, pos)) != std::string::npos) {
        s.replace(pos, from.size(), to);
        pos += to.size();
    }
    return s;
}

// A piece of the input: raw text still to tokenize, or a special token already found.
struct Fragment {
    int32_t token;  // -1 for raw text
    std::string_view text;
};

// Symbols of a word being merged: a doubly linked list over byte ranges of the word.
struct Symbol {
    int prev, next;
    const char* text;
    size_t n;
};

// One symbol per UTF-8 character of s, linked in order.
std::vector<Symbol> split_chars(const std::string& s) {
    std::vector<Symbol> sym;
    for (size_t off = 0; off < s.size();) {
        const size_t len = std::min(s.size() - off, (size_t)unicode::utf8_len((uint8_t)s[off]));
        sym.push_back({(int)sym.size() - 1, -1, s.data() + off, len});
        off += len;
        if (off < s.size()) sym.back().next = (int)sym.size();
    }
    return sym;
}

// The merge loop both tokenizers share: repeatedly merge the adjacent pair with the best
// priority (the leftmost among equals) until no pair qualifies. priority(l, r) gives the
// pair's priority, or nothing when the pair may not merge; `better(a, b)` orders them.
template <typename P, typename Priority, typename Better>
void merge_pairs(std::vector<Symbol>& sym, Priority priority, Better better) {
    struct Bigram {
        int left, right;
        P prio;
        size_t size;
    };
    auto worse = [&](const Bigram& a, const Bigram& b) {
        return better(b.prio, a.prio) || (!better(a.prio, b.prio) && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto try_add = [&](int l, int r) {
        if (l < 0 || r < 0) return;
        const std::optional<P> p = priority(l, r);
        if (p) queue.push({l, r, *p, sym[(size_t)l].n + sym[(size_t)r].n});
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add((int)i - 1, (int)i);
    while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        Symbol& l = sym[(size_t)b.left];
        Symbol& r = sym[(size_t)b.right];
        if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
        l.n += r.n;
        r.n = 0;
        l.next = r.next;
        if (r.next >= 0) sym[(size_t)r.next].prev = b.left;
        try_add(l.prev, b.left);
        try_add(b.left, l.next);
    }
}

}  // namespace

struct Tokenizer::Impl {
    std::unordered_map<std::string, int32_t> token_to_id;
    std::unordered_map<std::string, int32_t> bpe_rank;  // "left right" -> merge rank
    std::unique_ptr<PreTokenizer> pre;
    std::vector<int32_t> special;  // matched in raw text, longest first
    int32_t byte_token[256];       // <0xAB> byte fallback tokens (-1 when missing)
    size_t max_token_len = 0;      // WordPiece: the longest match worth trying, in bytes
    bool lowercase = true, strip_accents = true;  // WordPiece's normalizer
};

Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const GgufFile& f) {
    using R = Result<std::unique_ptr<Tokenizer>>;
    const std::string where = f.path() + ": ";
    const auto model = f.get_string("tokenizer.ggml.model");
    if (!model) return R::fail(where + "no tokenizer (tokenizer.ggml.model missing)");
    std::unique_ptr<Tokenizer> t(new Tokenizer());
    t->impl_ = std::make_unique<Impl>();
    Impl& d = *t->impl_;
    if (*model == "gpt2" || *model == "gemma4")
        t->kind_ = Kind::Bpe;
    else if (*model == "llama")
        t->kind_ = Kind::Spm;
    else if (*model == "bert")
        t->kind_ = Kind::Wpm;
    else
        return R::fail(where + "tokenizer model \"" + *model +
                       "\" is not supported (supported: gpt2 = byte-level BPE, gemma4 = Gemma "
                       "4's BPE, llama = SentencePiece, bert = WordPiece)");

    const GgufArray* tokens = f.get_array("tokenizer.ggml.tokens");
    if (!tokens || tokens->elem_type != GgufType::STRING || tokens->count == 0)
        return R::fail(where + "tokenizer.ggml.tokens missing or not an array of strings");
    t->text_ = tokens->strings;
    const size_t n = t->text_.size();
    t->score_.assign(n, 0.0f);
    if (const GgufArray* s = f.get_array("tokenizer.ggml.scores")) {
        if (s->count != n) return R::fail(where + "tokenizer.ggml.scores has the wrong length");
        for (size_t i = 0; i < n; ++i) t->score_[i] = (float)s->float_at(i).value_or(0.0);
    }
    t->attr_.assign(n, TokenAttr::Normal);
    if (const GgufArray* a = f.get_array("tokenizer.ggml.token_type")) {
        if (a->count != n) return R::fail(where + "tokenizer.ggml.token_type has the wrong length");
        for (size_t i = 0; i < n; ++i) {
            const int64_t v = a->int_at(i).value_or(1);
            t->attr_[i] = (v >= 1 && v <= 6) ? (TokenAttr)v : TokenAttr::Normal;
        }
    }
    d.token_to_id.reserve(n);  // (no rehashing while 150k names go in: start-up time)
    for (size_t i = 0; i < n; ++i) {
        d.token_to_id[t->text_[i]] = (int32_t)i;
        d.max_token_len = std::max(d.max_token_len, t->text_[i].size());
    }

    auto id_key = [&](const char* key, int32_t def) -> int32_t {
        const auto v = f.get_int(key);
        if (!v) return def;
        return (*v >= 0 && *v < (int64_t)n) ? (int32_t)*v : -1;
    };
    // The defaults of each kind (llama.cpp's), then what the metadata says.
    if (t->kind_ == Kind::Spm) {
        t->bos_ = id_key("tokenizer.ggml.bos_token_id", 1);
        t->eos_ = id_key("tokenizer.ggml.eos_token_id", 2);
        t->unk_ = id_key("tokenizer.ggml.unknown_token_id", 0);
        t->add_bos_ = true;
        t->add_space_prefix_ = true;
        t->escaped_spaces_ = true;
    } else if (t->kind_ == Kind::Wpm) {
        // [CLS] text [SEP]; words are "▁word" and the pieces that continue them
        t->bos_ = id_key("tokenizer.ggml.bos_token_id", 101);
        t->eos_ = id_key("tokenizer.ggml.eos_token_id", -1);
        t->unk_ = id_key("tokenizer.ggml.unknown_token_id", 100);
        t->sep_ = id_key("tokenizer.ggml.seperator_token_id", 102);  // (sic: llama.cpp's key)
        t->add_bos_ = true;
        t->escaped_spaces_ = true;
        d.lowercase = f.get_bool("tokenizer.ggml.normalizer.lowercase").value_or(true);
        d.strip_accents =
            f.get_bool("tokenizer.ggml.normalizer.strip_accents").value_or(d.lowercase);
    } else {
        // Gemma 4's vocabulary names no pre-tokenizer: its model implies it. Without one,
        // a byte-level vocabulary gets llama.cpp's "default" expressions, as there.
        t->pre_name_ =
            *model == "gemma4" ? "gemma4" : f.get_string("tokenizer.ggml.pre").value_or("default");
        auto pre = PreTokenizer::create(t->pre_name_);
        if (!pre) return R::fail(where + pre.error());
        d.pre = std::move(*pre);
        const PreTokenizer::Traits& tr = d.pre->traits();
        const int32_t def = *model == "gemma4" ? -1 : 11;
        t->bos_ = id_key("tokenizer.ggml.bos_token_id", def);
        t->eos_ = id_key("tokenizer.ggml.eos_token_id", def);
        t->unk_ = id_key("tokenizer.ggml.unknown_token_id", -1);
        t->add_bos_ = tr.add_bos;
        t->escaped_spaces_ = tr.spaces_as_u2581;
    }
    t->eot_ = id_key("tokenizer.ggml.eot_token_id", -1);
    t->add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token").value_or(t->add_bos_);
    if (d.pre && d.pre->traits().force_bos) t->add_bos_ = true;
    t->add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
    t->add_space_prefix_ =
        f.get_bool("tokenizer.ggml.add_space_prefix").value_or(t->add_space_prefix_);

    if (t->kind_ == Kind::Bpe) {
        const GgufArray* merges = f.get_array("tokenizer.ggml.merges");
        if (!merges || merges->elem_type != GgufType::STRING)
            return R::fail(where + "BPE needs tokenizer.ggml.merges");
        d.bpe_rank.reserve(merges->strings.size());
        for (size_t i = 0; i < merges->strings.size(); ++i) {
            const std::string& m = merges->strings[i];
            const size_t sp = m.find(' ', 1);
            if (sp == std::string::npos)
                return R::fail(where + "tokenizer.ggml.merges[" + std::to_string(i) +
                               "] is not \"left right\"");
            d.bpe_rank.emplace(m, (int32_t)i);  // the first of duplicate merges wins
        }
    }

    // Byte fallback tokens "<0xAB>" (SentencePiece, Gemma 4).
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        auto it = d.token_to_id.find(buf);
        d.byte_token[b] = it != d.token_to_id.end() ? it->second : -1;
    }

    // Special tokens matched in raw text: control, user-defined and unknown, longest first.
    for (size_t i = 0; i < n; ++i) {
        const TokenAttr a = t->attr_[i];
        if ((a == TokenAttr::Control || a == TokenAttr::UserDefined || a == TokenAttr::Unknown) &&
            !t->text_[i].empty())
            d.special.push_back((int32_t)i);
    }
    std::stable_sort(d.special.begin(), d.special.end(), [&](int32_t a, int32_t b) {
        return t->text_[(size_t)a].size() > t->text_[(size_t)b].size();
    });

    // End of generation: EOS, EOT, and control tokens whose text ends a turn.
    auto add_eog = [&](int32_t id) {
        if (id >= 0 && std::find(t->eog_.begin(), t->eog_.end(), id) == t->eog_.end())
            t->eog_.push_back(id);
    };
    add_eog(t->eos_);
    add_eog(t->eot_);
    add_eog(id_key("tokenizer.ggml.eom_token_id", -1));
    for (const char* text : kEndOfTurnTexts) {
        auto it = d.token_to_id.find(text);
        if (it == d.token_to_id.end()) continue;
        const TokenAttr a = t->attr_[(size_t)it->second];
        if (a == TokenAttr::Control || a == TokenAttr::UserDefined) {
            add_eog(it->second);
            if (t->eot_ < 0 && std::strcmp(text, "<|endoftext|>") != 0) t->eot_ = it->second;
        }
    }
    return t;
}

const char* Tokenizer::kind_name(Kind k) {
    static const char* const names[] = {"BPE", "SentencePiece", "WordPiece"};  // Kind's order
    return names[(size_t)k];
}

std::optional<int32_t> Tokenizer::find(std::string_view text) const {
    auto it = impl_->token_to_id.find(std::string(text));
    if (it == impl_->token_to_id.end()) return std::nullopt;
    return it->second;
}

bool Tokenizer::is_eog(int32_t id) const {
    return std::find(eog_.begin(), eog_.end(), id) != eog_.end();
}

namespace {

// Split raw text around every occurrence of the special tokens (longest first).
std::vector<Fragment> partition(const Tokenizer& t, const std::vector<int32_t>& special,
                                std::string_view text, bool parse_special) {
    std::vector<Fragment> frags;
    if (!text.empty()) frags.push_back({-1, text});
    for (int32_t id : special) {
        const TokenAttr a = t.attr(id);
        if (!parse_special && (a == TokenAttr::Control || a == TokenAttr::Unknown)) continue;
        const std::string& tt = t.token_text(id);
        std::vector<Fragment> next;
        for (const Fragment& f : frags) {
            if (f.token >= 0) {
                next.push_back(f);
                continue;
            }
            size_t start = 0;
            for (;;) {
                const size_t hit = f.text.find(tt, start);
                if (hit == std::string_view::npos) break;
                if (hit > start) next.push_back({-1, f.text.substr(start, hit - start)});
                next.push_back({id, {}});
                start = hit + tt.size();
            }
            if (start < f.text.size()) next.push_back({-1, f.text.substr(start)});
        }
        frags.swap(next);
    }
    return frags;
}

// BERT's normalizer and pre-tokenizer, as llama.cpp has them: accents stripped (a
// character becomes the first of its canonical decomposition, marks are dropped),
// lowercase, control characters dropped; words end at whitespace, and each punctuation
// mark, ASCII symbol and CJK ideograph is a word of its own.
std::vector<std::string> wordpiece_words(std::string_view text, bool lowercase,
                                         bool strip_accents) {
    auto is_cjk = [](uint32_t c) {
        return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
               (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
               (c >= 0x2B740 && c <= 0x2B81F) ||
               (c >= 0x2B920 && c <= 0x2CEAF) ||  // (BERT's is 0x2B820; HF's, llama.cpp's 0x2B920)
               (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
    };
    auto is_ascii_symbol = [](uint32_t c) {
        return c > 0x20 && c < 0x7F && !(c >= '0' && c <= '9') && !(c >= 'A' && c <= 'Z') &&
               !(c >= 'a' && c <= 'z');
    };
    std::vector<std::string> words(1);
    for (size_t pos = 0; pos < text.size();) {
        uint32_t cp = unicode::decode(text, &pos);
        if (strip_accents) cp = unicode::decomposition_base(cp);
        if (unicode::is_whitespace(cp)) {
            if (!words.back().empty()) words.emplace_back();
            continue;
        }
        if (cp == 0 || cp == 0xFFFD || unicode::is_control(cp)) continue;
        if (strip_accents && unicode::is_mark(cp)) continue;
        std::string ch;
        unicode::append_utf8(lowercase ? unicode::to_lower(cp) : cp, &ch);
        if (unicode::is_punctuation(cp) || is_ascii_symbol(cp) || is_cjk(cp)) {
            if (!words.back().empty()) words.emplace_back();
            words.back() = std::move(ch);
            words.emplace_back();
        } else {
            words.back() += ch;
        }
    }
    if (words.back().empty()) words.pop_back();
    return words;
}

// WordPiece: each word, as "▁word", becomes the longest tokens that spell it from the left;
// a word that cannot be spelled entirely is one unknown token.
void wordpiece(const Tokenizer::Impl& d, std::string_view text, int32_t unk,
               std::vector<int32_t>* out) {
    for (const std::string& word : wordpiece_words(text, d.lowercase, d.strip_accents)) {
        const std::string w = kSpmSpace + word;
        const size_t start = out->size();
        for (size_t i = 0; i < w.size();) {
            size_t j = std::min(w.size(), i + d.max_token_len);
            for (; j > i; --j) {
                auto it = d.token_to_id.find(w.substr(i, j - i));
                if (it == d.token_to_id.end()) continue;
                out->push_back(it->second);
                break;
            }
            if (j == i) {
                out->resize(start);
                break;
            }
            i = j;
        }
        if (out->size() == start && unk >= 0) out->push_back(unk);
    }
}

}  // namespace

std::vector<int32_t> Tokenizer::tokenize(std::string_view text, bool add_special,
                                         bool parse_special) const {
    const Impl& d = *impl_;
    std::vector<int32_t> out;
    // (WordPiece always opens with [CLS] when special tokens are added, as in llama.cpp)
    if (add_special && (add_bos_ || kind_ == Kind::Wpm) && bos_ >= 0) out.push_back(bos_);
    const std::vector<Fragment> frags = partition(*this, d.special, text, parse_special);

    if (kind_ == Kind::Spm) {
        bool prev_special = true;  // a space prefix goes before the first text
        for (const Fragment& f : frags) {
            if (f.token >= 0) {
                out.push_back(f.token);
                prev_special = true;
                continue;
            }
            std::string s;
            if (add_space_prefix_ && prev_special) s = " ";
            s.append(f.text);
            s = replace_all(std::move(s), " ", kSpmSpace);
            prev_special = false;

            // Start from single UTF-8 characters, then repeatedly merge the adjacent pair
            // whose concatenation is the token with the highest score (leftmost on ties).
            // Merge the pair whose concatenation is the token with the highest score.
            std::vector<Symbol> sym = split_chars(s);
            std::unordered_map<std::string, std::pair<int, int>> rev_merge;
            merge_pairs<float>(
                sym,
                [&](int l, int r) -> std::optional<float> {
                    const std::string pair(sym[(size_t)l].text,
                                           sym[(size_t)l].n + sym[(size_t)r].n);
                    auto it = d.token_to_id.find(pair);
                    if (it == d.token_to_id.end()) return std::nullopt;
                    rev_merge[pair] = {l, r};
                    return score_[(size_t)it->second];
                },
                [](float a, float b) { return a > b; });
            // Emit: a symbol that is a token, or the pieces it was merged from, or bytes.
            std::function<void(const char*, size_t)> emit = [&](const char* p, size_t len) {
                const std::string piece(p, len);
                auto it = d.token_to_id.find(piece);
                if (it != d.token_to_id.end()) {
                    out.push_back(it->second);
                    return;
                }
                auto rm = rev_merge.find(piece);
                if (rm == rev_merge.end()) {
                    for (unsigned char c : piece) {
                        const int32_t bt = d.byte_token[c];
                        if (bt >= 0)
                            out.push_back(bt);
                        else if (unk_ >= 0)
                            out.push_back(unk_);
                    }
                    return;
                }
                const Symbol& a = sym[(size_t)rm->second.first];
                emit(p, (size_t)(sym[(size_t)rm->second.second].text - a.text));
                emit(sym[(size_t)rm->second.second].text,
                     len - (size_t)(sym[(size_t)rm->second.second].text - a.text));
            };
            for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[(size_t)i].next)
                emit(sym[(size_t)i].text, sym[(size_t)i].n);
        }
    } else if (kind_ == Kind::Wpm) {
        for (const Fragment& f : frags) {
            if (f.token >= 0)
                out.push_back(f.token);
            else
                wordpiece(d, f.text, unk_, &out);
        }
    } else {
        const PreTokenizer::Traits& tr = d.pre->traits();
        for (const Fragment& f : frags) {
            if (f.token >= 0) {
                out.push_back(f.token);
                continue;
            }
            std::string clean = unicode::sanitize(f.text);
            if (tr.spaces_as_u2581) clean = replace_all(std::move(clean), " ", kSpmSpace);
            for (std::string_view word : d.pre->split(clean)) {
                // Byte-level: every byte of the word becomes its printable character.
                std::string w;
                if (tr.byte_level)
                    for (unsigned char c : word) w += unicode::byte_to_text(c);
                else
                    w.assign(word);
                if (tr.ignore_merges ||
                    (tr.whole_newline_runs && word.find_first_not_of('\n') == word.npos)) {
                    auto it = d.token_to_id.find(w);
                    if (it != d.token_to_id.end()) {
                        out.push_back(it->second);
                        continue;
                    }
                }
                // Merge the pair with the lowest merge rank.
                std::vector<Symbol> sym = split_chars(w);
                std::string key;
                merge_pairs<int32_t>(
                    sym,
                    [&](int l, int r) -> std::optional<int32_t> {
                        key.assign(sym[(size_t)l].text, sym[(size_t)l].n);
                        key += ' ';
                        key.append(sym[(size_t)r].text, sym[(size_t)r].n);
                        auto it = d.bpe_rank.find(key);
                        if (it == d.bpe_rank.end()) return std::nullopt;
                        return it->second;
                    },
                    [](int32_t a, int32_t b) { return a < b; });
                for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[(size_t)i].next) {
                    const std::string piece(sym[(size_t)i].text, sym[(size_t)i].n);
                    auto it = d.token_to_id.find(piece);
                    if (it != d.token_to_id.end()) {
                        out.push_back(it->second);
                        continue;
                    }
                    // Not a token: its bytes one by one, as single-character tokens
                    // (byte-level: a vocabulary without every byte) or <0xAB> tokens.
                    for (unsigned char c : piece) {
                        if (!tr.byte_level) {
                            if (d.byte_token[c] >= 0) out.push_back(d.byte_token[c]);
                            continue;
                        }
                        auto bt = d.token_to_id.find(std::string(1, (char)c));
                        if (bt != d.token_to_id.end()) out.push_back(bt->second);
                    }
                }
            }
        }
    }
    if (add_special && kind_ == Kind::Wpm && sep_ >= 0) out.push_back(sep_);
    if (add_special && add_eos_ && eos_ >= 0 && kind_ != Kind::Wpm) out.push_back(eos_);
    return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
    if (id < 0 || id >= n_vocab()) return {};
    const std::string& text = text_[(size_t)id];
    switch (attr_[(size_t)id]) {
        case TokenAttr::Control:
            return special ? text : std::string();
        case TokenAttr::Unknown:
            return special ? text : std::string("\xE2\x96\x85");  // U+2585 as llama.cpp shows it
        case TokenAttr::Unused:
            return {};
        case TokenAttr::UserDefined:
            return text;
        case TokenAttr::Byte:
            if (escaped_spaces_ && text.size() == 6 && text.rfind("<0x", 0) == 0)
                return std::string(1, (char)std::stoi(text.substr(3, 2), nullptr, 16));
            [[fallthrough]];
        default:
            break;
    }
    if (escaped_spaces_) return replace_all(text, kSpmSpace, " ");
    // Byte-level BPE: every character of the token text is one byte.
    std::string out;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t start = pos;
        const uint32_t cp = unicode::decode(text, &pos);
        const int b = unicode::text_to_byte(cp);
        if (b >= 0)
            out.push_back((char)b);
        else
            out.append(text, start, pos - start);
    }
    return out;
}

std::string Tokenizer::detokenize(std::span<const int32_t> ids, bool special) const {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
        std::string piece = token_to_piece(ids[i], special);
        // SentencePiece: the space prefix added before the first word is not part of the text.
        if (i == 0 && kind_ == Kind::Spm && add_space_prefix_ && !piece.empty() && piece[0] == ' ')
            piece.erase(0, 1);
        out += piece;
    }
    return out;
}

std::string StreamingDetokenizer::push(int32_t id) {
    pending_ += tok_.token_to_piece(id, special_);
    const size_t n = unicode::complete_prefix(pending_);
    std::string out = pending_.substr(0, n);
    pending_.erase(0, n);
    return out;
}

std::string StreamingDetokenizer::flush() {
    std::string out = unicode::sanitize(pending_);
    pending_.clear();
    return out;
}

}  // namespace edgellm
