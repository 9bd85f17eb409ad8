#include "text/chat/tool_calls.h"

#include "text/chat/gemma4_args.h"
#include "text/chat/call_tags.h"
#include "text/chat/text_scan.h"
#include "text/chat/xml_calls.h"

#include <algorithm>
#include <functional>
#include <string_view>

namespace edgellm {

namespace {

using json = nlohmann::ordered_json;

using namespace call_tags;

// What may open a call after some text: held back while streaming without a grammar.
constexpr std::string_view kOpeners[] = {kOpen, kPhiOpen, kGemmaOpen, kFunction};
// The most calls one reply may make when parallel calls are allowed.
constexpr int kMaxParallelCalls = 8;

// The inside of a ``` code fence (```json ... ```), or s itself.
std::string_view strip_fence(std::string_view s) {
    s = trim(s);
    if (s.substr(0, 3) != "```") return s;
    const size_t eol = s.find('\n');
    if (eol == std::string_view::npos) return s;
    std::string_view body = s.substr(eol + 1);
    body = trim(body);
    if (body.size() >= 3 && body.substr(body.size() - 3) == "```") body.remove_suffix(3);
    return trim(body);
}

// One call from its JSON: a declared tool's name and an object of arguments (an object,
// or a string holding one, as some models write it).
std::optional<ToolCall> call_from(const json& j, const std::vector<std::string>& names) {
    if (!j.is_object()) return std::nullopt;
    auto name = j.find("name");
    if (name == j.end() || !name->is_string()) return std::nullopt;
    const std::string n = name->get<std::string>();
    if (std::find(names.begin(), names.end(), n) == names.end()) return std::nullopt;
    auto args = j.find("arguments");
    if (args == j.end()) args = j.find("parameters");
    json obj = json::object();
    if (args != j.end()) {
        if (args->is_string()) {
            obj = json::parse(args->get<std::string>(), nullptr, false);
            if (obj.is_discarded()) return std::nullopt;
        } else {
            obj = *args;
        }
    }
    if (!obj.is_object()) return std::nullopt;
    return ToolCall{n, obj.dump(-1, ' ', false, json::error_handler_t::replace)};
}

// Calls from a JSON text: one object, or an array of objects; all of them must be calls.
std::optional<std::vector<ToolCall>> calls_from_json(std::string_view s,
                                                     const std::vector<std::string>& names) {
    const json j = json::parse(s, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    std::vector<ToolCall> calls;
    if (j.is_array()) {
        if (j.empty()) return std::nullopt;
        for (const json& x : j) {
            auto c = call_from(x, names);
            if (!c) return std::nullopt;
            calls.push_back(std::move(*c));
        }
        return calls;
    }
    auto c = call_from(j, names);
    if (!c) return std::nullopt;
    calls.push_back(std::move(*c));
    return calls;
}

// Several JSON objects one after another, separated by blanks or commas (small models write
// parallel calls so, and Llama 3 does): their extents, or nullopt when s is not only that.
std::optional<std::vector<std::string_view>> split_objects(std::string_view s, bool cut) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && (is_blank(s[i]) || s[i] == ',' || s[i] == ';')) ++i;
        if (i == s.size()) break;
        if (s[i] != '{') return std::nullopt;
        const size_t start = i;
        int depth = 0;
        bool in_string = false, escaped = false;
        for (; i < s.size(); ++i) {
            const char c = s[i];
            if (in_string) {
                if (escaped) escaped = false;
                else if (c == '\\') escaped = true;
                else if (c == '"') in_string = false;
                continue;
            }
            if (c == '"') in_string = true;
            else if (c == '{' || c == '[') ++depth;
            else if ((c == '}' || c == ']') && --depth == 0) break;
        }
        if (i == s.size()) {  // an unfinished object: dropped only when the reply was cut
            if (cut && !out.empty()) break;
            return std::nullopt;
        }
        out.push_back(s.substr(start, ++i - start));
    }
    if (out.size() < 2 && !cut) return std::nullopt;
    if (out.empty()) return std::nullopt;
    return out;
}

}  // namespace

std::vector<std::string> tool_names(const json& tools) {
    std::vector<std::string> names;
    if (!tools.is_array()) return names;
    for (const json& t : tools) {
        if (!t.is_object()) continue;
        auto fn = t.find("function");
        if (fn == t.end() || !fn->is_object()) continue;
        auto name = fn->find("name");
        if (name != fn->end() && name->is_string()) names.push_back(name->get<std::string>());
    }
    return names;
}

