// libFuzzer target for the GBNF parser and matcher. Build with clang:
//   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DEDGELLM_FUZZ=ON && cmake --build
//   build-fuzz --target fuzz_grammar && build-fuzz/bin/fuzz_grammar -max_total_time=60
// Every input must parse or be refused with "line L, column C: ...". A grammar that parses
// must print (to_string) as a grammar that parses and accepts the same strings. Then a
// matcher over a vocabulary of the 256 bytes, an end token and some multi-byte pieces takes
// a few seeded random walks through the grammar and, at every step, must keep its
// invariants:
//   - allows(t) == accept(t) on a clone, for every token; a refused accept changes nothing;
//   - mask() leaves finite exactly the allowed tokens, and count_allowed() counts them;
//   - a multi-byte piece fits exactly when its bytes fit one at a time;
//   - the end token fits exactly when can_end(); must_end() means nothing else fits;
//   - after the end token: finished(), nothing fits;
//   - the text walked is a sentence (or a prefix) for a fresh matcher and for the reparse.
// The input's own bytes and the text of its quoted literals are fed with accept_bytes() too.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/grammar.h"

using edgellm::Grammar;
using edgellm::GrammarMatcher;
using edgellm::GrammarVocab;

namespace {

constexpr int32_t kEnd = 256;
// Pieces after the end token: words, a character split in two, lone lead bytes.
const char* const kExtra[] = {"ab",           "{\"",      "true", "\xE4\xBD", "\xA0",
                              "\xE4\xBD\xA0", "\":",      "  ",   "\xC3\xA9", "\xF0\x9F\x98\x80",
                              "\xF0\x9F",     "\x98\x80", "0123", "\"}",      "\n"};
constexpr int32_t kFirstExtra = 257;

// Stay within libFuzzer's time budget: grammars whose states hold huge stack sets are
// legal but slow, and the parser alone is what most inputs exercise.
constexpr size_t kMaxPrintedGrammar = 1 << 16;
constexpr int kWalks = 3;
constexpr int kSteps = 48;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "fuzz_grammar: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            std::abort();                                                                 \
        }                                                                                 \
    } while (0)

const std::shared_ptr<const GrammarVocab>& vocab() {
    static const std::shared_ptr<const GrammarVocab> v = [] {
        std::vector<std::string> pieces;
        for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, (char)b));
        pieces.push_back("");
        for (const char* p : kExtra) pieces.push_back(p);
        return GrammarVocab::from_pieces(std::move(pieces), {kEnd});
    }();
    return v;
}

