#include "server/api/anthropic/anthropic.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace edgellm::server {

namespace {

// A field of an object, null counting as absent (as the chat parser reads them).
const json* field(const json& obj, const char* name) {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

// An integer, also written as 5.0 (an integer to JavaScript clients).
bool integer_of(const json& v, int64_t* out) {
    if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t)INT64_MAX) return false;
        *out = v.get<int64_t>();
        return true;
    }
    if (v.is_number_float()) {
        const double x = v.get<double>();
        if (!std::isfinite(x) || std::floor(x) != x || std::fabs(x) > 9e15) return false;
        *out = (int64_t)x;
        return true;
    }
    return false;
}

std::string block_type(const json& block) {
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) return "";
    return block["type"].get<std::string>();
}

// Why a block this server cannot take is refused.
ApiError refused_block(const std::string& at, const std::string& type) {
    if (type == "image")
        return bad_request(at +
                           ": image input is not supported: this model has no image "
                           "encoder");
    if (type == "document")
        return bad_request(at +
                           ": document input is not supported: give the document's text "
                           "as a text block");
    if (type.empty()) return bad_request(at + " must be an object with a \"type\" string");
    return bad_request(at + ": content block type \"" + type + "\" is not supported here");
}

// A text block's text; false (and *err) when it has none.
bool text_of(const json& block, const std::string& at, std::string* out,
             std::optional<ApiError>* err) {
    if (!block.contains("text") || !block["text"].is_string()) {
        *err = bad_request(at + ".text must be a string");
        return false;
    }
    *out = block["text"].get<std::string>();
    return true;
}

// Content that may only be text (system, a tool result): a string, or text blocks joined
// with newlines (as the chat parser joins text parts).
std::optional<ApiError> plain_text(const json& c, const std::string& at, std::string* out) {
    if (c.is_string()) {
        *out = c.get<std::string>();
        return std::nullopt;
    }
    if (!c.is_array()) return bad_request(at + " must be a string or an array of content blocks");
    out->clear();
    for (size_t i = 0; i < c.size(); ++i) {
        const std::string bat = at + "[" + std::to_string(i) + "]";
        const std::string type = block_type(c[i]);
        if (type != "text") return refused_block(bat, type);
        std::string text;
        std::optional<ApiError> err;
        if (!text_of(c[i], bat, &text, &err)) return err;
        if (i > 0) out->push_back('\n');
        *out += text;
    }
    return std::nullopt;
}