namespace {

// Calls in blocks between open and close tags (<tool_call>...</tool_call>), text around
// them content: nullopt when the reply has no such block, or when a block holds anything
// but calls (then the reply is content). call_at reads one block's body: the calls, and in
// *end where the body ends (its close tag, or the end of the reply when it never came).
using BlockReader = std::function<std::optional<std::vector<ToolCall>>(std::string_view t, size_t body,
                                                                        size_t* end)>;
std::optional<ParsedReply> calls_in_blocks(std::string_view t, std::string_view open, std::string_view close,
                                           const BlockReader& call_at, bool cut) {
    if (t.find(open) == std::string_view::npos) return std::nullopt;
    ParsedReply out;
    std::string content;
    size_t at = 0;
    while (at < t.size()) {
        const size_t start = t.find(open, at);
        if (start == std::string_view::npos) {
            content.append(t.substr(at));
            break;
        }
        content.append(t.substr(at, start - at));
        size_t end = t.size();
        auto calls = call_at(t, start + open.size(), &end);
        const bool closed = end < t.size() && t.substr(end, close.size()) == close;
        if (!calls && cut && !closed && !out.calls.empty()) break;
        if (!calls) return std::nullopt;
        for (auto& c : *calls) out.calls.push_back(std::move(c));
        at = closed ? end + close.size() : end;
    }
    // (cut short: the start of a next block that never came is not content)
    if (cut) content.resize(content.size() - partial_suffix(content, open));
    out.content = std::string(trim(content));
    return out;
}

// A JSON block's body: one call, or an array of calls, possibly fenced.
BlockReader json_block(std::string_view close, const std::vector<std::string>& names) {
    return [close, &names](std::string_view t, size_t body, size_t* end) {
        const size_t c = t.find(close, body);
        *end = c == std::string_view::npos ? t.size() : c;
        return calls_from_json(strip_fence(t.substr(body, *end - body)), names);
    };
}

// Where a call that ended at `after` ends its block: at the closing tag when only blanks
// come before it, else (or with no tag) right after the call.
size_t block_end(std::string_view t, size_t after, std::string_view close) {
    if (close.empty()) return after;
    size_t at = after;
    while (at < t.size() && is_blank(t[at])) ++at;
    return t.substr(at, close.size()) == close ? at : after;
}

// Qwen3.5's <function=...> call from `at` (blanks before it skipped), up to `close` after it.
std::optional<std::vector<ToolCall>> xml_call_at(std::string_view t, size_t at, size_t* end,
                                                 std::string_view close, const std::vector<std::string>& names,
                                                 const XmlToolTypes& types) {
    *end = t.size();
    size_t used = 0;
    auto call = xml_tool_call(t.substr(at), names, types, &used);
    if (!call) return std::nullopt;
    *end = block_end(t, at + used, close);
    return std::vector<ToolCall>{std::move(*call)};
}

// A <tool_call> block's body: Qwen3.5's <function=...> call, or JSON.
BlockReader tool_call_block(const std::vector<std::string>& names, const XmlToolTypes& types) {
    return [&names, &types](std::string_view t, size_t body, size_t* end) {
        if (trim_left(t.substr(body)).substr(0, kFunction.size()) != kFunction)
            return json_block(kClose, names)(t, body, end);
        return xml_call_at(t, body, end, kClose, names, types);
    };
}

// A Gemma 4 call's body: call:NAME{arguments}, up to <tool_call|> (or the reply's end).
std::optional<std::vector<ToolCall>> gemma4_call(std::string_view t, size_t body, size_t* end,
                                                 const std::vector<std::string>& names) {
    *end = t.size();
    if (t.substr(body, kGemmaCall.size()) != kGemmaCall) return std::nullopt;
    const size_t name_at = body + kGemmaCall.size();
    const size_t brace = t.find('{', name_at);
    if (brace == std::string_view::npos) return std::nullopt;
    const std::string name(t.substr(name_at, brace - name_at));
    if (std::find(names.begin(), names.end(), name) == names.end()) return std::nullopt;
    size_t used = 0;
    const auto args = gemma4_args_to_json(t.substr(brace), &used);
    if (!args) return std::nullopt;
    const json obj = json::parse(*args, nullptr, false);
    if (!obj.is_object()) return std::nullopt;
    *end = block_end(t, brace + used, kGemmaClose);
    return std::vector<ToolCall>{{name, obj.dump(-1, ' ', false, json::error_handler_t::replace)}};
}

}  // namespace