uint64_t splitmix(uint64_t& s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// What a state shows: the allowed tokens, can_end, must_end, finished.
std::vector<bool> fingerprint(const GrammarMatcher& m) {
    const int32_t n = vocab()->n_vocab();
    std::vector<bool> f((size_t)n + 3);
    for (int32_t t = 0; t < n; ++t) f[(size_t)t] = m.allows(t);
    f[(size_t)n] = m.can_end();
    f[(size_t)n + 1] = m.must_end();
    f[(size_t)n + 2] = m.finished();
    return f;
}

void check_state(const GrammarMatcher& m) {
    const int32_t n = vocab()->n_vocab();
    const std::vector<bool> before = fingerprint(m);
    // mask and count
    std::vector<float> logits((size_t)n, 0.5f);
    m.mask(logits);
    size_t n_allowed = 0;
    for (int32_t t = 0; t < n; ++t) {
        const bool kept = std::isfinite(logits[(size_t)t]);
        CHECK(kept == before[(size_t)t]);
        CHECK(kept ? logits[(size_t)t] == 0.5f : logits[(size_t)t] < 0);
        n_allowed += kept;
    }
    CHECK(n_allowed == m.count_allowed());
    // the end token
    CHECK(m.allows(kEnd) == m.can_end());
    if (m.must_end()) CHECK(m.can_end() && n_allowed == 1);
    if (m.finished()) CHECK(n_allowed == 0 && !m.can_end());
    // allows agrees with accept on a clone; a refused accept leaves the clone as it was
    for (int32_t t = 0; t < n; ++t) {
        GrammarMatcher c = m;
        const bool ok = c.accept(t);
        CHECK(ok == before[(size_t)t]);
        if (!ok) CHECK(c.count_allowed() == n_allowed && c.can_end() == m.can_end());
        if (ok && t == kEnd) CHECK(c.finished() && c.count_allowed() == 0);
        if (ok && t != kEnd) CHECK(!c.finished());
    }
    // a multi-byte piece fits exactly when its bytes fit one token at a time, and
    // accept_bytes of it agrees
    for (int32_t t = kFirstExtra; t < n; ++t) {
        GrammarMatcher c = m;
        bool bytewise = !m.finished();
        for (char ch : vocab()->piece(t))
            if (bytewise) bytewise = c.accept((int32_t)(uint8_t)ch);
        CHECK(bytewise == before[(size_t)t]);
        GrammarMatcher d = m;
        CHECK(d.accept_bytes(vocab()->piece(t)) == before[(size_t)t]);
    }
    // the checks above moved only clones
    CHECK(fingerprint(m) == before);
}

// accept_bytes on the whole of `s`, and its agreement with one byte at a time; a refusal
// leaves the matcher unchanged.
void feed(const std::shared_ptr<const Grammar>& g, std::string_view s) {
    GrammarMatcher m(g, vocab());
    GrammarMatcher bytewise = m;
    size_t fit = 0;
    while (fit < s.size() && bytewise.accept((int32_t)(uint8_t)s[fit])) ++fit;
    const std::vector<bool> before = fingerprint(m);
    const bool ok = m.accept_bytes(s);
    CHECK(ok == (fit == s.size()));
    if (!ok) {
        CHECK(fingerprint(m) == before);
        // the longest prefix that fits does fit
        CHECK(m.accept_bytes(s.substr(0, fit)));
    }
    CHECK(fingerprint(m) == fingerprint(bytewise));
}

// One seeded random walk; returns the text accepted and whether the walk ended (end token).
std::string walk(const std::shared_ptr<const Grammar>& g, uint64_t seed, bool* ended) {
    GrammarMatcher m(g, vocab());
    std::string text;
    *ended = false;
    for (int step = 0; step < kSteps; ++step) {
        check_state(m);
        if (m.finished()) break;
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < vocab()->n_vocab(); ++t)
            if (m.allows(t)) allowed.push_back(t);
        if (allowed.empty()) break;
        // prefer text over ending, so walks get somewhere
        int32_t pick = allowed[splitmix(seed) % allowed.size()];
        if (pick == kEnd && allowed.size() > 1 && splitmix(seed) % 4 != 0)
            pick = allowed[splitmix(seed) % allowed.size()];
        CHECK(m.accept(pick));
        if (pick == kEnd) {
            *ended = true;
            CHECK(m.finished());
        } else {
            text += vocab()->piece(pick);
        }
        // a clone taken now and advanced does not move m
        if (!m.finished()) {
            GrammarMatcher c = m;
            const std::vector<bool> before = fingerprint(m);
            for (int32_t t = 0; t < vocab()->n_vocab(); ++t)
                if (c.allows(t) && t != kEnd) {
                    CHECK(c.accept(t));
                    break;
                }
            CHECK(fingerprint(m) == before);
        }
    }
    check_state(m);
    // reset goes back to the start
    m.reset();
    CHECK(fingerprint(m) == fingerprint(GrammarMatcher(g, vocab())));
    return text;
}

// `text` fits the grammar as a prefix; and as a whole sentence when `ended`.
void check_text(const std::shared_ptr<const Grammar>& g, const std::string& text, bool ended) {
    GrammarMatcher m(g, vocab());
    CHECK(m.accept_bytes(text));
    if (ended) CHECK(m.can_end() && m.accept(kEnd));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text((const char*)data, size);
    auto r = Grammar::parse(text);
    if (!r.ok()) {
        const std::string& e = r.error();
        CHECK(e.rfind("line ", 0) == 0 && e.find(", column ") != std::string::npos &&
              e.find(": ") != std::string::npos);
        return 0;
    }
    const std::shared_ptr<const Grammar> g = *r;
    const std::string printed = g->to_string();
    auto again = Grammar::parse(printed);
    if (!again.ok())
        std::fprintf(stderr, "printed:\n%s\nerror: %s\n", printed.c_str(), again.error().c_str());
    CHECK(again.ok());
    const std::shared_ptr<const Grammar> g2 = *again;
    CHECK(g2->n_rules() == g->n_rules());
    if (printed.size() > kMaxPrintedGrammar) return 0;

    uint64_t seed = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 0x100000001B3ull;
    for (int w = 0; w < kWalks; ++w) {
        bool ended = false;
        const std::string walked = walk(g, seed + (uint64_t)w, &ended);
        check_text(g, walked, ended);
        check_text(g2, walked, ended);  // the printed grammar accepts the same text
    }
    {  // and the other way round
        bool ended = false;
        const std::string walked = walk(g2, seed ^ 0x5DEECE66Dull, &ended);
        check_text(g, walked, ended);
    }
    // derived inputs: the input itself, and the raw text of each quoted literal
    feed(g, text);
    for (size_t i = 0; i < size;) {
        const size_t open = text.find('"', i);
        if (open == std::string_view::npos) break;
        const size_t close = text.find('"', open + 1);
        if (close == std::string_view::npos) break;
        feed(g, text.substr(open + 1, close - open - 1));
        i = close + 1;
    }
    return 0;
}
