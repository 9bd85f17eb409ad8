// Built-in chat formats (ChatML, Llama 3, Gemma). The model's own Jinja template arrives with a
// later issue; until then the format is chosen from the vocabulary and the template text.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "edgellm/gguf.h"
#include "edgellm/tokenizer.h"

namespace edgellm {

struct ChatMessage {
    ChatMessage() = default;
    ChatMessage(std::string r, std::string c, std::string extra = {})
        : role(std::move(r)), content(std::move(c)), extra_json(std::move(extra)) {}
    std::string role;  // "system", "user", "assistant"
    std::string content;
    // A JSON object of further fields for the model's template (OpenAI's tool_calls,
    // tool_call_id, name, or "content": null); its keys override role and content. Empty:
    // none. The built-in formats use role and content only.
    std::string extra_json;
};

enum class ChatFormat { ChatML, Llama3, Gemma };

// The format the model was trained with, from its special tokens and template.
ChatFormat detect_chat_format(const GgufFile& f, const Tokenizer& t);
const char* chat_format_name(ChatFormat f);
// The format of a name chat_format_name gives ("chatml", "llama3", "gemma"; llama.cpp's
// --chat-template NAME), or nullopt.
std::optional<ChatFormat> chat_format_from_name(std::string_view name);
// The Jinja source of llama.cpp's built-in template NAME (--chat-template NAME), rendering what
// llama.cpp's C++ formatter for that name produces; nullopt for a name it does not know.
// (chatml, llama3 and gemma are ChatFormats, not here: chat_format_from_name.)
std::optional<std::string> builtin_chat_template(std::string_view name);
// The names builtin_chat_template knows, in alphabetical order.
std::vector<std::string> builtin_chat_template_names();

// Render messages as the prompt text; with add_generation_prompt the text ends where the
// assistant's reply begins. Control tokens appear as text: tokenize with parse_special.
// default_system: used when there is no system message and the model's template has one
// (Qwen2.5's "You are Qwen, ..."); empty for none.
std::string render_chat(ChatFormat f, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& default_system = "");

// The default system prompt the model's template inserts, if we recognise one.
std::string default_system_prompt(const GgufFile& f);

// A conversation rendered for the model: with its own template (tokenizer.chat_template,
// Jinja, as llama.cpp's --jinja and transformers render it) when it has one that renders,
// else with the family's built-in format. `how` says which ("template" or "built-in
// gemma"), `warning` why the template was not used when it was there; bos_in_text: the
// text already starts with the BOS token (tokenize it without adding another).
struct ChatPrompt {
    std::string text;
    std::string how;
    std::string warning;
    bool bos_in_text = false;
};
// extra_json: a JSON object of further template variables (llama.cpp's
// --chat-template-kwargs, e.g. {"enable_thinking": false}); empty for none.
// tools_json: a JSON array of tools (OpenAI's format) for templates that take them.
// template_source: a template to use instead of the file's (llama.cpp's
// --chat-template-file); empty for the file's.
ChatPrompt chat_prompt(const GgufFile& f, const Tokenizer& t,
                       const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                       const std::string& extra_json = "", const std::string& tools_json = "",
                       const std::string& template_source = "");

}  // namespace edgellm
