// Tool calls in a model's reply, turned into OpenAI's `tool_calls`.
//
// A model given tools (rendered into its prompt by its chat template) answers a call as
// text. The forms recognised:
//   - Hermes / Qwen 2.5 / Qwen 3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
//     one block per call, possibly after some text; an unclosed last block counts when
//     the reply ended there;
//   - Llama 3.x: <|python_tag|>{...} or the whole reply one JSON object with "name" and
//     "parameters";
//   - small models' habit: the whole reply one JSON object (or an array of them) with
//     "name" and "arguments" / "parameters", possibly inside a ``` code fence.
// A call counts only when its name is one of the request's tools and its arguments are a
// JSON object; anything else stays plain content, so a reply never breaks into a call
// the client cannot use.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace edgellm::server {

struct ToolCall {
    std::string name;
    std::string arguments;  // a JSON object, as text (OpenAI sends arguments as a string)
};

struct ParsedReply {
    std::string content;  // the text outside the calls (trimmed); empty when none
    std::vector<ToolCall> calls;
};

// The tool names a request declares (OpenAI's tools array: {"type": "function",
// "function": {"name": ...}}).
std::vector<std::string> tool_names(const nlohmann::ordered_json& tools);

// The calls in a finished reply, or nullopt when it holds none (then it is plain content).
std::optional<ParsedReply> parse_tool_calls(const std::string& text,
                                            const std::vector<std::string>& names);

// While streaming: how many bytes of `text` (the reply so far) can be sent as content now.
// The rest may still become a tool call and is held back until the reply ends.
size_t tool_safe_prefix(const std::string& text);

}  // namespace edgellm::server
