#include "edgellm/chat.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "text/jinja.h"

namespace edgellm {

ChatFormat detect_chat_format(const GgufFile& f, const Tokenizer& t) {
    const std::string tmpl = f.get_string("tokenizer.chat_template").value_or("");
    if (tmpl.find("<|start_header_id|>") != std::string::npos || t.find("<|start_header_id|>"))
        return ChatFormat::Llama3;
    if (tmpl.find("<start_of_turn>") != std::string::npos || t.find("<start_of_turn>"))
        return ChatFormat::Gemma;
    return ChatFormat::ChatML;
}

const char* chat_format_name(ChatFormat f) {
    switch (f) {
        case ChatFormat::Llama3:
            return "llama3";
        case ChatFormat::ChatML:
            return "chatml";
        case ChatFormat::Gemma:
            return "gemma";
    }
    return "?";
}

std::optional<ChatFormat> chat_format_from_name(std::string_view name) {
    for (ChatFormat f : {ChatFormat::ChatML, ChatFormat::Llama3, ChatFormat::Gemma})
        if (name == chat_format_name(f)) return f;
    return std::nullopt;
}

std::string default_system_prompt(const GgufFile& f) {
    // Qwen2 / Qwen2.5 templates insert this system message when the caller gives none.
    const std::string tmpl = f.get_string("tokenizer.chat_template").value_or("");
    const std::string qwen = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    if (tmpl.find(qwen) != std::string::npos) return qwen;
    if (tmpl.find("You are a helpful assistant.") != std::string::npos)
        return "You are a helpful assistant.";
    return {};
}

std::string render_chat(ChatFormat f, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& default_system) {
    std::string out;
    const bool has_system = !messages.empty() && messages[0].role == "system";
    if (f == ChatFormat::ChatML) {
        // <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n
        if (!has_system && !default_system.empty())
            out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
        for (const auto& m : messages)
            out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        if (add_generation_prompt) out += "<|im_start|>assistant\n";
    } else if (f == ChatFormat::Gemma) {
        // <start_of_turn>user\ncontent<end_of_turn>\n ... <start_of_turn>model\n; Gemma has
        // no system role: its template puts the system text before the first user message.
        std::string system = has_system ? messages[0].content : default_system;
        for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
            const ChatMessage& m = messages[i];
            std::string content = m.content;
            if (!system.empty() && m.role == "user") {
                content = system + "\n\n" + content;
                system.clear();
            }
            const std::string role = m.role == "assistant" ? "model" : m.role;
            out += "<start_of_turn>" + role + "\n" + content + "<end_of_turn>\n";
        }
        if (add_generation_prompt) out += "<start_of_turn>model\n";
    } else {
        // BOS comes from the tokenizer; then headers, a blank line, content and <|eot_id|>.
        if (!has_system && !default_system.empty())
            out += "<|start_header_id|>system<|end_header_id|>\n\n" + default_system + "<|eot_id|>";
        for (const auto& m : messages)
            out +=
                "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
        if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    }
    return out;
}

ChatPrompt chat_prompt(const GgufFile& f, const Tokenizer& t,
                       const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                       const std::string& extra_json, const std::string& tools_json,
                       const std::string& template_source) {
    ChatPrompt out;
    const std::string bos = t.bos() >= 0 ? t.token_to_piece(t.bos(), true) : "";
    const std::string eos = t.eos() >= 0 ? t.token_to_piece(t.eos(), true) : "";
    const auto tmpl = template_source.empty() ? f.get_string("tokenizer.chat_template")
                                              : std::optional<std::string>(template_source);
    if (tmpl && !tmpl->empty()) {
        // (ordered: keys keep the order they were given in, as Python's dicts do, which
        // shows wherever a template prints a tool schema with tojson)
        nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
        nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
        std::string err;
        for (const ChatMessage& m : messages) {
            nlohmann::ordered_json msg = {{"role", m.role}, {"content", m.content}};
            if (!m.extra_json.empty()) {
                const auto extra = nlohmann::ordered_json::parse(m.extra_json, nullptr, false);
                if (extra.is_object())
                    for (const auto& [k, v] : extra.items()) msg[k] = v;
                else
                    err = "a message's further fields are not a JSON object";
            }
            msgs.push_back(std::move(msg));
        }
        ctx["messages"] = msgs;
        ctx["add_generation_prompt"] = add_generation_prompt;
        ctx["bos_token"] = bos;
        ctx["eos_token"] = eos;
        if (!tools_json.empty()) {
            const auto tools = nlohmann::ordered_json::parse(tools_json, nullptr, false);
            if (tools.is_array())
                ctx["tools"] = tools;
            else
                err = "tools are not a JSON array";
        }
        if (!extra_json.empty()) {
            const auto extra = nlohmann::ordered_json::parse(extra_json, nullptr, false);
            if (extra.is_object())
                for (const auto& [k, v] : extra.items()) ctx[k] = v;
            else
                err = "template arguments are not a JSON object";
        }
        if (err.empty()) {
            auto r = jinja::render(*tmpl, ctx);
            if (r.ok()) {
                out.text = *r;
                out.how = "template";
                out.bos_in_text = !bos.empty() && out.text.compare(0, bos.size(), bos) == 0;
                return out;
            }
            err = r.error();
        }
        out.warning = std::string(template_source.empty() ? "the model's" : "the given") +
                      " chat template cannot be used (" + err + ")";
    }
    const ChatFormat fmt = detect_chat_format(f, t);
    out.text = render_chat(fmt, messages, add_generation_prompt, default_system_prompt(f));
    out.how = std::string("built-in ") + chat_format_name(fmt);
    return out;
}

}  // namespace edgellm