// One Anthropic message -> the chat messages it stands for (appended to *out). ids: the
// tool_use ids seen so far with their tool's name, so each tool message can name its tool
// (templates that print a result's function name need it).
std::optional<ApiError> convert_message(const json& m, const std::string& at,
                                        std::map<std::string, std::string>* ids, json* out) {
    if (!m.is_object()) return bad_request(at + " must be an object");
    const json* role_v = field(m, "role");
    if (!role_v || !role_v->is_string()) return bad_request(at + ".role must be a string");
    const std::string role = role_v->get<std::string>();
    if (role != "user" && role != "assistant")
        return bad_request(at + ".role must be \"user\" or \"assistant\", got \"" + role +
                           "\" (the system prompt goes in the top-level \"system\")");
    const json* content = field(m, "content");
    if (!content) return bad_request(at + ".content is required");
    if (content->is_string()) {
        out->push_back({{"role", role}, {"content", *content}});
        return std::nullopt;
    }
    if (!content->is_array())
        return bad_request(at + ".content must be a string or an array of content blocks");

    const bool assistant = role == "assistant";
    json parts = json::array();    // text parts, in order
    json calls = json::array();    // assistant: tool_use blocks as OpenAI tool_calls
    json results = json::array();  // user: tool_result blocks as tool messages
    std::string reasoning;         // assistant: thinking blocks
    for (size_t i = 0; i < content->size(); ++i) {
        const json& b = (*content)[i];
        const std::string bat = at + ".content[" + std::to_string(i) + "]";
        const std::string type = block_type(b);
        std::optional<ApiError> err;
        if (type == "text") {
            std::string text;
            if (!text_of(b, bat, &text, &err)) return err;
            parts.push_back({{"type", "text"}, {"text", text}});
        } else if (type == "tool_use" && assistant) {
            const json* id = field(b, "id");
            const json* name = field(b, "name");
            if (!id || !id->is_string() || id->get<std::string>().empty())
                return bad_request(bat + ".id must be a non-empty string");
            if (!name || !name->is_string() || name->get<std::string>().empty())
                return bad_request(bat + ".name must be a non-empty string");
            const json* input = field(b, "input");
            if (input && !input->is_object()) return bad_request(bat + ".input must be an object");
            calls.push_back(
                {{"id", *id},
                 {"type", "function"},
                 {"function",
                  {{"name", *name}, {"arguments", input ? input->dump() : std::string("{}")}}}});
            (*ids)[id->get<std::string>()] = name->get<std::string>();
        } else if (type == "thinking" && assistant) {
            const json* t = field(b, "thinking");
            if (!t || !t->is_string()) return bad_request(bat + ".thinking must be a string");
            if (!reasoning.empty()) reasoning.push_back('\n');
            reasoning += t->get<std::string>();
        } else if (type == "redacted_thinking" && assistant) {
            // Encrypted for Anthropic's models; nothing a local model could read.
        } else if (type == "tool_result" && !assistant) {
            const json* id = field(b, "tool_use_id");
            if (!id || !id->is_string() || id->get<std::string>().empty())
                return bad_request(bat + ".tool_use_id must be a non-empty string");
            std::string text;
            if (const json* c = field(b, "content"))
                if (auto e = plain_text(*c, bat + ".content", &text)) return e;
            bool is_error = false;
            if (const json* ie = field(b, "is_error")) {
                if (!ie->is_boolean()) return bad_request(bat + ".is_error must be true or false");
                is_error = ie->get<bool>();
            }
            // The chat templates have no place for a failed call: the text says it.
            if (is_error) text = text.empty() ? "Error" : "Error: " + text;
            json msg = {{"role", "tool"}, {"tool_call_id", *id}, {"content", text}};
            auto named = ids->find(id->get<std::string>());
            if (named != ids->end()) msg["name"] = named->second;
            results.push_back(std::move(msg));
        } else if (type == "tool_use" || type == "thinking" || type == "redacted_thinking" ||
                   type == "tool_result") {
            return bad_request(bat + ": a \"" + type + "\" block belongs in " +
                               (assistant ? "a user" : "an assistant") + " message");
        } else {
            return refused_block(bat, type);
        }
    }

    if (assistant) {
        // Nothing at all: no turn to render (Anthropic refuses an empty non-final turn).
        if (parts.empty() && calls.empty() && reasoning.empty()) return std::nullopt;
        json msg = {{"role", "assistant"}};
        msg["content"] = !parts.empty() ? parts : calls.empty() ? json("") : json(nullptr);
        if (!calls.empty()) msg["tool_calls"] = std::move(calls);
        if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
        out->push_back(std::move(msg));
        return std::nullopt;
    }
    // The results answer the previous assistant turn, so they come first; the user's
    // own words after them.
    for (json& r : results) out->push_back(std::move(r));
    if (!parts.empty() || results.empty()) out->push_back({{"role", "user"}, {"content", parts}});
    return std::nullopt;
}

std::optional<ApiError> convert_tools(const json& tools, json* chat) {
    if (!tools.is_array()) return bad_request("tools must be an array");
    json out = json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const json& t = tools[i];
        const std::string at = "tools[" + std::to_string(i) + "]";
        if (!t.is_object()) return bad_request(at + " must be an object");
        if (const json* type = field(t, "type"); type && *type != "custom")
            return bad_request(at + ".type " + type->dump() +
                               ": Anthropic's server and built-in tools are not supported; "
                               "declare a custom tool (name, description, input_schema)");
        for (const auto& [k, v] : t.items()) {
            (void)v;
            // strict: the tool-call grammar already holds calls to the schema.
            if (k != "name" && k != "description" && k != "input_schema" && k != "type" &&
                k != "cache_control" && k != "strict")
                return bad_request(at + "." + k + " is not supported");
        }
        const json* name = field(t, "name");
        if (!name || !name->is_string() || name->get<std::string>().empty())
            return bad_request(at + ".name must be a non-empty string");
        json fn = {{"name", *name}};
        if (const json* d = field(t, "description")) {
            if (!d->is_string()) return bad_request(at + ".description must be a string");
            fn["description"] = *d;
        }
        const json* schema = field(t, "input_schema");
        if (schema && !schema->is_object())
            return bad_request(at + ".input_schema must be a JSON schema object");
        fn["parameters"] = schema ? *schema : json{{"type", "object"}};
        out.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    (*chat)["tools"] = std::move(out);
    return std::nullopt;
}

