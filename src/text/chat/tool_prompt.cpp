#include "text/chat/tool_prompt.h"

#include "text/chat/tool_calls.h"
#include "text/jinja.h"

namespace edgellm {

namespace {

using json = nlohmann::ordered_json;

// Phi-4-mini's model card: the system message of its tool-calling example.
constexpr const char* kPhiToolSystem = "You are a helpful assistant with some tools.";

// A message as the template sees it (chat_prompt: role and content, then the further
// fields over them), and back.
json message_json(const ChatMessage& m) {
    json j = {{"role", m.role}, {"content", m.content}};
    if (!m.extra_json.empty()) {
        const json extra = json::parse(m.extra_json, nullptr, false);
        if (extra.is_object())
            for (const auto& [k, v] : extra.items()) j[k] = v;
    }
    return j;
}

ChatMessage message_of(json j) {
    ChatMessage m;
    m.role = j.value("role", "");
    j.erase("role");
    if (j.contains("content") && j["content"].is_string()) {
        m.content = j["content"].get<std::string>();
        j.erase("content");
    }
    if (!j.empty()) m.extra_json = j.dump();
    return m;
}

bool has_calls(const json& m) {
    return m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
}

bool has_content(const json& m) {
    const json& c = m.contains("content") ? m["content"] : json();
    return (c.is_string() && !c.get<std::string>().empty()) || (c.is_array() && !c.empty());
}

// Gemma 4's first template: an assistant message with calls takes the role "tool"
// messages after it as tool_responses ({name, response}: the result as JSON when it is
// JSON, else its text; named after the call it answers, in order), and the assistant's
// answer after those as its content (llama.cpp's convert_tool_responses_gemma4).
void gemma4_tool_responses(std::vector<ChatMessage>* messages) {
    std::vector<ChatMessage> out;
    const std::vector<ChatMessage>& in = *messages;
    for (size_t i = 0; i < in.size();) {
        json m = message_json(in[i]);
        if (m["role"] != "assistant" || !has_calls(m)) {
            out.push_back(in[i++]);
            continue;
        }
        json responses = json::array();
        const json& calls = m["tool_calls"];
        for (++i; i < in.size() && in[i].role == "tool"; ++i) {
            const json r = message_json(in[i]);
            json response = r.contains("content") ? r["content"] : json();
            if (response.is_string()) {
                json parsed = json::parse(response.get<std::string>(), nullptr, false);
                if (!parsed.is_discarded()) response = std::move(parsed);
            }
            std::string name;
            const size_t k = responses.size();
            if (k < calls.size() && calls[k].contains("function") && calls[k]["function"].is_object())
                name = calls[k]["function"].value("name", "");
            if (name.empty()) name = r.value("tool_call_id", "");
            responses.push_back({{"name", name}, {"response", response}});
        }
        json merged = {{"role", "assistant"}, {"tool_calls", calls}};
        if (!responses.empty()) merged["tool_responses"] = responses;
        if (i < in.size() && in[i].role == "assistant") {
            const json next = message_json(in[i]);
            if (!has_calls(next) && has_content(next)) {
                merged["content"] = next["content"];
                ++i;
            }
        }
        if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
            merged["reasoning_content"] = m["reasoning_content"];
        if (!merged.contains("content")) merged["content"] = nullptr;
        out.push_back(message_of(std::move(merged)));
    }
    *messages = std::move(out);
}

// Phi-4-mini: the functions, as Python's json.dumps writes them, in the system message's
// "tools" field.
void phi4_tools_in_system(const json& tools, std::vector<ChatMessage>* messages) {
    json functions = json::array();
    for (const json& t : tools)
        if (t.contains("function") && t["function"].is_object()) functions.push_back(t["function"]);
    json context = json::object();
    context["f"] = std::move(functions);
    const auto text = jinja::render("{{ f | tojson }}", context);
    if (!text.ok()) return;  // (plain JSON values always print)
    if (messages->empty() || (*messages)[0].role != "system")
        messages->insert(messages->begin(), ChatMessage("system", kPhiToolSystem));
    json system = message_json((*messages)[0]);
    system["tools"] = *text;
    (*messages)[0] = message_of(std::move(system));
}

}  // namespace

void prepare_tool_prompt(const std::string& t, const json& tools, std::vector<ChatMessage>* messages,
                         json* kwargs) {
    if (tool_format_for_template(t) == ToolFormat::Gemma4 &&
        t.find("OpenAI Chat Completions:") == std::string::npos)
        gemma4_tool_responses(messages);
    if (!tools.is_array() || tools.empty()) return;
    if (tool_format_for_template(t) == ToolFormat::Phi4Mini) {
        phi4_tools_in_system(tools, messages);
    } else if (t.find("xml_tools") != std::string::npos) {
        (*kwargs)["xml_tools"] = tools;
    } else if (!template_renders_tools(t)) {
        const std::string decl = tool_system_prompt(tools);
        if (!messages->empty() && (*messages)[0].role == "system")
            (*messages)[0].content = decl + "\n\n" + (*messages)[0].content;
        else
            messages->insert(messages->begin(), ChatMessage("system", decl));
    }
}

std::string complete_generation_prompt(const std::string& t, std::string prompt) {
    if (tool_format_for_template(t) != ToolFormat::Gemma4) return prompt;
    // (with thinking off the first template still adds its empty thought after the <turn|>)
    for (std::string_view tail : {"<turn|>\n", "<turn|>\n<|channel>thought\n<channel|>"}) {
        if (prompt.size() >= tail.size() && prompt.compare(prompt.size() - tail.size(), tail.size(), tail) == 0) {
            prompt.insert(prompt.size() - tail.size() + 8, "<|turn>model\n");  // after "<turn|>\n"
            break;
        }
    }
    return prompt;
}

}  // namespace edgellm
