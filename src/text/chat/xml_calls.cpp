#include "text/chat/xml_calls.h"

#include "text/chat/call_tags.h"
#include "text/chat/text_scan.h"

#include "edgellm/grammar.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace edgellm {

namespace {

using json = nlohmann::ordered_json;
using call_tags::kFunction;
using call_tags::kFunctionEnd;

constexpr std::string_view kParam = "<parameter=";
constexpr std::string_view kParamEnd = "</parameter>";
constexpr std::string_view kNewlineParamEnd = "\n</parameter>";
// Bounds on what is held before it is written: names are short.
constexpr size_t kMaxName = 256;
// The deepest schema nesting read for a parameter's types; below it, any type.
constexpr int kMaxDepth = 32;

bool prefix_of(std::string_view word, std::string_view s) {
    return s.size() <= word.size() && word.substr(0, s.size()) == s;
}

uint8_t value_type(const json& v) {
    if (v.is_string()) return kXmlString;
    if (v.is_number_integer()) return kXmlInteger;
    if (v.is_number()) return kXmlNumber;
    if (v.is_boolean()) return kXmlBoolean;
    if (v.is_null()) return kXmlNull;
    return v.is_object() ? kXmlObject : kXmlArray;
}

uint8_t type_named(const json& t) {
    static const std::pair<const char*, uint8_t> kNames[] = {
        {"string", kXmlString}, {"integer", kXmlInteger}, {"number", kXmlNumber}, {"boolean", kXmlBoolean},
        {"null", kXmlNull},     {"object", kXmlObject},   {"array", kXmlArray}};
    for (const auto& [name, bit] : kNames)
        if (t == name) return bit;
    return 0;
}

// "#", "#/$defs/NAME" and "#/definitions/NAME", as the JSON Schema grammar resolves them.
const json* resolve(const json& ref, const json& root) {
    if (!ref.is_string()) return nullptr;
    const std::string r = ref.get<std::string>();
    if (r == "#") return &root;
    for (const char* defs : {"$defs", "definitions"}) {
        const std::string prefix = std::string("#/") + defs + "/";
        if (r.rfind(prefix, 0) != 0 || !root.contains(defs) || !root[defs].is_object()) continue;
        auto it = root[defs].find(r.substr(prefix.size()));
        if (it != root[defs].end()) return &*it;
    }
    return nullptr;
}

// The types a schema admits (a schema without `type` those its keywords are about, as the
// JSON Schema grammar reads it; any when it says nothing).
uint8_t schema_types(const json& s, const json& root, int depth) {
    if (!s.is_object() || depth > kMaxDepth) return kXmlAny;
    uint8_t t = kXmlAny;
    if (s.contains("$ref"))
        if (const json* target = resolve(s["$ref"], root)) t &= schema_types(*target, root, depth + 1);
    const json members = s.contains("const") ? json::array({s["const"]}) : s.value("enum", json());
    if (members.is_array() && !members.empty()) {
        uint8_t u = 0;
        for (const json& m : members) u |= value_type(m);
        t &= u;
    }
    if (s.contains("type")) {
        uint8_t u = 0;
        for (const json& name : s["type"].is_array() ? s["type"] : json::array({s["type"]})) u |= type_named(name);
        t &= u;
    } else {
        static const std::pair<const char*, uint8_t> kKeywords[] = {
            {"properties", kXmlObject}, {"required", kXmlObject},    {"additionalProperties", kXmlObject},
            {"items", kXmlArray},       {"prefixItems", kXmlArray},  {"minItems", kXmlArray},
            {"maxItems", kXmlArray},    {"minLength", kXmlString},   {"maxLength", kXmlString},
            {"pattern", kXmlString},    {"format", kXmlString},      {"minimum", kXmlInteger | kXmlNumber},
            {"maximum", kXmlInteger | kXmlNumber}};
        uint8_t u = 0;
        for (const auto& [key, bits] : kKeywords)
            if (s.contains(key)) u |= bits;
        if (u) t &= u;
    }
    for (const char* any : {"anyOf", "oneOf"})
        if (s.contains(any) && s[any].is_array()) {
            uint8_t u = 0;
            for (const json& branch : s[any]) u |= schema_types(branch, root, depth + 1);
            t &= u;
        }
    if (s.contains("allOf") && s["allOf"].is_array())
        for (const json& branch : s["allOf"]) t &= schema_types(branch, root, depth + 1);
    return t;
}

// A JSON value of these types (an integer is a number too).
bool fits(const json& v, uint8_t types) {
    const uint8_t t = value_type(v);
    return (t & types) || (t == kXmlInteger && (types & kXmlNumber));
}

std::string json_text(std::string_view raw) {
    std::string out = "\"";
    for (char c : raw) append_json_escaped(c, &out);
    return out + "\"";
}

// Whether a schema says no more than its types (and annotations, and the keys in `also`):
// then any value of those types is valid against it.
bool only_types(const json& s, std::initializer_list<const char*> also = {}) {
    static const std::set<std::string> kPlain = {"type",    "description", "title",     "default",
                                                 "examples", "$comment",   "deprecated", "nullable"};
    if (!s.is_object()) return s.is_boolean() && s.get<bool>();
    for (const auto& [key, value] : s.items()) {
        if (kPlain.count(key)) continue;
        if (std::find_if(also.begin(), also.end(), [&](const char* a) { return key == a; }) == also.end())
            return false;
    }
    return true;
}

// `key` as a JSON path step
std::string path_step(const std::string& key) {
    bool plain = !key.empty() && !(key[0] >= '0' && key[0] <= '9');
    for (char c : key) plain = plain && (std::isalnum((unsigned char)c) || c == '_' || c == '$');
    return plain ? "." + key : "[" + json_text(key) + "]";
}

}  // namespace