std::optional<ApiError> convert_tool_choice(const json& tc, json* chat) {
    const char* shape =
        "tool_choice must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", "
        "\"name\": ...}";
    if (!tc.is_object()) return bad_request(shape);
    const json* type = field(tc, "type");
    if (!type || !type->is_string()) return bad_request(shape);
    const std::string t = type->get<std::string>();
    if (t == "auto") {
        (*chat)["tool_choice"] = "auto";
    } else if (t == "any") {
        (*chat)["tool_choice"] = "required";
    } else if (t == "none") {
        (*chat)["tool_choice"] = "none";
    } else if (t == "tool") {
        const json* name = field(tc, "name");
        if (!name || !name->is_string() || name->get<std::string>().empty())
            return bad_request("tool_choice of type \"tool\" needs a \"name\" string");
        (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
    } else {
        return bad_request(shape);
    }
    if (const json* dp = field(tc, "disable_parallel_tool_use")) {
        if (!dp->is_boolean())
            return bad_request("tool_choice.disable_parallel_tool_use must be true or false");
        (*chat)["parallel_tool_calls"] = !dp->get<bool>();
    }
    return std::nullopt;
}

// Structured output: output_config.format (and the beta's output_format), {"type":
// "json_schema", "schema": {...}}, as chat's response_format (with tools: a call or the
// answer, one grammar).
std::optional<ApiError> convert_output_format(const json& f, const std::string& where, json* chat) {
    const json* type = f.is_object() ? field(f, "type") : nullptr;
    if (!type || *type != "json_schema")
        return bad_request(where + " must be {\"type\": \"json_schema\", \"schema\": {...}}");
    const json* schema = field(f, "schema");
    if (!schema || !(schema->is_object() || schema->is_boolean()))
        return bad_request(where + ".schema must be a JSON schema object");
    for (const auto& [k, v] : f.items())
        if (k != "type" && k != "schema" && !v.is_null())
            return bad_request(where + "." + k + " is not supported");
    (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
    return std::nullopt;
}

std::optional<ApiError> convert(const json& body, bool count_tokens, json* result) {
    if (!body.is_object()) return bad_request("the request body must be a JSON object");
    // Every field is either read below or refused here: an ignored field that asks for
    // something would give the client an answer it did not ask for.
    static const char* const kKnown[] = {
        "model",       "messages", "system",   "max_tokens",   "stop_sequences",
        "temperature", "top_p",    "top_k",    "stream",       "tools",
        "tool_choice", "thinking", "metadata", "service_tier", "chat_template_kwargs",
        "output_config", "output_format", "cache_control"};
    for (const auto& [k, v] : body.items()) {
        if (v.is_null()) continue;
        if (std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown))
            return bad_request("\"" + k + "\" is not supported by this server's Messages API");
    }
    // Top-level cache_control asks Anthropic to cache the prompt's prefix automatically:
    // edgellm always keeps the prefix (the slot's KV cache), so it is honoured as it is.
    if (const json* cc = field(body, "cache_control")) {
        const json* type = cc->is_object() ? field(*cc, "type") : nullptr;
        if (!type || *type != "ephemeral")
            return bad_request("cache_control must be {\"type\": \"ephemeral\"}");
        for (const auto& [k, v] : cc->items())
            if (k != "type" && k != "ttl") return bad_request("cache_control." + k + " is not supported");
        if (const json* ttl = field(*cc, "ttl"); ttl && *ttl != "5m" && *ttl != "1h")
            return bad_request("cache_control.ttl must be \"5m\" or \"1h\"");
    }

    json chat = json::object();
    if (const json* model = field(body, "model")) {
        if (!model->is_string()) return bad_request("model must be a string");
        chat["model"] = *model;
    }

    json messages = json::array();
    if (const json* system = field(body, "system")) {
        std::string text;
        if (auto e = plain_text(*system, "system", &text)) return e;
        if (!text.empty()) messages.push_back({{"role", "system"}, {"content", text}});
    }
    const json* msgs = field(body, "messages");
    if (!msgs) return bad_request("messages is required");
    if (!msgs->is_array()) return bad_request("messages must be an array");
    if (msgs->empty()) return bad_request("messages must not be empty");
    std::map<std::string, std::string> ids;
    for (size_t i = 0; i < msgs->size(); ++i)
        if (auto e =
                convert_message((*msgs)[i], "messages[" + std::to_string(i) + "]", &ids, &messages))
            return e;
    chat["messages"] = std::move(messages);

    if (const json* tools = field(body, "tools"))
        if (auto e = convert_tools(*tools, &chat)) return e;
    if (const json* tc = field(body, "tool_choice"))
        if (auto e = convert_tool_choice(*tc, &chat)) return e;

    if (const json* mt = field(body, "max_tokens")) {
        int64_t n = 0;
        if (!integer_of(*mt, &n) || n < 1 || n > INT32_MAX)
            return bad_request("max_tokens must be an integer of at least 1, got " + mt->dump());
        chat["max_tokens"] = n;
    } else if (!count_tokens) {
        return bad_request("max_tokens is required");
    }
    if (const json* stop = field(body, "stop_sequences")) {
        if (!stop->is_array()) return bad_request("stop_sequences must be an array of strings");
        for (const json& s : *stop)
            if (!s.is_string()) return bad_request("stop_sequences must be an array of strings");
        chat["stop"] = *stop;
    }
    // Checked by the chat parser under the same names.
    for (const char* k : {"temperature", "top_p", "top_k"})
        if (const json* v = field(body, k)) chat[k] = *v;

    if (const json* stream = field(body, "stream")) {
        if (!stream->is_boolean()) return bad_request("stream must be true or false");
        if (stream->get<bool>() && !count_tokens) {
            chat["stream"] = true;
            chat["stream_options"] = {{"include_usage", true}};
        }
    }

    json kwargs = json::object();
    if (const json* kw = field(body, "chat_template_kwargs")) {  // (llama.cpp passes it on)
        if (!kw->is_object()) return bad_request("chat_template_kwargs must be an object");
        kwargs = *kw;
    }
    if (const json* th = field(body, "thinking")) {
        const json* type = th->is_object() ? field(*th, "type") : nullptr;
        if (!type || !type->is_string())
            return bad_request(
                "thinking must be {\"type\": \"enabled\", \"budget_tokens\": n} "
                "or {\"type\": \"disabled\"}");
        const std::string t = type->get<std::string>();
        if (t == "enabled" || t == "adaptive") {
            // The budget bounds the thinking block (its end is forced past it); max_tokens
            // bounds thinking and answer together.
            if (const json* b = field(*th, "budget_tokens")) {
                int64_t n = 0;
                if (!integer_of(*b, &n) || n < 1 || n > INT32_MAX)
                    return bad_request("thinking.budget_tokens must be a positive integer, got " + b->dump());
                chat["thinking_budget_tokens"] = n;
            }
            kwargs["enable_thinking"] = true;
        } else if (t == "disabled") {
            kwargs["enable_thinking"] = false;
        } else {
            return bad_request(
                "thinking.type must be \"enabled\", \"adaptive\" or \"disabled\", "
                "got \"" +
                t + "\"");
        }
    }
    if (!kwargs.empty()) chat["chat_template_kwargs"] = std::move(kwargs);

    if (const json* oc = field(body, "output_config")) {
        if (!oc->is_object()) return bad_request("output_config must be an object");
        for (const auto& [k, v] : oc->items())
            if (k != "format" && !v.is_null())
                return bad_request("output_config." + k + " is not supported by this server");
        if (const json* f = field(*oc, "format"))
            if (auto e = convert_output_format(*f, "output_config.format", &chat)) return e;
    }
    if (const json* f = field(body, "output_format")) {
        if (chat.contains("response_format"))
            return bad_request("give output_config.format or output_format, not both");
        if (auto e = convert_output_format(*f, "output_format", &chat)) return e;
    }

    // metadata.user_id is for Anthropic's abuse tracking: nothing to do with it.
    if (const json* md = field(body, "metadata"); md && !md->is_object())
        return bad_request("metadata must be an object");
    if (const json* tier = field(body, "service_tier");
        tier && *tier != "auto" && *tier != "standard_only")
        return bad_request("service_tier must be \"auto\" or \"standard_only\"");

    *result = std::move(chat);
    return std::nullopt;
}

// "chatcmpl-XYZ" -> "msg_XYZ".
std::string message_id(const json& chat_id) {
    if (!chat_id.is_string() || chat_id.get<std::string>().empty()) return make_id("msg_");
    std::string id = chat_id.get<std::string>();
    const std::string prefix = "chatcmpl-";
    if (id.rfind(prefix, 0) == 0) id = id.substr(prefix.size());
    return "msg_" + id;
}

const char* stop_reason(const std::string& finish, bool calls, const std::string& stop_sequence) {
    if (finish == "length") return "max_tokens";
    if (finish == "tool_calls" || calls) return "tool_use";
    return stop_sequence.empty() ? "end_turn" : "stop_sequence";
}

int64_t usage_count(const json& usage, const char* name) {
    int64_t n = 0;
    if (usage.is_object() && usage.contains(name)) integer_of(usage[name], &n);
    return n;
}

int64_t cached_tokens(const json& usage) {
    if (!usage.is_object() || !usage.contains("prompt_tokens_details")) return 0;
    return usage_count(usage["prompt_tokens_details"], "cached_tokens");
}

json message_usage(const json& usage) {
    const int64_t cached = cached_tokens(usage);
    return json{
        {"input_tokens", std::max<int64_t>(0, usage_count(usage, "prompt_tokens") - cached)},
        {"cache_creation_input_tokens", 0},
        {"cache_read_input_tokens", cached},
        {"output_tokens", usage_count(usage, "completion_tokens")}};
}

std::string string_at(const json& obj, const char* name) {
    if (!obj.is_object() || !obj.contains(name) || !obj[name].is_string()) return "";
    return obj[name].get<std::string>();
}

void event(std::string* out, const char* name, const json& data) {
    *out += "event: ";
    *out += name;
    *out += "\ndata: ";
    *out += data.dump(-1, ' ', false, json::error_handler_t::replace);
    *out += "\n\n";
}

}  // namespace