std::optional<ParsedReply> parse_tool_calls(const std::string& text,
                                            const std::vector<std::string>& names, bool cut,
                                            const json* tools) {
    if (names.empty()) return std::nullopt;
    const std::string_view t = text;
    // Tagged blocks: every block must hold calls, else the reply stays content.
    if (t.find(kGemmaOpen) != std::string_view::npos)
        return calls_in_blocks(
            t, kGemmaOpen, kGemmaClose,
            [&](std::string_view s, size_t body, size_t* end) { return gemma4_call(s, body, end, names); },
            cut);
    const XmlToolTypes types = tools ? XmlToolTypes(*tools) : XmlToolTypes();
    if (t.find(kOpen) != std::string_view::npos)
        return calls_in_blocks(t, kOpen, kClose, tool_call_block(names, types), cut);
    if (t.find(kFunction) != std::string_view::npos)  // Qwen3.5's calls without <tool_call>
        return calls_in_blocks(
            t, kFunction, kFunctionEnd,
            [&](std::string_view s, size_t body, size_t* end) {
                std::optional<std::vector<ToolCall>> calls =
                    xml_call_at(s, body - kFunction.size(), end, {}, names, types);
                if (calls) *end -= kFunctionEnd.size();  // (at its </function>)
                return calls;
            },
            cut);
    if (t.find(kPhiOpen) != std::string_view::npos)
        return calls_in_blocks(t, kPhiOpen, kPhiClose, json_block(kPhiClose, names), cut);
    ParsedReply out;
    std::string_view s = trim(t);
    for (std::string_view prefix : {kPythonTag, kFunctools})
        if (s.substr(0, prefix.size()) == prefix) s = trim(s.substr(prefix.size()));
    s = strip_fence(s);
    if (s.empty() || (s.front() != '{' && s.front() != '[')) return std::nullopt;
    auto calls = calls_from_json(s, names);
    if (!calls) {
        // parallel calls as objects one after another
        auto parts = split_objects(s, cut);
        if (!parts) return std::nullopt;
        calls.emplace();
        for (std::string_view part : *parts) {
            auto c = calls_from_json(part, names);
            if (!c || c->size() != 1) return std::nullopt;
            calls->push_back(std::move((*c)[0]));
        }
    }
    out.calls = std::move(*calls);
    return out;
}

size_t tool_safe_prefix(const std::string& text) {
    const std::string_view t = text;
    size_t lead = 0;
    while (lead < t.size() && is_blank(t[lead])) ++lead;
    if (lead == t.size()) return 0;  // only blanks so far: a call may follow
    const std::string_view rest = t.substr(lead);
    // A reply that opens like JSON, a code fence or a tag may be one call: all held.
    if (rest.front() == '{' || rest.front() == '[' || rest.front() == '`') return 0;
    for (std::string_view word : {kPythonTag, kOpen, kPhiOpen, kGemmaOpen, kFunction, kFunctools})
        if (word.substr(0, std::min(word.size(), rest.size())) == rest.substr(0, word.size()))
            return 0;
    size_t safe = t.size();
    for (std::string_view word : kOpeners) {
        const size_t open = t.find(word);
        safe = std::min(safe, open != std::string_view::npos ? open : t.size() - partial_suffix(t, word));
    }
    return safe;
}

ToolFormat tool_format_for_template(const std::string& t) {
    if (t.find("'<|tool_call>call:'") != std::string::npos) return ToolFormat::Gemma4;
    if (t.find("<tool_call>") != std::string::npos && t.find("<function=") != std::string::npos &&
        t.find("<parameter=") != std::string::npos)
        return ToolFormat::QwenXml;
    if (t.find("<|tool|>") != std::string::npos) return ToolFormat::Phi4Mini;
    if (t.find("<tool_call>") != std::string::npos) return ToolFormat::Hermes;
    if (t.find("<|python_tag|>") != std::string::npos || t.find("\"parameters\"") != std::string::npos ||
        (t.find("<|start_header_id|>") != std::string::npos && t.find("tools") != std::string::npos))
        return ToolFormat::Llama3;
    return ToolFormat::Hermes;
}

bool template_renders_tools(const std::string& t) {
    return t.find("tools") != std::string::npos;
}

std::string tool_system_prompt(const json& tools) {
    std::string s =
        "You can call functions to help the user. The functions, as JSON schemas:\n<tools>\n";
    for (const json& t : tools) s += t.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    s += "</tools>\n\nTo call a function, answer with only this, one block per call:\n"
         "<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments as a JSON "
         "object>}\n</tool_call>\nOtherwise answer the user normally.";
    return s;
}