// ---- types ----------------------------------------------------------------------------------

XmlToolTypes::XmlToolTypes(const json& tools) {
    if (!tools.is_array()) return;
    for (const json& t : tools) {
        const json fn = t.is_object() ? t.value("function", json()) : json();
        if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
        const json params = fn.value("parameters", json());
        if (!params.is_object() || !params.contains("properties") || !params["properties"].is_object()) continue;
        auto& types = tools_[fn["name"].get<std::string>()];
        for (const auto& [key, schema] : params["properties"].items()) types[key] = schema_types(schema, params, 0);
    }
}

uint8_t XmlToolTypes::types(const std::string& tool, const std::string& param) const {
    auto t = tools_.find(tool);
    if (t == tools_.end()) return kXmlAny;
    auto p = t->second.find(param);
    return p == t->second.end() ? kXmlAny : p->second;
}

std::string xml_value_json(std::string_view raw, uint8_t types) {
    const uint8_t other = types & ~kXmlString;
    if (other) {
        const std::string_view t = trim(raw);
        json v = json::parse(t, nullptr, false);
        if (v.is_discarded()) {
            if (t == "True" || t == "False") v = t == "True";
            else if (t == "None") v = nullptr;
        }
        if (!v.is_discarded() && !v.is_string() && fits(v, other))
            return v.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    return json_text(raw);
}

// ---- reading a call -------------------------------------------------------------------------

void XmlCall::reset() {
    *this = XmlCall(types_);
}

void XmlCall::value_byte(char c, std::string* out) {
    if (value_types_ == kXmlString)
        append_json_escaped(c, out);
    else
        value_ += c;
}

XmlCall::Step XmlCall::end_value(std::string* out) {
    *out += value_types_ == kXmlString ? std::string("\"") : xml_value_json(value_, value_types_);
    value_.clear();
    buf_.clear();
    at_ = At::Between;
    return Step::More;
}

XmlCall::Step XmlCall::feed(char c, std::string* out) {
    switch (at_) {
        case At::Open:
            buf_ += c;
            if (!prefix_of(kFunction, buf_)) return Step::Bad;
            if (buf_.size() == kFunction.size()) {
                buf_.clear();
                at_ = At::Name;
            }
            return Step::More;
        case At::Name:
            if (c == '>') {
                if (name_.empty()) return Step::Bad;
                *out += '{';
                at_ = At::Between;
                return Step::Named;
            }
            if (c == '<' || c == '\n' || name_.size() >= kMaxName) return Step::Bad;
            name_ += c;
            return Step::More;
        case At::Between:
            if (is_blank(c)) return Step::More;
            if (c != '<') return Step::Bad;
            buf_.assign(1, c);
            at_ = At::Tag;
            return Step::More;
        case At::Tag:
            buf_ += c;
            if (buf_ == kParam) {
                buf_.clear();
                at_ = At::Param;
                return Step::More;
            }
            if (buf_ == kFunctionEnd) {
                *out += '}';
                return Step::End;
            }
            return prefix_of(kParam, buf_) || prefix_of(kFunctionEnd, buf_) ? Step::More : Step::Bad;
        case At::Param: {
            if (c != '>') {
                if (c == '<' || c == '\n' || buf_.size() >= kMaxName) return Step::Bad;
                buf_ += c;
                return Step::More;
            }
            const std::string key(trim(buf_));
            if (key.empty()) return Step::Bad;
            if (!first_) *out += ',';
            first_ = false;
            *out += json_text(key) + ":";
            value_types_ = types_ ? types_->types(name_, key) : kXmlAny;
            if (value_types_ == kXmlString) *out += '"';
            buf_.clear();
            at_ = At::ValueStart;
            return Step::More;
        }
        case At::ValueStart:
            at_ = At::Value;
            if (c == '\n') return Step::More;  // (the newline after the tag is not the value's)
            [[fallthrough]];
        case At::Value:
            // The value ends at "</parameter>", a newline before it not its own: what may
            // still become that is held.
            buf_ += c;
            if (buf_ == kNewlineParamEnd || buf_ == kParamEnd) return end_value(out);
            while (!buf_.empty() && !prefix_of(kNewlineParamEnd, buf_) && !prefix_of(kParamEnd, buf_)) {
                value_byte(buf_[0], out);
                buf_.erase(0, 1);
            }
            return Step::More;
    }
    return Step::Bad;
}

std::optional<ToolCall> xml_tool_call(std::string_view s, const std::vector<std::string>& names,
                                      const XmlToolTypes& types, size_t* used) {
    XmlCall call(&types);
    std::string args;
    size_t i = 0;
    while (i < s.size() && is_blank(s[i])) ++i;
    for (; i < s.size(); ++i) {
        const XmlCall::Step step = call.feed(s[i], &args);
        if (step == XmlCall::Step::Bad) return std::nullopt;
        if (step == XmlCall::Step::Named &&
            std::find(names.begin(), names.end(), call.name()) == names.end())
            return std::nullopt;
        if (step == XmlCall::Step::End) {
            const json obj = json::parse(args, nullptr, false);
            if (!obj.is_object()) return std::nullopt;
            *used = i + 1;
            return ToolCall{call.name(), obj.dump(-1, ' ', false, json::error_handler_t::replace)};
        }
    }
    return std::nullopt;
}

// ---- the grammar ----------------------------------------------------------------------------

void gbnf_text_without(const std::vector<std::string_view>& words, const std::string& name,
                       std::string* rules) {
    // What follows a '<': the words' tails, and the proper prefixes of them that may still
    // become one. Text is chars other than '<', or a '<' with such a prefix and a char that
    // continues no word (and is no '<', which starts afresh), or a '<' with a prefix and
    // then another '<' or the end.
    std::set<std::string> tails, prefixes = {""};
    for (std::string_view w : words) {
        const std::string tail(w.substr(1));
        tails.insert(tail);
        for (size_t k = 1; k < tail.size(); ++k) prefixes.insert(tail.substr(0, k));
    }
    for (const std::string& t : tails) prefixes.erase(t);
    std::string broken, open;
    for (const std::string& p : prefixes) {
        std::set<char> next;
        for (const std::string& t : tails)
            if (t.size() > p.size() && t.compare(0, p.size(), p) == 0) next.insert(t[p.size()]);
        std::string cls = "[^<";
        for (char c : next) cls += gbnf_escape((unsigned char)c, true);
        cls += "]";
        broken += (broken.empty() ? "" : " | ") + (p.empty() ? cls : gbnf_literal(p) + " " + cls);
        if (!p.empty()) open += (open.empty() ? "" : " | ") + gbnf_literal(p);
    }
    *rules += name + "-lt ::= \"<\" ( " + broken + " )\n";
    *rules += name + "-open ::= \"<\"" + (open.empty() ? "" : " ( " + open + " )?") + "\n";
    *rules += name + " ::= ( [^<] | " + name + "-open* " + name + "-lt )* " + name + "-open*\n";
}

std::string xml_shared_rules() {
    std::string rules;
    gbnf_text_without({kParamEnd}, "x-raw", &rules);
    rules += "x-any-param ::= \"<parameter=\" [^<>\\n]{1,64} \">\\n\" x-raw \"\\n</parameter>\\n\"\n";
    return rules;
}

void refuse_tool_schema(const SchemaRefusal& cause, size_t index, const std::string& name,
                        const std::string& at, SchemaRefusal* why) {
    *why = cause;
    why->path = "$.tools[" + std::to_string(index) + "].function.parameters" + at +
                (why->path.size() > 1 ? why->path.substr(1) : std::string());
    why->message = "tools[" + std::to_string(index) + "] (" + name + "): " + why->message;
}

std::optional<std::string> xml_call_rule(const json& fn, size_t index, JsonSchemaGrammar& b,
                                         std::string* rules, bool* typed, SchemaRefusal* why) {
    const std::string name = fn["name"].get<std::string>();
    const std::string rule = "x-t" + std::to_string(index);
    const json params = fn.contains("parameters") && fn["parameters"].is_object() ? fn["parameters"] : json::object();
    // What the parameters' object says beyond its properties is checked on the finished call.
    static const std::set<std::string> kFollowed = {
        "type", "properties", "required", "additionalProperties", "description", "title", "$schema", "$id",
        "$defs", "definitions", "$comment", "strict", "examples", "default"};
    for (const auto& [key, value] : params.items())
        if (!kFollowed.count(key)) *typed = false;
    // The declared parameters, then required names not among them (of any value).
    std::vector<std::pair<std::string, json>> declared;
    std::set<std::string> required;
    if (params.contains("required") && params["required"].is_array())
        for (const json& r : params["required"])
            if (r.is_string()) required.insert(r.get<std::string>());
    const json props = params.value("properties", json::object());
    if (props.is_object())
        for (const auto& [key, schema] : props.items()) declared.emplace_back(key, schema);
    for (const std::string& r : required)
        if (!props.is_object() || !props.contains(r)) declared.emplace_back(r, json::object());

    std::string body = gbnf_literal("<function=" + name + ">\n");
    if (declared.empty()) {  // any parameters, unless the schema says none
        const json extra = params.value("additionalProperties", json(true));
        if (!extra.is_boolean() || extra.get<bool>()) {
            body += " x-any-param{0,16}";
            if (!extra.is_boolean() && !(extra.is_object() && extra.empty())) *typed = false;
        }
    }
    for (size_t i = 0; i < declared.size(); ++i) {
        const auto& [key, schema] = declared[i];
        const std::string at = ".properties" + path_step(key);
        if (key.empty() || key.find_first_of("<>\n") != std::string::npos) {
            refuse_tool_schema({"properties", "$", "the parameter name " + json_text(key) +
                                                       " cannot be written in a <parameter=NAME> tag"},
                               index, name, at, why);
            return std::nullopt;
        }
        const uint8_t types = schema_types(schema, params, 0);
        std::string value = "x-raw";
        if (types == kXmlString) {
            // an enum's members as they are written, else any text
            const json members =
                schema.contains("const") ? json::array({schema["const"]}) : schema.value("enum", json());
            std::string alts;
            for (const json& m : members.is_array() ? members : json::array()) {
                if (!m.is_string() || m.get<std::string>().find(kParamEnd) != std::string::npos) {
                    alts.clear();
                    break;
                }
                alts += (alts.empty() ? "" : " | ") + gbnf_literal(m.get<std::string>());
            }
            if (!alts.empty()) value = "( " + alts + " )";
            if (!only_types(schema, {"enum", "const"}) || (alts.empty() && !members.is_null())) *typed = false;
        } else if (types & kXmlString) {  // text, or a value of another type
            if (!only_types(schema)) *typed = false;
        } else if (types && !(types & ~(kXmlBoolean | kXmlNull)) && only_types(schema)) {
            // (Python's spellings too, as the template writes earlier calls' values)
            value = std::string("( ") + (types & kXmlBoolean ? "\"true\" | \"false\" | \"True\" | \"False\"" : "") +
                    (types == (kXmlBoolean | kXmlNull) ? " | " : "") + (types & kXmlNull ? "\"null\" | \"None\"" : "") +
                    " )";
        } else {  // JSON of its schema ($defs resolved against the parameters' object)
            json s = schema;
            if (s.is_object())
                for (const char* defs : {"$defs", "definitions"})
                    if (params.contains(defs) && !s.contains(defs)) s[defs] = params[defs];
            auto r = b.add(s, rule + "-p" + std::to_string(i));
            if (!r) {
                refuse_tool_schema(b.refusal(), index, name, at, why);
                return std::nullopt;
            }
            value = *r;
        }
        const std::string p = gbnf_literal("<parameter=" + key + ">\n") + " " + value + " " +
                              gbnf_literal("\n</parameter>\n");
        body += " " + (required.count(key) ? p : "( " + p + " )?");
    }
    *rules += rule + " ::= " + body + " " + gbnf_literal("</function>\n") + "\n";
    return rule;
}

}  // namespace edgellm