std::optional<ApiError> anthropic_to_chat(const json& body, json* chat) {
    return convert(body, false, chat);
}

std::optional<ApiError> anthropic_count_tokens_to_chat(const json& body, json* chat) {
    return convert(body, true, chat);
}

json anthropic_count_tokens_response(int64_t input_tokens) {
    return json{{"input_tokens", input_tokens}};
}

json anthropic_error_json(const ApiError& e) {
    // Anthropic's error types by what ours mean, else by the status.
    std::string type;
    if (e.type == "unavailable_error")
        type = "overloaded_error";
    else if (e.type == "server_error")
        type = "api_error";
    else if (e.type == "exceed_context_size_error" || e.type == "not_supported_error")
        type = "invalid_request_error";
    else if (e.status == 401)
        type = "authentication_error";
    else if (e.status == 403)
        type = "permission_error";
    else if (e.status == 404)
        type = "not_found_error";
    else if (e.status == 413)
        type = "request_too_large";
    else if (e.status == 429)
        type = "rate_limit_error";
    else if (e.status == 503 || e.status == 529)
        type = "overloaded_error";
    else if (e.status >= 500)
        type = "api_error";
    else
        type = "invalid_request_error";
    return json{{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

std::string anthropic_error_body(const ApiError& e) {
    return anthropic_error_json(e).dump(-1, ' ', false, json::error_handler_t::replace);
}

json chat_to_anthropic(const json& chat_response, const std::string& stop_sequence) {
    json message = json::object(), choice = json::object();
    if (chat_response.contains("choices") && chat_response["choices"].is_array() &&
        !chat_response["choices"].empty()) {
        choice = chat_response["choices"][0];
        if (choice.is_object() && choice.contains("message") && choice["message"].is_object())
            message = choice["message"];
    }
    json content = json::array();
    const std::string reasoning = string_at(message, "reasoning_content");
    if (!reasoning.empty())  // (a local model signs nothing: the signature is empty)
        content.push_back({{"type", "thinking"}, {"thinking", reasoning}, {"signature", ""}});
    const std::string text = string_at(message, "content");
    if (!text.empty()) content.push_back({{"type", "text"}, {"text", text}});
    bool calls = false;
    if (message.contains("tool_calls") && message["tool_calls"].is_array()) {
        for (const json& c : message["tool_calls"]) {
            const json fn =
                c.is_object() && c.contains("function") ? c["function"] : json::object();
            json input = json::parse(string_at(fn, "arguments"), nullptr, false);
            if (input.is_discarded() || !input.is_object()) input = json::object();
            std::string id = string_at(c, "id");
            if (id.empty()) id = make_id("toolu_");
            content.push_back({{"type", "tool_use"},
                               {"id", id},
                               {"name", string_at(fn, "name")},
                               {"input", input}});
            calls = true;
        }
    }
    if (content.empty()) content.push_back({{"type", "text"}, {"text", ""}});
    const std::string finish = string_at(choice, "finish_reason");
    const char* reason = stop_reason(finish, calls, stop_sequence);
    const json usage = chat_response.contains("usage") ? chat_response["usage"] : json::object();
    return json{{"id", message_id(chat_response.contains("id") ? chat_response["id"] : json())},
                {"type", "message"},
                {"role", "assistant"},
                {"model", chat_response.contains("model") ? chat_response["model"] : json("")},
                {"content", std::move(content)},
                {"stop_reason", reason},
                {"stop_sequence",
                 std::string(reason) == "stop_sequence" ? json(stop_sequence) : json(nullptr)},
                {"usage", message_usage(usage)}};
}

// ---- streaming ----------------------------------------------------------------------

AnthropicStream::AnthropicStream(std::string model, int64_t input_tokens)
    : model_(std::move(model)), input_tokens_(input_tokens) {}

std::string AnthropicStream::ping() {
    std::string out;
    event(&out, "ping", json{{"type", "ping"}});
    return out;
}

void AnthropicStream::start(const json& chunk, std::string* out) {
    started_ = true;
    std::string model = model_;
    if (model.empty()) model = string_at(chunk, "model");
    event(
        out, "message_start",
        json{{"type", "message_start"},
             {"message",
              {{"id", message_id(chunk.is_object() && chunk.contains("id") ? chunk["id"] : json())},
               {"type", "message"},
               {"role", "assistant"},
               {"model", model},
               {"content", json::array()},
               {"stop_reason", nullptr},
               {"stop_sequence", nullptr},
               {"usage",
                {{"input_tokens", input_tokens_},
                 {"cache_creation_input_tokens", 0},
                 {"cache_read_input_tokens", 0},
                 {"output_tokens", 0}}}}}});
}

void AnthropicStream::open(Block kind, json content_block, std::string* out) {
    close(out);
    open_ = kind;
    ++index_;
    event(
        out, "content_block_start",
        json{{"type", "content_block_start"}, {"index", index_}, {"content_block", content_block}});
}

void AnthropicStream::close(std::string* out) {
    if (open_ == Block::None) return;
    // Anthropic's clients expect a thinking block to end with its signature.
    if (open_ == Block::Thinking) delta({{"type", "signature_delta"}, {"signature", ""}}, out);
    event(out, "content_block_stop", json{{"type", "content_block_stop"}, {"index", index_}});
    open_ = Block::None;
    open_call_ = -1;
}

void AnthropicStream::delta(json d, std::string* out) {
    event(out, "content_block_delta",
          json{{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(d)}});
}

void AnthropicStream::tool_calls(const json& calls, std::string* out) {
    for (const json& c : calls) {
        if (!c.is_object()) continue;
        int64_t call = -1;
        if (!c.contains("index") || !integer_of(c["index"], &call)) {
            // No index: the open call's fragment, else a new call.
            call =
                open_ == Block::ToolUse && !c.contains("id") ? open_call_ : (int64_t)calls_.size();
        }
        const json fn =
            c.contains("function") && c["function"].is_object() ? c["function"] : json::object();
        if (!calls_.count(call)) {
            calls_.insert(call);
            std::string id = string_at(c, "id");
            if (id.empty()) id = make_id("toolu_");
            open(Block::ToolUse,
                 json{{"type", "tool_use"},
                      {"id", id},
                      {"name", string_at(fn, "name")},
                      {"input", json::object()}},
                 out);
            open_call_ = call;
        } else if (open_ != Block::ToolUse || open_call_ != call) {
            continue;  // its block is closed (see the header)
        }
        const std::string args = string_at(fn, "arguments");
        if (!args.empty()) delta({{"type", "input_json_delta"}, {"partial_json", args}}, out);
    }
}

std::string AnthropicStream::on_chunk(const json& chunk) {
    std::string out;
    if (ended_ || !chunk.is_object()) return out;
    if (chunk.contains("error")) {
        const json& e = chunk["error"];
        ApiError err;
        if (e.is_object()) {
            int64_t code = 500;
            if (e.contains("code")) integer_of(e["code"], &code);
            err.status = (int)code;
            err.type = string_at(e, "type");
            err.message = string_at(e, "message");
        } else {
            err.status = 500;
            err.type = "server_error";
            err.message = e.is_string() ? e.get<std::string>() : e.dump();
        }
        event(&out, "error", anthropic_error_json(err));
        ended_ = true;
        return out;
    }
    if (!started_) start(chunk, &out);
    if (chunk.contains("choices") && chunk["choices"].is_array()) {
        for (const json& choice : chunk["choices"]) {
            if (!choice.is_object()) continue;
            int64_t n = 0;  // (the Messages API has one choice: never asks for more)
            if (choice.contains("index") && integer_of(choice["index"], &n) && n != 0) continue;
            if (choice.contains("delta") && choice["delta"].is_object()) {
                const json& d = choice["delta"];
                const std::string reasoning = string_at(d, "reasoning_content");
                if (!reasoning.empty()) {
                    if (open_ != Block::Thinking)
                        open(Block::Thinking,
                             json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, &out);
                    delta({{"type", "thinking_delta"}, {"thinking", reasoning}}, &out);
                }
                const std::string text = string_at(d, "content");
                if (!text.empty()) {
                    if (open_ != Block::Text)
                        open(Block::Text, json{{"type", "text"}, {"text", ""}}, &out);
                    delta({{"type", "text_delta"}, {"text", text}}, &out);
                }
                if (d.contains("tool_calls") && d["tool_calls"].is_array())
                    tool_calls(d["tool_calls"], &out);
            }
            const std::string finish = string_at(choice, "finish_reason");
            if (!finish.empty()) {
                finish_reason_ = finish;
                close(&out);
            }
        }
    }
    if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = chunk["usage"];
    return out;
}

std::string AnthropicStream::on_done() {
    std::string out;
    if (ended_) return out;
    if (!started_) start(json::object(), &out);
    close(&out);
    if (index_ < 0) {  // a message has at least one block
        open(Block::Text, json{{"type", "text"}, {"text", ""}}, &out);
        close(&out);
    }
    const char* reason = stop_reason(finish_reason_, !calls_.empty(), stop_sequence_);
    json usage = {{"output_tokens", usage_count(usage_, "completion_tokens")}};
    if (usage_.is_object()) {  // the final count, prompt cache included
        const json m = message_usage(usage_);
        usage = {{"input_tokens", m["input_tokens"]},
                 {"cache_creation_input_tokens", 0},
                 {"cache_read_input_tokens", m["cache_read_input_tokens"]},
                 {"output_tokens", m["output_tokens"]}};
    }
    event(&out, "message_delta",
          json{{"type", "message_delta"},
               {"delta",
                {{"stop_reason", reason},
                 {"stop_sequence",
                  std::string(reason) == "stop_sequence" ? json(stop_sequence_) : json(nullptr)}}},
               {"usage", usage}});
    event(&out, "message_stop", json{{"type", "message_stop"}});
    ended_ = true;
    return out;
}

std::string AnthropicStream::on_sse(std::string_view bytes) {
    return replay_chat_sse(sse_reader_, bytes, *this);
}

}  // namespace edgellm::server
