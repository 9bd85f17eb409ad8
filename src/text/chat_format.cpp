#include "edgellm/chat.h"

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

}  // namespace edgellm
