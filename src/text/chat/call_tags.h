// The tags around tool calls in the formats models write (tool_calls.h lists them), shared
// by the reader of a finished reply and the streaming one.
#pragma once

#include <string_view>

namespace edgellm::call_tags {

// Hermes / Qwen / SmolLM3: <tool_call>{...}</tool_call>
inline constexpr std::string_view kOpen = "<tool_call>";
inline constexpr std::string_view kClose = "</tool_call>";
// Llama 3.x: <|python_tag|>{...}
inline constexpr std::string_view kPythonTag = "<|python_tag|>";
// Phi-4-mini: <|tool_call|>[...]<|/tool_call|>, and vLLM's functools[...]
inline constexpr std::string_view kPhiOpen = "<|tool_call|>";
inline constexpr std::string_view kPhiClose = "<|/tool_call|>";
inline constexpr std::string_view kFunctools = "functools";
// Qwen3.5 / Qwen3-Coder: <tool_call><function=NAME>...</function></tool_call>, the
// function's block also bare (Qwen3-Coder leaves the <tool_call> out at times)
inline constexpr std::string_view kFunction = "<function=";
inline constexpr std::string_view kFunctionEnd = "</function>";
// Gemma 4: <|tool_call>call:NAME{...}<tool_call|>
inline constexpr std::string_view kGemmaOpen = "<|tool_call>";
inline constexpr std::string_view kGemmaCall = "call:";
inline constexpr std::string_view kGemmaClose = "<tool_call|>";

}  // namespace edgellm::call_tags