std::string answer_schema_prompt(const json& schema) {
    return "Call a function when one is needed. When you answer without calling one, your whole "
           "answer is one JSON object valid against this JSON schema:\n" + schema.dump();
}

namespace {

// Gemma 4's thinking channel, which may come before its calls or the answer
constexpr const char* kGemmaThought =
    "tc-thought ::= \"<|channel>thought\" ( [^<] | \"<\" [^c] )* \"<channel|>\"\n";

}  // namespace

std::optional<ToolGrammar> tool_call_grammar(const json& tools, ToolFormat fmt,
                                             const std::string& choice, bool parallel,
                                             SchemaRefusal* why, const json* answer, bool thinking_open) {
    JsonSchemaGrammar b;
    std::vector<std::string> alts;
    std::string gemma_rules;  // (Gemma 4: the rules of its tools' arguments)
    std::string xml_rules;    // (Qwen3.5: the rules of its tools' calls)
    bool typed = true;
    const std::string args_key = fmt == ToolFormat::Llama3 ? "parameters" : "arguments";
    for (size_t i = 0; i < tools.size(); ++i) {
        const json& fn = tools[i]["function"];
        const std::string name = fn["name"].get<std::string>();
        if (choice != "auto" && choice != "required" && choice != name) continue;
        if (fmt == ToolFormat::Gemma4) {  // call:NAME{...}, in its notation
            json params = fn.contains("parameters") && fn["parameters"].is_object() ? fn["parameters"]
                                                                                    : json{{"type", "object"}};
            if (!params.contains("type")) params["type"] = "object";
            alts.push_back(gbnf_literal(name) + " " +
                           gemma4_schema_rule(params, "g-t" + std::to_string(i), &gemma_rules));
            continue;
        }
        if (fmt == ToolFormat::QwenXml) {  // <function=NAME> and its parameters
            auto rule = xml_call_rule(fn, i, b, &xml_rules, &typed, why);
            if (!rule) return std::nullopt;
            alts.push_back(*rule);
            continue;
        }
        json params = fn.contains("parameters") && fn["parameters"].is_object()
                          ? fn["parameters"]
                          : json{{"type", "object"}};
        auto rule = b.add(params, "tool-" + std::to_string(i) + "-args");
        if (!rule) {
            refuse_tool_schema(b.refusal(), i, name, "", why);
            return std::nullopt;
        }
        // {"name": "f", "arguments": {...}} with the model's usual spacing allowed
        alts.push_back(gbnf_literal("\"" + name + "\"") + " tc-ws \",\" tc-ws " +
                       gbnf_literal("\"" + args_key + "\"") + " tc-ws \":\" tc-ws " + *rule);
    }
    if (alts.empty()) {
        why->keyword = "tool_choice";
        why->message = "tool_choice names a function that is not among the tools";
        return std::nullopt;
    }
    // A typed answer instead of calls (tool_choice "auto" with a response schema): the same
    // builder, so the rules both share are written once.
    std::string answer_rule;
    if (answer && choice == "auto") {
        auto rule = b.add(*answer, "tc-answer");
        if (!rule) {
            *why = b.refusal();
            why->path = "$.response_format" + (why->path.size() > 1 ? why->path.substr(1) : std::string());
            return std::nullopt;
        }
        answer_rule = *rule;
    }
    std::string rules;
    rules += "tc-ws ::= [ \\t\\n]{0,4}\n";
    rules += "tc-fn ::= ";
    for (size_t i = 0; i < alts.size(); ++i) rules += (i ? " | " : "") + alts[i];
    rules += "\n";
    if (fmt != ToolFormat::Gemma4 && fmt != ToolFormat::QwenXml)
        rules += "tc-obj ::= \"{\" tc-ws \"\\\"name\\\"\" tc-ws \":\" tc-ws tc-fn tc-ws \"}\"\n";
    ToolGrammar out;
    // (at most kMaxParallelCalls: a small model may repeat one call until max_tokens)
    const std::string more = "{0," + std::to_string(kMaxParallelCalls - 1) + "}";
    rules += "tc-calls ::= " + std::string(parallel ? "tc-call ( tc-ws tc-call )" + more : "tc-call") + "\n";
    // calls or the answer, nothing else
    const std::string root = answer_rule.empty() ? "root ::= tc-calls" : "root ::= tc-calls | " + answer_rule;
    if (fmt == ToolFormat::Llama3 || fmt == ToolFormat::Phi4Mini) {
        // Llama 3: a reply that opens with "{" is a call; Phi-4-mini: one that opens with "["
        // (its calls are one array; its <|tool_call|> tag is a control token, outside what a
        // grammar matches). Lazy: free text otherwise.
        const bool phi = fmt == ToolFormat::Phi4Mini;
        rules += phi ? "tc-call ::= \"[\" tc-ws tc-obj " +
                           std::string(parallel ? "( tc-ws \",\" tc-ws tc-obj )" + more + " " : "") +
                           "tc-ws \"]\"\n"
                     : "tc-call ::= tc-obj\n";
        if (choice == "auto" && answer_rule.empty()) out.triggers = {{phi ? "[" : "{", true}};
        out.gbnf = root + "\n" + rules + b.gbnf("");
        return out;
    }
    if (fmt == ToolFormat::Gemma4) {
        // Its calls back to back, after its thinking channel when it opens one; auto: lazy,
        // from the first "<|tool_call>" (which free text before it does not reach). The
        // arguments follow their schemas as far as gemma4_schema_rule() says: the rest is
        // checked on the finished call.
        out.arguments_typed = false;
        rules += "tc-call ::= \"<|tool_call>call:\" tc-fn \"<tool_call|>\"\n";
        rules += kGemma4ValueRules + gemma_rules + kGemmaThought;
        if (choice == "auto" && answer_rule.empty()) {
            out.triggers = {{"<|tool_call>", false}};
            out.gbnf = root + "\n" + rules + b.gbnf("");
        } else {
            out.gbnf = "root ::= tc-thought? ( tc-calls" +
                       (answer_rule.empty() ? std::string() : " | " + answer_rule) + " )\n" + rules +
                       b.gbnf("");
        }
        return out;
    }
    if (fmt == ToolFormat::QwenXml) {
        // Its calls, after its thinking (which the prompt may have opened); auto: text
        // without "<tool_call>" or "<function=" before them, so a call is always one the
        // grammar sees.
        // (auto: also its <function=...> block alone, as Qwen3-Coder writes it at times)
        out.arguments_typed = typed;
        rules += "tc-call ::= \"<tool_call>\\n\" tc-fn \"</tool_call>\"" +
                 std::string(choice == "auto" ? " | tc-fn" : "") + "\n" + xml_shared_rules() + xml_rules;
        gbnf_text_without({"</think>", "<tool_call>", "<function="}, "tc-reason", &rules);
        const std::string head = thinking_open ? "tc-reason \"</think>\" tc-ws "
                                               : "( \"<think>\" tc-reason \"</think>\" tc-ws )? ";
        std::string body = "tc-calls";
        if (choice == "auto" && !answer_rule.empty()) {
            body = "( tc-calls | " + answer_rule + " )";
        } else if (choice == "auto") {
            gbnf_text_without({"<tool_call>", "<function="}, "tc-say", &rules);
            body = "tc-say tc-calls?";
        }
        out.gbnf = "root ::= " + head + body + "\n" + rules + b.gbnf("");
        return out;
    }
    if (choice != "auto") {  // a call from the first token, in the template's form
        rules += "tc-call ::= \"<tool_call>\" tc-ws tc-obj tc-ws \"</tool_call>\"\n";
        out.gbnf = root + "\n" + rules + b.gbnf("");
        return out;
    }
    // auto: calls, or text that may end in calls. Small models open a call in the forms they
    // were trained on more than in the template's: a <tool_call> block, a bare object, or a
    // fenced one (```json or even ```python), or one wrapped in a tag of their own
    // (<response>, <fn .../>). The first three are constrained calls here; text may not open
    // like any of them ({, [, `, <; a thinking model's <think> may) nor contain "<to"
    // outside a call.
    rules += "tc-call ::= \"<tool_call>\" tc-ws tc-obj tc-ws \"</tool_call>\" | tc-obj | "
             "\"```\" [a-z]{0,10} tc-ws tc-obj tc-ws \"```\"\n";
    if (!answer_rule.empty()) {  // calls in any of those forms, or the answer: no free text
        out.gbnf = root + "\n" + rules + b.gbnf("");
        return out;
    }
    rules += "tc-text ::= tc-first tc-char* tc-calls?\n";
    rules += "tc-first ::= [^{[`< \\t\\n\\r] | \"<think>\"\n";
    rules += "tc-char ::= [^<] | \"<\" [^t] | \"<t\" [^o]\n";
    out.gbnf = "root ::= tc-calls | tc-text\n" + rules + b.gbnf("");
    return out;
}

}  // namespace edgellm
