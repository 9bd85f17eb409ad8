// The Responses API's requests (input items, tools, tool_choice, text.format, reasoning)
// translated into chat requests for the chat path.
#include "server/api/responses/responses.h"

#include <cmath>
#include <ctime>
#include <map>
#include <set>

namespace edgellm::server {

using namespace responses_detail;

namespace {

std::string indexed(const std::string& base, size_t i) {
    return base + "[" + std::to_string(i) + "]";
}

// A string field of the client's JSON, or `otherwise` when it is absent or not a string
// (json::value would throw on a wrong type).
std::string string_or(const json& obj, const char* name, const std::string& otherwise) {
    return is_string_field(obj, name) ? obj[name].get<std::string>() : otherwise;
}

// A message's (or a tool output's) content as chat content: a string stays a string, an
// array of input_text / output_text / refusal parts becomes chat text parts (joined by
// parse_messages as for a chat request).
std::optional<ApiError> text_content(const json& c, const std::string& where, json* out) {
    if (c.is_string()) {
        *out = c;
        return std::nullopt;
    }
    if (!c.is_array()) return bad_request(where + " must be a string or an array of content parts");
    json parts = json::array();
    for (size_t i = 0; i < c.size(); ++i) {
        const json& p = c[i];
        const std::string at = indexed(where, i);
        if (!is_string_field(p, "type"))
            return bad_request(at + " must be an object with a \"type\"");
        const std::string type = p["type"].get<std::string>();
        if (type == "input_image" || type == "input_file" || type == "input_audio")
            return bad_request(at + " is an " + type + " part: this model takes text only");
        if (type != "input_text" && type != "output_text" && type != "refusal")
            return bad_request(at + ".type \"" + type +
                               "\" is not one of input_text, output_text, refusal");
        const char* key = type == "refusal" ? "refusal" : "text";
        if (!is_string_field(p, key)) return bad_request(at + "." + key + " must be a string");
        parts.push_back({{"type", "text"}, {"text", p[key]}});
    }
    *out = std::move(parts);
    return std::nullopt;
}

// The readable text of a reasoning input item: its reasoning_text content, else its
// summary; empty when it carries only OpenAI's encrypted_content (nothing we can render).
std::string reasoning_text(const json& item) {
    std::string text;
    for (const char* key : {"content", "summary"}) {
        const json* parts = given(item, key);
        if (!parts || !parts->is_array()) continue;
        for (const json& p : *parts)
            if (is_string_field(p, "text")) {
                if (!text.empty()) text += "\n\n";
                text += p["text"].get<std::string>();
            }
        if (!text.empty()) break;
    }
    return text;
}

bool is_assistant(const json& m) {
    return m.value("role", "") == "assistant";
}

// The input items as chat messages.
std::optional<ApiError> input_messages(const json& input, json* messages) {
    if (input.is_string()) {
        messages->push_back({{"role", "user"}, {"content", input}});
        return std::nullopt;
    }
    if (!input.is_array()) return bad_request("input must be a string or an array of input items");
    std::map<std::string, std::string> call_names;  // call_id -> the function it called
    for (size_t i = 0; i < input.size(); ++i) {
        const json& item = input[i];
        const std::string at = indexed("input", i);
        if (!item.is_object()) return bad_request(at + " must be an object");
        std::string type = "message";
        if (const json* t = given(item, "type")) {
            if (!t->is_string()) return bad_request(at + ".type must be a string");
            type = t->get<std::string>();
        } else if (!given(item, "role")) {
            return bad_request(at +
                               " must be a message ({\"role\", \"content\"}) or an item "
                               "with a \"type\"");
        }
        if (type == "message") {
            if (!is_string_field(item, "role")) return bad_request(at + ".role must be a string");
            const std::string role = item["role"].get<std::string>();
            if (role != "user" && role != "system" && role != "developer" && role != "assistant")
                return bad_request(at + ".role \"" + role +
                                   "\" is not one of user, system, developer, assistant");
            const json* c = given(item, "content");
            if (!c) return bad_request(at + ".content is required");
            json content;
            if (auto e = text_content(*c, at + ".content", &content)) return e;
            // An answer after its reasoning item belongs to the same assistant turn.
            if (role == "assistant" && !messages->empty() && is_assistant(messages->back()) &&
                !messages->back().contains("content") && !messages->back().contains("tool_calls")) {
                messages->back()["content"] = std::move(content);
                continue;
            }
            messages->push_back({{"role", role}, {"content", std::move(content)}});
        } else if (type == "function_call") {
            if (!is_string_field(item, "call_id"))
                return bad_request(at + ".call_id must be a string");
            if (!is_string_field(item, "name") || item["name"].get<std::string>().empty())
                return bad_request(at + ".name must be a non-empty string");
            const json* args = given(item, "arguments");
            if (!args || !(args->is_string() || args->is_object()))
                return bad_request(at + ".arguments must be a string (a JSON object)");
            const std::string call_id = item["call_id"].get<std::string>();
            call_names[call_id] = item["name"].get<std::string>();
            json call = {{"id", call_id},
                         {"type", "function"},
                         {"function",
                          {{"name", item["name"]},
                           {"arguments", args->is_string() ? *args : json(args->dump())}}}};
            // Consecutive calls (and the text or reasoning before them) are one assistant
            // message, as a chat reply carries them.
            if (!messages->empty() && is_assistant(messages->back())) {
                json& m = messages->back();
                if (!m.contains("content")) m["content"] = nullptr;
                if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
                m["tool_calls"].push_back(std::move(call));
            } else {
                messages->push_back({{"role", "assistant"},
                                     {"content", nullptr},
                                     {"tool_calls", json::array({std::move(call)})}});
            }
        } else if (type == "function_call_output") {
            if (!is_string_field(item, "call_id"))
                return bad_request(at + ".call_id must be a string");
            const json* out = given(item, "output");
            if (!out) return bad_request(at + ".output is required");
            json content;
            if (auto e = text_content(*out, at + ".output", &content)) return e;
            const std::string call_id = item["call_id"].get<std::string>();
            json m = {{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(content)}};
            // (templates that print the tool's name find it here)
            if (auto it = call_names.find(call_id); it != call_names.end()) m["name"] = it->second;
            messages->push_back(std::move(m));
        } else if (type == "reasoning") {
            const std::string text = reasoning_text(item);
            if (text.empty()) continue;
            messages->push_back({{"role", "assistant"}, {"reasoning_content", text}});
        } else if (type == "item_reference") {
            return bad_request(at +
                               " is an item_reference: this server keeps no responses or "
                               "items; send the item itself");
        } else {
            return bad_request(at + ".type \"" + type +
                               "\" is not supported: only messages, reasoning, function_call "
                               "and function_call_output items (this server runs function "
                               "tools only)");
        }
    }
    return std::nullopt;
}

// Responses' flat function tools as chat tools.
std::optional<ApiError> chat_tools(const json& tools, json* out) {
    if (!tools.is_array()) return bad_request("tools must be an array");
    for (size_t i = 0; i < tools.size(); ++i) {
        const json& t = tools[i];
        const std::string at = indexed("tools", i);
        if (!is_string_field(t, "type")) return bad_request(at + ".type must be a string");
        const std::string type = t["type"].get<std::string>();
        if (type != "function")
            return bad_request(at + ".type \"" + type +
                               "\" is not supported: this server runs function tools only "
                               "(web_search, file_search, computer use and the other built-in "
                               "tools are not available)");
        if (!is_string_field(t, "name") || t["name"].get<std::string>().empty())
            return bad_request(at + ".name must be a non-empty string");
        json fn = {{"name", t["name"]}};
        if (const json* d = given(t, "description")) {
            if (!d->is_string()) return bad_request(at + ".description must be a string");
            fn["description"] = *d;
        }
        if (const json* p = given(t, "parameters")) {
            if (!p->is_object())
                return bad_request(at + ".parameters must be a JSON schema object");
            fn["parameters"] = *p;
        }
        if (const json* s = given(t, "strict")) {
            if (!s->is_boolean()) return bad_request(at + ".strict must be true or false");
            fn["strict"] = *s;
        }
        out->push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    return std::nullopt;
}

// tool_choice: "auto" / "none" / "required", {"type": "function", "name"}, or
// {"type": "allowed_tools", "mode", "tools"} (then *tools keeps only those listed).
std::optional<ApiError> chat_tool_choice(const json& tc, json* tools, json* out) {
    const char* forms =
        "tool_choice must be \"auto\", \"none\", \"required\", {\"type\": \"function\", "
        "\"name\": ...} or {\"type\": \"allowed_tools\", \"mode\", \"tools\"}";
    if (tc.is_string()) {
        const std::string s = tc.get<std::string>();
        if (s != "auto" && s != "none" && s != "required") return bad_request(forms);
        *out = tc;
        return std::nullopt;
    }
    if (!is_string_field(tc, "type")) return bad_request(forms);
    const std::string type = tc["type"].get<std::string>();
    if (type == "function") {
        if (!is_string_field(tc, "name")) return bad_request("tool_choice.name must be a string");
        *out = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
        return std::nullopt;
    }
    if (type == "allowed_tools") {
        const std::string mode = string_or(tc, "mode", "");
        if (mode != "auto" && mode != "required")
            return bad_request("tool_choice.mode must be \"auto\" or \"required\"");
        const json* listed = given(tc, "tools");
        if (!listed || !listed->is_array())
            return bad_request(
                "tool_choice.tools must be an array of {\"type\": \"function\", "
                "\"name\"}");
        std::set<std::string> names;
        for (size_t i = 0; i < listed->size(); ++i) {
            const json& t = (*listed)[i];
            const std::string at = indexed("tool_choice.tools", i);
            if (string_or(t, "type", "") != "function")
                return bad_request(at + ": only function tools can be allowed");
            if (!is_string_field(t, "name")) return bad_request(at + ".name must be a string");
            names.insert(t["name"].get<std::string>());
        }
        json kept = json::array();
        for (const json& t : *tools)
            if (names.erase(t["function"]["name"].get<std::string>())) kept.push_back(t);
        if (!names.empty())
            return bad_request("tool_choice.tools names the function \"" + *names.begin() +
                               "\", which is not among the tools");
        *tools = std::move(kept);
        *out = mode;
        return std::nullopt;
    }
    return bad_request("tool_choice of type \"" + type +
                       "\" selects a built-in tool: this server runs function tools only");
}

// text.format as chat's response_format.
std::optional<ApiError> chat_response_format(const json& text, json* out) {
    if (!text.is_object()) return bad_request("text must be an object");
    const json* f = given(text, "format");
    if (!f) return std::nullopt;
    if (!is_string_field(*f, "type"))
        return bad_request("text.format must be an object with a \"type\"");
    const std::string type = (*f)["type"].get<std::string>();
    if (type == "text" || type == "json_object") {
        *out = {{"type", type}};
        return std::nullopt;
    }
    if (type != "json_schema")
        return bad_request(
            "text.format.type must be \"text\", \"json_object\" or "
            "\"json_schema\", got \"" +
            type + "\"");
    const json* schema = given(*f, "schema");
    if (!schema || !(schema->is_object() || schema->is_boolean()))
        return bad_request("text.format.schema must be a JSON schema object");
    json js = {{"name", string_or(*f, "name", "response")}, {"schema", *schema}};
    if (const json* d = given(*f, "description")) js["description"] = *d;
    if (const json* s = given(*f, "strict")) {
        if (!s->is_boolean()) return bad_request("text.format.strict must be true or false");
        js["strict"] = *s;
    }
    *out = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
    return std::nullopt;
}

// Fields of the Responses API that the chat body does not take as they are: converted
// above, refused, or only echoed back in the Response.
const char* const kResponsesOnly[] = {
    "input",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "text",
    "reasoning",
    "tools",
    "tool_choice",
    "include",
    "top_logprobs",
    "store",
    "background",
    "conversation",
    "previous_response_id",
    "prompt",
    "prompt_cache_key",
    "metadata",
    "prompt_cache_retention",
    "safety_identifier",
    "service_tier",
    "truncation",
    "user",
    "stream_options",
};

}  // namespace

std::optional<ApiError> responses_to_chat(const json& body, json* chat) {
    if (!body.is_object()) return bad_request("the request body must be a JSON object");
    // State between requests: this server keeps no responses, conversations or prompts, so a
    // request that builds on them would silently lose its context.
    if (const json* v = given(body, "previous_response_id");
        v && !(v->is_string() && v->get<std::string>().empty()))
        return bad_request(
            "previous_response_id is not supported: this server keeps no "
            "responses; send the whole conversation in input");
    if (given(body, "conversation"))
        return bad_request(
            "conversation is not supported: this server keeps no conversations; "
            "send the whole conversation in input");
    if (given(body, "prompt"))
        return bad_request(
            "prompt (a stored prompt template) is not supported: send "
            "instructions and input instead");
    if (const json* v = given(body, "background")) {
        if (!v->is_boolean()) return bad_request("background must be true or false");
        if (v->get<bool>())
            return bad_request(
                "background is not supported: a response runs while the request "
                "is open (use stream for long ones)");
    }
    // store: accepted either way. true is the API's default, so a client that sends it asks
    // no more than one that leaves it out, and refusing it would break clients that set it
    // out of habit. Nothing is stored: the Response says "store": false, and what would rely
    // on a stored response (previous_response_id above, GET /v1/responses/{id}) fails
    // loudly instead of quietly.
    if (const json* v = given(body, "store"); v && !v->is_boolean())
        return bad_request("store must be true or false");
    if (given(body, "messages"))
        return bad_request(
            "messages is a chat completions field: /v1/responses takes input "
            "(or use /v1/chat/completions)");
    if (const json* n = given(body, "n"); n && !(n->is_number_integer() && n->get<int64_t>() == 1))
        return bad_request("n is not supported: a response has one output");

    json messages = json::array();
    if (const json* ins = given(body, "instructions")) {
        if (!ins->is_string()) return bad_request("instructions must be a string");
        messages.push_back({{"role", "system"}, {"content", *ins}});
    }
    const json* input = given(body, "input");
    if (!input) return bad_request("input is required");
    json from_input = json::array();
    if (auto e = input_messages(*input, &from_input)) return e;
    // The instructions and a leading system / developer message become one system message:
    // many templates take a system message only first and refuse a second one.
    size_t first = 0;
    if (!messages.empty() && !from_input.empty() &&
        (from_input[0]["role"] == "system" || from_input[0]["role"] == "developer") &&
        from_input[0]["content"].is_string()) {
        messages[0]["content"] = messages[0]["content"].get<std::string>() + "\n\n" +
                                 from_input[0]["content"].get<std::string>();
        first = 1;
    } else if (!messages.empty() && !from_input.empty() &&
               (from_input[0]["role"] == "system" || from_input[0]["role"] == "developer")) {
        json parts = json::array({{{"type", "text"}, {"text", messages[0]["content"]}}});
        for (const json& p : from_input[0]["content"]) parts.push_back(p);
        messages[0]["content"] = std::move(parts);
        first = 1;
    }
    for (size_t i = first; i < from_input.size(); ++i) messages.push_back(std::move(from_input[i]));
    if (messages.empty()) return bad_request("input must not be empty");

    json out = json::object();
    if (const json* m = given(body, "model")) out["model"] = *m;
    out["messages"] = std::move(messages);
    // The rest of the body as it is (temperature, top_p, stream, llama.cpp's extras).
    const std::set<std::string> responses_only(std::begin(kResponsesOnly),
                                               std::end(kResponsesOnly));
    for (const auto& [k, v] : body.items())
        if (k != "model" && !responses_only.count(k)) out[k] = v;

    if (const json* m = given(body, "max_output_tokens")) {
        const bool integral =
            m->is_number_integer() ||
            (m->is_number_float() && std::floor(m->get<double>()) == m->get<double>());
        if (!integral || m->get<double>() < 1 || m->get<double>() > 2147483647.0)
            return bad_request("max_output_tokens must be a positive integer, got " + m->dump());
        for (const char* k : {"n_predict", "max_completion_tokens"}) out.erase(k);
        out["max_tokens"] = (int64_t)m->get<double>();
    }
    if (const json* t = given(body, "tools")) {
        json tools = json::array();
        if (auto e = chat_tools(*t, &tools)) return e;
        if (const json* tc = given(body, "tool_choice")) {
            json choice;
            if (auto e = chat_tool_choice(*tc, &tools, &choice)) return e;
            out["tool_choice"] = std::move(choice);
        }
        if (!tools.empty()) out["tools"] = std::move(tools);
    } else if (const json* tc = given(body, "tool_choice")) {
        json none = json::array(), choice;
        if (auto e = chat_tool_choice(*tc, &none, &choice)) return e;
        out["tool_choice"] =
            std::move(choice);  // (parse_gen_request refuses a choice without tools)
    }
    if (const json* t = given(body, "text")) {
        json rf;
        if (auto e = chat_response_format(*t, &rf)) return e;
        if (!rf.is_null()) out["response_format"] = std::move(rf);
    }
    if (const json* r = given(body, "reasoning")) {
        if (!r->is_object()) return bad_request("reasoning must be an object");
        if (const json* effort = given(*r, "effort")) {
            if (!reasoning_effort_known(*effort))
                return bad_request("reasoning.effort must be one of " + std::string(kReasoningEfforts) +
                                   ", got " + effort->dump());
            out["reasoning_effort"] = *effort;
        }
    }
    bool logprobs = false;
    if (const json* inc = given(body, "include")) {
        if (!inc->is_array()) return bad_request("include must be an array of strings");
        for (size_t i = 0; i < inc->size(); ++i) {
            if (!(*inc)[i].is_string())
                return bad_request(indexed("include", i) + " must be a string");
            // (the others ask for built-in tools' results or encrypted reasoning: nothing to add)
            if ((*inc)[i] == "message.output_text.logprobs") logprobs = true;
        }
    }
    if (const json* tl = given(body, "top_logprobs")) {
        if (!tl->is_number_integer() || tl->get<int64_t>() < 0 || tl->get<int64_t>() > 20)
            return bad_request("top_logprobs must be an integer between 0 and 20");
        if (tl->get<int64_t>() > 0) {
            logprobs = true;
            out["top_logprobs"] = *tl;
        }
    }
    if (logprobs) out["logprobs"] = true;
    if (const json* p = given(body, "parallel_tool_calls")) out["parallel_tool_calls"] = *p;
    // (OpenAI's "auto" drops the oldest input to fit; this server refuses a prompt that
    // does not fit instead, so only "disabled" is what it does)
    if (const json* t = given(body, "truncation"); t && !(t->is_string() && *t == "disabled"))
        return bad_request("truncation: only \"disabled\" (a prompt longer than the context is "
                           "refused, never cut)");
    if (const json* so = given(body, "stream_options"); so && !so->is_object())
        return bad_request("stream_options must be an object");
    // The usage goes in response.completed, so the chat stream must send it.
    if (const json* s = given(body, "stream"); s && s->is_boolean() && s->get<bool>())
        out["stream_options"] = {{"include_usage", true}};
    *chat = std::move(out);
    return std::nullopt;
}

}  // namespace edgellm::server
