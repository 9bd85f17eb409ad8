// Tool calls in a model's reply, turned into OpenAI's `tool_calls`.
//
// A model given tools (rendered into its prompt by its chat template) answers a call as
// text. The forms recognised, whatever the model:
//   - Hermes / Qwen 2.5 / Qwen 3 / SmolLM3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
//     one block per call, possibly after some text; an unclosed last block counts when
//     the reply ended there;
//   - Phi-4-mini: <|tool_call|>[{"name": ..., "arguments": {...}}, ...]<|/tool_call|> (the
//     tags are control tokens, so usually only the array is left in the text), or vLLM's
//     functools[...];
//   - Llama 3.x: <|python_tag|>{...} or the whole reply one JSON object with "name" and
//     "parameters";
//   - Gemma 4: <|tool_call>call:NAME{key:value,...}<tool_call|>, its own notation for the
//     arguments (gemma4_args.h), possibly after some text;
//   - Qwen3.5 / Qwen3-Coder: <tool_call><function=NAME><parameter=KEY>value</parameter>...
//     </function></tool_call>, each value raw text typed by its tool's schema (xml_calls.h),
//     possibly after some text; the <function=...> block also without its <tool_call>;
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

#include "edgellm/json_schema.h"
#include "edgellm/sampler.h"

namespace edgellm {

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
// cut: the reply was cut short (max_tokens): an unfinished last call is dropped, the
// complete ones before it count. tools: the request's tools, whose parameters' types say
// what Qwen3.5's raw values are (null: each value is read as one of any type).
std::optional<ParsedReply> parse_tool_calls(const std::string& text,
                                            const std::vector<std::string>& names,
                                            bool cut = false,
                                            const nlohmann::ordered_json* tools = nullptr);

// While streaming: how many bytes of `text` (the reply so far) can be sent as content now.
// The rest may still become a tool call and is held back until the reply ends.
size_t tool_safe_prefix(const std::string& text);

// How a model family writes a call, and so what the tool-call grammar makes it write:
//   Hermes:   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>  (Qwen 2.5 / 3,
//             Hermes, SmolLM3; also the format edgellm documents for families without one,
//             Gemma 3, whose template is then given the tools in a system prompt of ours)
//   Llama3:   {"name": "f", "parameters": {...}}  (Llama 3.1 / 3.2 JSON tool calling)
//   Phi4Mini: [{"name": "f", "arguments": {...}}, ...]  (what is left of Phi-4-mini's
//             <|tool_call|>[...]<|/tool_call|> once its control tokens are taken out)
//   Gemma4:   <|tool_call>call:f{key:<|"|>text<|"|>,n:1}<tool_call|>
//   QwenXml:  <tool_call>\n<function=f>\n<parameter=key>\ntext\n</parameter>\n</function>\n</tool_call>
//             (Qwen3.5, Qwen3-Coder)
enum class ToolFormat { Hermes, Llama3, Phi4Mini, Gemma4, QwenXml };
// The format a chat template asks for (Hermes when it names none): Gemma 4's templates
// write '<|tool_call>call:' (as llama.cpp detects them), Qwen3.5's write <tool_call>,
// <function= and <parameter= (llama.cpp's test for the Qwen3-Coder form), Phi-4-mini's
// declare tools between <|tool|> and <|/tool|>, Llama 3.x's have <|python_tag|> or
// "parameters".
ToolFormat tool_format_for_template(const std::string& template_text);
// Whether the template renders `tools` itself (else tool_system_prompt() describes them).
bool template_renders_tools(const std::string& template_text);
// A system prompt that declares the tools and the Hermes call format, for templates that
// do not render tools (Gemma 3).
std::string tool_system_prompt(const nlohmann::ordered_json& tools);

// The system prompt's note on the answer's form when a request has tools and a response
// schema (the grammar allows either; the model should know what the answer looks like).
std::string answer_schema_prompt(const nlohmann::ordered_json& schema);

// The grammar of a reply that calls tools: each call's name one of the tools (or only the
// named one) and its arguments constrained to that tool's `parameters` schema.
// choice "required" or a function name: the reply is calls from its first token (no
// triggers; Gemma 4: after its thinking channel, when it opens one). "auto", Hermes: the
// reply is calls, or text that may end in calls, where text may not open like bare or
// fenced JSON or a tag (so a call is always a constrained <tool_call> block, bare or fenced
// object) nor contain "<to" outside a call; Llama 3 / Phi-4-mini: lazy, a reply that opens
// with "{" / "[" is calls, anything else free text; Gemma 4: lazy from the first
// "<|tool_call>", free text before it; Qwen3.5: calls, or text without "<tool_call>" and
// "<function=" that may end in calls (not lazy: its calls never hide in text the grammar
// did not see; a call's <function=...> block may come without its <tool_call>, as
// Qwen3-Coder writes it at times). Qwen3.5 thinks first: thinking_open (the prompt opened a
// <think> block) makes the reply close it before its calls or answer (the reasoning may
// not hold a call's tags); without it a <think> block may come first.
// parallel: several calls may follow each other. answer (not null, choice "auto"): the
// request's response schema; the reply is then calls, or an answer valid against it (no
// free text; not lazy). nullopt with *why when a tool's parameters (or the answer's
// schema: why->path starts "$.response_format") cannot be enforced (why->path starts
// "$.tools[i].function.parameters").
struct ToolGrammar {
    std::string gbnf;
    std::vector<GrammarTrigger> triggers;
    // The calls' arguments are held to their tools' schemas. Not wholly for Gemma 4, whose
    // notation the grammar follows for the keys and types of the schema but not for the
    // rest (required keys, bounds: gemma4_schema_rule()), nor for Qwen3.5's raw values
    // where a schema says more than their type (xml_call_rule()): those arguments still
    // need checking.
    bool arguments_typed = true;
};
std::optional<ToolGrammar> tool_call_grammar(const nlohmann::ordered_json& tools, ToolFormat fmt,
                                             const std::string& choice, bool parallel,
                                             SchemaRefusal* why,
                                             const nlohmann::ordered_json* answer = nullptr,
                                             bool thinking_open = false);

}  // namespace edgellm
