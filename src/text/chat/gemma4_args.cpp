#include "text/chat/gemma4_args.h"

#include "text/chat/text_scan.h"

#include "edgellm/grammar.h"

#include <cctype>

namespace edgellm {

namespace {

constexpr std::string_view kQuote = "<|\"|>";
// Bounds on what is held before it is written: a key and a bare word are short.
constexpr size_t kMaxKey = 256;
constexpr size_t kMaxWord = 64;
constexpr size_t kMaxDepth = 64;

bool word_char(char c) {
    return std::isalnum((unsigned char)c) || c == '.' || c == '+' || c == '-' || c == '_';
}

// A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
bool json_number(std::string_view s) {
    size_t i = 0;
    auto digits = [&] {
        const size_t from = i;
        while (i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
        return i > from;
    };
    if (i < s.size() && s[i] == '-') ++i;
    if (i < s.size() && s[i] == '0') {
        ++i;
    } else if (!digits()) {
        return false;
    }
    if (i < s.size() && s[i] == '.') {
        ++i;
        if (!digits()) return false;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        ++i;
        if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
        if (!digits()) return false;
    }
    return i == s.size();
}

}  // namespace

Gemma4Args::Step Gemma4Args::end_word(std::string* out) {
    // (the template prints Python's True / False / None where a value is not JSON's)
    if (buf_ == "true" || buf_ == "True") {
        *out += "true";
    } else if (buf_ == "false" || buf_ == "False") {
        *out += "false";
    } else if (buf_ == "null" || buf_ == "None") {
        *out += "null";
    } else if (json_number(buf_)) {
        *out += buf_;
    } else {
        return Step::Bad;
    }
    buf_.clear();
    at_ = At::AfterValue;
    return Step::More;
}

Gemma4Args::Step Gemma4Args::close(char c, std::string* out) {
    if (levels_.empty() || levels_.back().open != (c == '}' ? '{' : '[')) return Step::Bad;
    levels_.pop_back();
    *out += c;
    at_ = At::AfterValue;
    return levels_.empty() ? Step::End : Step::More;
}

Gemma4Args::Step Gemma4Args::feed(char c, std::string* out) {
    switch (at_) {
        case At::Start:
            if (is_blank(c)) return Step::More;
            if (c != '{') return Step::Bad;
            *out += '{';
            levels_.push_back({'{', true});
            at_ = At::KeyOrClose;
            return Step::More;
        case At::KeyOrClose:
            if (is_blank(c)) return Step::More;
            if (c == '}') return close(c, out);
            if (c == ':' || c == ',' || c == '{' || c == '[' || c == ']') return Step::Bad;
            buf_.assign(1, c);
            at_ = At::Key;
            return Step::More;
        case At::Key: {
            if (c == '}' || buf_.size() >= kMaxKey) return Step::Bad;
            if (c != ':') {
                buf_ += c;
                return Step::More;
            }
            // A key written as a string (<|"|>k<|"|> or "k") is its text.
            std::string_view key = trim(buf_);
            if (key.size() >= 2 * kQuote.size() && key.substr(0, kQuote.size()) == kQuote &&
                key.substr(key.size() - kQuote.size()) == kQuote)
                key = key.substr(kQuote.size(), key.size() - 2 * kQuote.size());
            else if (key.size() >= 2 && key.front() == '"' && key.back() == '"')
                key = key.substr(1, key.size() - 2);
            if (key.empty()) return Step::Bad;
            Level& level = levels_.back();
            if (!level.first) *out += ',';
            level.first = false;
            *out += '"';
            for (char k : key) append_json_escaped(k, out);
            *out += "\":";
            buf_.clear();
            at_ = At::Value;
            return Step::More;
        }
        case At::Value: {
            if (is_blank(c)) return Step::More;
            Level& level = levels_.back();
            if (level.open == '[' && c == ']') return close(c, out);
            if (c == '}' || c == ']' || c == ',' || c == ':') return Step::Bad;
            if (level.open == '[') {
                if (!level.first) *out += ',';
                level.first = false;
            }
            if (c == '<') {
                buf_.assign(1, c);
                at_ = At::Mark;
            } else if (c == '{' || c == '[') {
                if (levels_.size() >= kMaxDepth) return Step::Bad;
                *out += c;
                levels_.push_back({c, true});
                at_ = c == '{' ? At::KeyOrClose : At::Value;
            } else if (word_char(c)) {
                buf_.assign(1, c);
                at_ = At::Word;
            } else {
                return Step::Bad;
            }
            return Step::More;
        }
        case At::Mark:
            buf_ += c;
            if (buf_ == kQuote) {
                *out += '"';
                buf_.clear();
                at_ = At::String;
                return Step::More;
            }
            return kQuote.substr(0, buf_.size()) == buf_ ? Step::More : Step::Bad;
        case At::String:
            if (buf_.empty() && c != '<') {
                append_json_escaped(c, out);
                return Step::More;
            }
            buf_ += c;
            if (buf_ == kQuote) {
                *out += '"';
                buf_.clear();
                at_ = At::AfterValue;
                return Step::More;
            }
            // What cannot begin the closing mark is text (the mark has one '<', at its start).
            while (!buf_.empty() && kQuote.substr(0, buf_.size()) != buf_) {
                append_json_escaped(buf_[0], out);
                buf_.erase(0, 1);
            }
            return Step::More;
        case At::Word:
            if (word_char(c)) {
                if (buf_.size() >= kMaxWord) return Step::Bad;
                buf_ += c;
                return Step::More;
            }
            if (end_word(out) == Step::Bad) return Step::Bad;
            return feed(c, out);  // the byte after the word, in AfterValue
        case At::AfterValue:
            if (is_blank(c)) return Step::More;
            if (c == '}' || c == ']') return close(c, out);
            if (c != ',') return Step::Bad;
            at_ = levels_.back().open == '{' ? At::KeyOrClose : At::Value;
            return Step::More;
    }
    return Step::Bad;
}

std::optional<std::string> gemma4_args_to_json(std::string_view s, size_t* used) {
    Gemma4Args args;
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        const Gemma4Args::Step step = args.feed(s[i], &out);
        if (step == Gemma4Args::Step::Bad) return std::nullopt;
        if (step == Gemma4Args::Step::End) {
            *used = i + 1;
            return out;
        }
    }
    return std::nullopt;
}

const char* const kGemma4ValueRules =
    "g-dict ::= \"{\" tc-ws ( g-kv ( \",\" tc-ws g-kv )* tc-ws )? \"}\"\n"
    "g-kv ::= g-key \":\" tc-ws g-value\n"
    "g-key ::= [A-Za-z_$] [A-Za-z0-9_$.-]{0,63}\n"
    "g-value ::= g-string | g-dict | g-array | g-number | \"true\" | \"false\" | \"null\"\n"
    "g-array ::= \"[\" tc-ws ( g-value ( \",\" tc-ws g-value )* tc-ws )? \"]\"\n"
    "g-string ::= \"<|\\\"|>\" g-char* \"<|\\\"|>\"\n"
    "g-char ::= [^<] | \"<\" [^|] | \"<|\" [^\"] | \"<|\\\"\" [^|] | \"<|\\\"|\" [^>]\n"
    "g-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "g-number ::= g-int ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n";

namespace {

using json = nlohmann::ordered_json;

// The deepest schema nesting written out; below it, any value.
constexpr int kMaxSchemaDepth = 8;

// A key the notation writes bare (the parser reads a key up to its ':').
bool bare_key(const std::string& k) {
    if (k.empty() || k.size() > 64) return false;
    for (char c : k)
        if (!std::isalnum((unsigned char)c) && c != '_' && c != '$' && c != '.' && c != '-') return false;
    return true;
}

// A constant in the notation (an enum's member).
std::optional<std::string> literal_of(const json& v) {
    if (v.is_string()) {
        const std::string s = v.get<std::string>();
        if (s.find(std::string(kQuote)) != std::string::npos) return std::nullopt;
        return gbnf_literal(std::string(kQuote) + s + std::string(kQuote));
    }
    if (v.is_number() || v.is_boolean() || v.is_null()) return gbnf_literal(v.dump());
    return std::nullopt;
}

std::string schema_rule(const json& s, const std::string& name, std::string* rules, int depth) {
    if (!s.is_object() || depth > kMaxSchemaDepth) return "g-value";
    std::vector<std::string> alts;
    if (s.contains("enum") || s.contains("const")) {
        const json members = s.contains("const") ? json::array({s["const"]}) : s["enum"];
        if (!members.is_array() || members.empty()) return "g-value";
        for (const json& m : members) {
            auto lit = literal_of(m);
            if (!lit) return "g-value";
            alts.push_back(*lit);
        }
    } else {
        const json types = s.contains("type") ? (s["type"].is_array() ? s["type"] : json::array({s["type"]}))
                                              : json::array();
        if (types.empty()) return "g-value";
        int part = 0;
        for (const json& t : types) {
            const std::string type = t.is_string() ? t.get<std::string>() : "";
            if (type == "string") {
                alts.push_back("g-string");
            } else if (type == "integer") {
                alts.push_back("g-int");
            } else if (type == "number") {
                alts.push_back("g-number");
            } else if (type == "boolean") {
                alts.push_back("( \"true\" | \"false\" )");
            } else if (type == "null") {
                alts.push_back("\"null\"");
            } else if (type == "array") {
                const std::string item = schema_rule(s.contains("items") ? s["items"] : json(),
                                                     name + "-" + std::to_string(part++) + "-item", rules,
                                                     depth + 1);
                alts.push_back("\"[\" tc-ws ( " + item + " ( \",\" tc-ws " + item + " )* tc-ws )? \"]\"");
            } else if (type == "object") {
                const json props = s.contains("properties") ? s["properties"] : json();
                bool typed = props.is_object() && !props.empty();
                std::vector<std::string> members;
                if (typed) {
                    for (const auto& [k, v] : props.items()) {
                        if (!bare_key(k)) {
                            typed = false;
                            break;
                        }
                        members.push_back(gbnf_literal(k) + " \":\" tc-ws " +
                                          schema_rule(v, name + "-" + std::to_string(part++), rules, depth + 1));
                    }
                }
                if (!typed) {
                    alts.push_back("g-dict");
                    continue;
                }
                const std::string kv = name + "-kv" + std::to_string(part++);
                *rules += kv + " ::= ";
                for (size_t i = 0; i < members.size(); ++i) *rules += (i ? " | " : "") + members[i];
                *rules += "\n";
                alts.push_back("\"{\" tc-ws ( " + kv + " ( \",\" tc-ws " + kv + " )* tc-ws )? \"}\"");
            } else {
                return "g-value";
            }
        }
    }
    *rules += name + " ::= ";
    for (size_t i = 0; i < alts.size(); ++i) *rules += (i ? " | " : "") + alts[i];
    *rules += "\n";
    return name;
}

}  // namespace

std::string gemma4_schema_rule(const json& schema, const std::string& name, std::string* rules) {
    return schema_rule(schema, name, rules, 0);
}

}  // namespace edgellm
