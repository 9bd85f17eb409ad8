// How a request's tools and earlier tool results reach the model's chat template. Most
// templates take OpenAI's `tools` variable and role "tool" messages as they come; some
// take them their own way, and some not at all:
//   - Phi-4-mini's reads the tools from the system message's "tools" field, a JSON string
//     of the functions (<|system|>...<|tool|>[...]<|/tool|><|end|>, as Microsoft
//     documents it): they go there, in a system message of its model card's wording
//     when the request has none;
//   - SmolLM3's own template (Hugging Face's) reads them from `xml_tools`;
//   - Gemma 4's first template reads tool results from the assistant message's
//     `tool_responses` (its later one reads role "tool" messages): as llama.cpp does for
//     it, each assistant message with calls takes the results that follow it, and the
//     answer after them;
//   - a template that names no tools (Gemma 3, llama.cpp's copy of SmolLM3's) gets a
//     system prompt of ours that declares them and the Hermes call format
//     (tool_system_prompt()).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "edgellm/chat.h"

namespace edgellm {

// Adapt the conversation (*messages) and the template variables (*kwargs, a JSON object)
// for the template: tools is the request's tools array (empty: none).
void prepare_tool_prompt(const std::string& template_text, const nlohmann::ordered_json& tools,
                         std::vector<ChatMessage>* messages, nlohmann::ordered_json* kwargs);

// A prompt rendered with a generation prompt, completed where the template leaves it out:
// Gemma 4's first template closes a model turn that answered after tool results with
// <turn|> and opens no next one (its generation prompt only follows a turn of another
// kind, though with thinking off it still writes the empty thought): as llama.cpp does
// (with thinking on), the model's turn is opened there.
std::string complete_generation_prompt(const std::string& template_text, std::string prompt);

}  // namespace edgellm
