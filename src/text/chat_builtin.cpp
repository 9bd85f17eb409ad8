// llama.cpp's built-in chat templates (--chat-template NAME) as Jinja sources.
//
// llama.cpp formats these names in C++ (src/llama-chat.cpp, llm_chat_apply_template); each
// source below renders the same bytes from messages[].role, messages[].content and
// add_generation_prompt (llama.cpp's add_ass), quirks included: several names ignore
// add_generation_prompt, some drop roles they do not know, some keep a system message for
// the next user turn. chatml, llama3 and gemma are not here: they are ChatFormats
// (chat_format_from_name).
//
// How the sources are written:
//  - every tag carries `-` on both sides, so the layout of the source never reaches the
//    output (the renderer also has trim_blocks and lstrip_blocks on); all output text sits in
//    string literals, with \n for newlines.
//  - where llama.cpp trims (its trim(): C's isspace, i.e. " \t\n\v\f\r") the sources use
//    |trim(' \t\n\v\f\r'); a plain |trim is Python's str.strip(), which also strips Unicode
//    spaces (U+00A0, U+3000, ...) that llama.cpp keeps.
//  - role names llama.cpp upper-cases (openchat, bailing) use |upper; llama.cpp's toupper
//    is ASCII-only, which is the same for every role that matters (system, user, assistant).
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "edgellm/chat.h"

namespace edgellm {

namespace {

struct BuiltinTemplate {
    const char* name;    // llama.cpp's name (LLM_CHAT_TEMPLATES)
    const char* source;  // Jinja
};

// Granite 4.0 and 4.1 (the same format).
constexpr const char* kGranite4 = R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'assistant_tool_call' -%}
        {{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' -}}
    {%- else -%}
        {{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' -}}
    {%- endif -%}
    {{- message['content'] + '<|end_of_text|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|start_of_role|>assistant<|end_of_role|>' -}}
{%- endif -%}
)jinja";

// In the order of llama.cpp's LLM_CHAT_TEMPLATES.
constexpr BuiltinTemplate kBuiltinTemplates[] = {
    // Llama 2: "[INST] " opens the first turn without BOS; an assistant message closes a
    // turn and the next message opens one. A system message without <<SYS>> (plain llama2)
    // is folded into the turn followed by one newline. No generation prompt: the text
    // already ends with " [/INST]".
    {"llama2", R"jinja(
{%- set ns = namespace(in_turn=true) -%}
{{- '[INST] ' -}}
{%- for message in messages -%}
    {%- if not ns.in_turn -%}
        {%- set ns.in_turn = true -%}
        {{- '[INST] ' -}}
    {%- endif -%}
    {%- if message['role'] == 'system' -%}
        {{- message['content'] + '\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- message['content'] + ' [/INST]' -}}
    {%- else -%}
        {{- message['content'] + '</s>' -}}
        {%- set ns.in_turn = false -%}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    {"llama2-sys", R"jinja(
{%- set ns = namespace(in_turn=true) -%}
{{- '[INST] ' -}}
{%- for message in messages -%}
    {%- if not ns.in_turn -%}
        {%- set ns.in_turn = true -%}
        {{- '[INST] ' -}}
    {%- endif -%}
    {%- if message['role'] == 'system' -%}
        {{- '<<SYS>>\n' + message['content'] + '\n<</SYS>>\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- message['content'] + ' [/INST]' -}}
    {%- else -%}
        {{- message['content'] + '</s>' -}}
        {%- set ns.in_turn = false -%}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    // (BOS as text before every later turn)
    {"llama2-sys-bos", R"jinja(
{%- set ns = namespace(in_turn=true) -%}
{{- '[INST] ' -}}
{%- for message in messages -%}
    {%- if not ns.in_turn -%}
        {%- set ns.in_turn = true -%}
        {{- '<s>[INST] ' -}}
    {%- endif -%}
    {%- if message['role'] == 'system' -%}
        {{- '<<SYS>>\n' + message['content'] + '\n<</SYS>>\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- message['content'] + ' [/INST]' -}}
    {%- else -%}
        {{- message['content'] + '</s>' -}}
        {%- set ns.in_turn = false -%}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    // (every message trimmed)
    {"llama2-sys-strip", R"jinja(
{%- set ns = namespace(in_turn=true) -%}
{{- '[INST] ' -}}
{%- for message in messages -%}
    {%- set content = message['content']|trim(' \t\n\v\f\r') -%}
    {%- if not ns.in_turn -%}
        {%- set ns.in_turn = true -%}
        {{- '[INST] ' -}}
    {%- endif -%}
    {%- if message['role'] == 'system' -%}
        {{- '<<SYS>>\n' + content + '\n<</SYS>>\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- content + ' [/INST]' -}}
    {%- else -%}
        {{- content + '</s>' -}}
        {%- set ns.in_turn = false -%}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    // Mistral v1, v3, v3-tekken: they differ in the spaces around [INST] and [/INST], and v3
    // trims the assistant's message. A system message goes inside the turn. No generation
    // prompt.
    {"mistral-v1", R"jinja(
{%- set ns = namespace(in_turn=false) -%}
{%- for message in messages -%}
    {%- if not ns.in_turn -%}
        {%- set ns.in_turn = true -%}
        {{- ' [INST] ' -}}
    {%- endif -%}
    {%- if message['role'] == 'system' -%}
        {{- message['content'] + '\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- message['content'] + ' [/INST]' -}}
    {%- else -%}
        {{- ' ' + message['content'] + '</s>' -}}
        {%- set ns.in_turn = false -%}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    {"mistral-v3", R"jinja(
{%- set ns = namespace(in_turn=false) -%}
{%- for message in messages -%}
    {%- if not ns.in_turn -%}
        {%- set ns.in_turn = true -%}
        {{- '[INST] ' -}}
    {%- endif -%}
    {%- if message['role'] == 'system' -%}
        {{- message['content'] + '\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- message['content'] + '[/INST]' -}}
    {%- else -%}
        {{- ' ' + message['content']|trim(' \t\n\v\f\r') + '</s>' -}}
        {%- set ns.in_turn = false -%}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    {"mistral-v3-tekken", R"jinja(
{%- set ns = namespace(in_turn=false) -%}
{%- for message in messages -%}
    {%- if not ns.in_turn -%}
        {%- set ns.in_turn = true -%}
        {{- '[INST]' -}}
    {%- endif -%}
    {%- if message['role'] == 'system' -%}
        {{- message['content'] + '\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- message['content'] + '[/INST]' -}}
    {%- else -%}
        {{- message['content'] + '</s>' -}}
        {%- set ns.in_turn = false -%}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    // Mistral v7 (tekken: without the spaces). Roles other than system and user are
    // rendered as the assistant. No generation prompt.
    {"mistral-v7", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' -}}
    {%- elif message['role'] == 'user' -%}
        {{- '[INST] ' + message['content'] + '[/INST]' -}}
    {%- else -%}
        {{- ' ' + message['content'] + '</s>' -}}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    {"mistral-v7-tekken", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' -}}
    {%- elif message['role'] == 'user' -%}
        {{- '[INST]' + message['content'] + '[/INST]' -}}
    {%- else -%}
        {{- message['content'] + '</s>' -}}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    {"phi3", R"jinja(
{%- for message in messages -%}
    {{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|assistant|>\n' -}}
{%- endif -%}
)jinja"},
    {"phi4", R"jinja(
{%- for message in messages -%}
    {{- '<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant<|im_sep|>' -}}
{%- endif -%}
)jinja"},
    {"falcon3", R"jinja(
{%- for message in messages -%}
    {{- '<|' + message['role'] + '|>\n' + message['content'] + '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|assistant|>\n' -}}
{%- endif -%}
)jinja"},
    {"zephyr", R"jinja(
{%- for message in messages -%}
    {{- '<|' + message['role'] + '|>\n' + message['content'] + '<|endoftext|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|assistant|>\n' -}}
{%- endif -%}
)jinja"},
    // (BOS as text before every message but the first)
    {"monarch", R"jinja(
{%- for message in messages -%}
    {%- if not loop.first -%}
        {{- '<s>' -}}
    {%- endif -%}
    {{- message['role'] + '\n' + message['content'] + '</s>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<s>assistant\n' -}}
{%- endif -%}
)jinja"},
    // Orion: system messages are collected (concatenated) and put before the next user
    // message; each user message ends with the assistant's prefix, so there is no
    // generation prompt. Roles other than system and user are rendered as the assistant.
    {"orion", R"jinja(
{%- set ns = namespace(system='') -%}
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {%- set ns.system = ns.system + message['content'] -%}
    {%- elif message['role'] == 'user' -%}
        {{- 'Human: ' -}}
        {%- if ns.system -%}
            {{- ns.system + '\n\n' -}}
            {%- set ns.system = '' -%}
        {%- endif -%}
        {{- message['content'] + '\n\nAssistant: </s>' -}}
    {%- else -%}
        {{- message['content'] + '</s>' -}}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    // OpenChat: the role with its first letter upper-cased ("GPT4 Correct User: ").
    {"openchat", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- message['content'] + '<|end_of_turn|>' -}}
    {%- else -%}
        {%- set role = message['role'][:1]|upper + message['role'][1:] -%}
        {{- 'GPT4 Correct ' + role + ': ' + message['content'] + '<|end_of_turn|>' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- 'GPT4 Correct Assistant:' -}}
{%- endif -%}
)jinja"},
    // Vicuna (and its Orca variant, with a SYSTEM: prefix); other roles are dropped.
    {"vicuna", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- message['content'] + '\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- 'USER: ' + message['content'] + '\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- 'ASSISTANT: ' + message['content'] + '</s>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- 'ASSISTANT:' -}}
{%- endif -%}
)jinja"},
    {"vicuna-orca", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- 'SYSTEM: ' + message['content'] + '\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- 'USER: ' + message['content'] + '\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- 'ASSISTANT: ' + message['content'] + '</s>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- 'ASSISTANT:' -}}
{%- endif -%}
)jinja"},
    // DeepSeek Coder: the system message runs straight into the first instruction.
    {"deepseek", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- message['content'] -}}
    {%- elif message['role'] == 'user' -%}
        {{- '### Instruction:\n' + message['content'] + '\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '### Response:\n' + message['content'] + '\n<|EOT|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '### Response:\n' -}}
{%- endif -%}
)jinja"},
    {"deepseek2", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- message['content'] + '\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- 'User: ' + message['content'] + '\n\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- 'Assistant: ' + message['content'] + '<｜end▁of▁sentence｜>' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- 'Assistant:' -}}
{%- endif -%}
)jinja"},
    {"deepseek3", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- message['content'] + '\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- '<｜User｜>' + message['content'] -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<｜Assistant｜>' -}}
{%- endif -%}
)jinja"},
    // DeepSeek-OCR: the contents, nothing else.
    {"deepseek-ocr", R"jinja(
{%- for message in messages -%}
    {{- message['content'] -}}
{%- endfor -%}
)jinja"},
    {"command-r", R"jinja(
{%- for message in messages -%}
    {%- set content = message['content']|trim(' \t\n\v\f\r') -%}
    {%- if message['role'] == 'system' -%}
        {{- '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + content + '<|END_OF_TURN_TOKEN|>' -}}
    {%- elif message['role'] == 'user' -%}
        {{- '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content + '<|END_OF_TURN_TOKEN|>' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' + content + '<|END_OF_TURN_TOKEN|>' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}
{%- endif -%}
)jinja"},
    // (the space after each role's newline is ChatGLM3's)
    {"chatglm3", R"jinja(
{{- '[gMASK]sop' -}}
{%- for message in messages -%}
    {{- '<|' + message['role'] + '|>\n ' + message['content'] -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|assistant|>' -}}
{%- endif -%}
)jinja"},
    {"chatglm4", R"jinja(
{{- '[gMASK]<sop>' -}}
{%- for message in messages -%}
    {{- '<|' + message['role'] + '|>\n' + message['content'] -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|assistant|>\n' -}}
{%- endif -%}
)jinja"},
    {"glmedge", R"jinja(
{%- for message in messages -%}
    {{- '<|' + message['role'] + '|>\n' + message['content'] -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|assistant|>' -}}
{%- endif -%}
)jinja"},
    // MiniCPM: only the user's messages are marked, and each ends with the assistant's
    // prefix (so no generation prompt); every message is trimmed.
    {"minicpm", R"jinja(
{%- for message in messages -%}
    {%- set content = message['content']|trim(' \t\n\v\f\r') -%}
    {%- if message['role'] == 'user' -%}
        {{- '<用户>' + content + '<AI>' -}}
    {%- else -%}
        {{- content -}}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    // EXAONE 3 (the user's turn has no [|endofturn|]); other roles are dropped.
    {"exaone3", R"jinja(
{%- for message in messages -%}
    {%- set content = message['content']|trim(' \t\n\v\f\r') -%}
    {%- if message['role'] == 'system' -%}
        {{- '[|system|]' + content + '[|endofturn|]\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- '[|user|]' + content + '\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '[|assistant|]' + content + '[|endofturn|]\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '[|assistant|]' -}}
{%- endif -%}
)jinja"},
    // EXAONE 4: EXAONE 3 plus the tool role.
    {"exaone4", R"jinja(
{%- for message in messages -%}
    {%- set content = message['content']|trim(' \t\n\v\f\r') -%}
    {%- if message['role'] == 'system' -%}
        {{- '[|system|]' + content + '[|endofturn|]\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- '[|user|]' + content + '\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '[|assistant|]' + content + '[|endofturn|]\n' -}}
    {%- elif message['role'] == 'tool' -%}
        {{- '[|tool|]' + content + '[|endofturn|]\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '[|assistant|]' -}}
{%- endif -%}
)jinja"},
    {"exaone-moe", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] in ['system', 'user', 'assistant', 'tool'] -%}
        {{- '<|' + message['role'] + '|>\n' + message['content']|trim(' \t\n\v\f\r') +
            '<|endofturn|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|assistant|>\n' -}}
{%- endif -%}
)jinja"},
    // RWKV World: "Assistant:" follows the last message when it is the user's, whatever
    // add_generation_prompt says ("\n\n" is the model's end of turn).
    {"rwkv-world", R"jinja(
{%- for message in messages -%}
    {%- set content = message['content']|trim(' \t\n\v\f\r') -%}
    {%- if message['role'] == 'system' -%}
        {{- 'System: ' + content + '\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- 'User: ' + content + '\n\n' -}}
        {%- if loop.last -%}
            {{- 'Assistant:' -}}
        {%- endif -%}
    {%- elif message['role'] == 'assistant' -%}
        {{- 'Assistant: ' + content + '\n\n' -}}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    // Granite 3.x: the pseudo-role assistant_tool_call keeps its name and adds <|tool_call|>.
    {"granite", R"jinja(
{%- for message in messages -%}
    {{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' -}}
    {%- if message['role'] == 'assistant_tool_call' -%}
        {{- '<|tool_call|>' -}}
    {%- endif -%}
    {{- message['content'] + '<|end_of_text|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|start_of_role|>assistant<|end_of_role|>' -}}
{%- endif -%}
)jinja"},
    // Granite 4.0 and 4.1: assistant_tool_call is written as the assistant's role.
    {"granite-4.0", kGranite4},
    {"granite-4.1", kGranite4},
    // GigaChat: only a first system message counts (it follows the BOS text directly); a
    // later one is dropped, as are roles other than user and assistant.
    {"gigachat", R"jinja(
{%- set has_system = messages and messages[0]['role'] == 'system' -%}
{%- if has_system -%}
    {{- '<s>' + messages[0]['content'] + '<|message_sep|>' -}}
{%- else -%}
    {{- '<s>' -}}
{%- endif -%}
{%- for message in (messages[1:] if has_system else messages) -%}
    {%- if message['role'] == 'user' -%}
        {{- 'user<|role_sep|>' + message['content'] + '<|message_sep|>' -}}
        {{- 'available functions<|role_sep|>[]<|message_sep|>' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- 'assistant<|role_sep|>' + message['content'] + '<|message_sep|>' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- 'assistant<|role_sep|>' -}}
{%- endif -%}
)jinja"},
    {"megrez", R"jinja(
{%- for message in messages -%}
    {{- '<|role_start|>' + message['role'] + '<|role_end|>' + message['content'] +
        '<|turn_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|role_start|>assistant<|role_end|>' -}}
{%- endif -%}
)jinja"},
    // YandexGPT: system messages (and roles other than user and assistant) are dropped;
    // "\n\n" is the model's end of turn.
    {"yandex", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'user' -%}
        {{- ' Пользователь: ' + message['content'] + '\n\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- ' Ассистент: ' + message['content'] + '\n\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- ' Ассистент:[SEP]' -}}
{%- endif -%}
)jinja"},
    // Bailing (Ling, Ring): the role upper-cased, the user as HUMAN.
    {"bailing", R"jinja(
{%- for message in messages -%}
    {%- set role = 'HUMAN' if message['role'] == 'user' else message['role']|upper -%}
    {{- '<role>' + role + '</role>' + message['content'] -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<role>ASSISTANT</role>' -}}
{%- endif -%}
)jinja"},
    {"bailing-think", R"jinja(
{%- for message in messages -%}
    {%- set role = 'HUMAN' if message['role'] == 'user' else message['role']|upper -%}
    {{- '<role>' + role + '</role>' + message['content'] -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<role>ASSISTANT</role><think>' -}}
{%- endif -%}
)jinja"},
    // Bailing 2 (Ling 2.0): without a first system message, one that turns thinking off.
    {"bailing2", R"jinja(
{%- if not (messages and messages[0]['role'] == 'system') -%}
    {{- '<role>SYSTEM</role>detailed thinking off<|role_end|>' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- set role = 'HUMAN' if message['role'] == 'user' else message['role']|upper -%}
    {{- '<role>' + role + '</role>' + message['content'] + '<|role_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<role>ASSISTANT</role>' -}}
{%- endif -%}
)jinja"},
    {"llama4", R"jinja(
{%- for message in messages -%}
    {{- '<|header_start|>' + message['role'] + '<|header_end|>\n\n' +
        message['content']|trim(' \t\n\v\f\r') + '<|eot|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|header_start|>assistant<|header_end|>\n\n' -}}
{%- endif -%}
)jinja"},
    // SmolVLM: <|im_start|> is its BOS, the turns are not ChatML; roles other than system
    // and user are rendered as the assistant.
    {"smolvlm", R"jinja(
{{- '<|im_start|>' -}}
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- message['content'] + '\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- 'User: ' + message['content'] + '<end_of_utterance>\n' -}}
    {%- else -%}
        {{- 'Assistant: ' + message['content'] + '<end_of_utterance>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- 'Assistant:' -}}
{%- endif -%}
)jinja"},
    // Hunyuan A13B: roles other than system and assistant are rendered as the user. No
    // generation prompt.
    {"hunyuan-moe", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- '<|startoftext|>' + message['content'] + '<|extra_4|>' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- message['content'] + '<|eos|>' -}}
    {%- else -%}
        {{- '<|startoftext|>' + message['content'] + '<|extra_0|>' -}}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    // gpt-oss (Harmony, without channels)
    {"gpt-oss", R"jinja(
{%- for message in messages -%}
    {{- '<|start|>' + message['role'] + '<|message|>' + message['content'] -}}
    {{- '<|return|>' if message['role'] == 'assistant' else '<|end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|start|>assistant' -}}
{%- endif -%}
)jinja"},
    // Hunyuan dense: only a first system message counts; each user message ends with the
    // assistant's marker and each assistant message starts with it too, so a reply after a
    // user turn shows the marker twice (as llama.cpp writes it). No generation prompt.
    {"hunyuan-dense", R"jinja(
{%- for message in messages -%}
    {%- if loop.first and message['role'] == 'system' -%}
        {{- message['content'] + '<｜hy_place▁holder▁no▁3｜>' -}}
    {%- endif -%}
    {%- if message['role'] == 'assistant' -%}
        {{- '<｜hy_Assistant｜>' + message['content'] + '<｜hy_place▁holder▁no▁2｜>' -}}
    {%- elif message['role'] == 'user' -%}
        {{- '<｜hy_User｜>' + message['content'] + '<｜hy_Assistant｜>' -}}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    // HunyuanOCR / HunyuanVL: each marker follows its message. No generation prompt.
    {"hunyuan-vl", R"jinja(
{{- '<｜hy_begin▁of▁sentence｜>' -}}
{%- for message in messages -%}
    {%- if loop.first and message['role'] == 'system' -%}
        {{- message['content'] + '<｜hy_place▁holder▁no▁3｜>' -}}
    {%- elif message['role'] == 'user' -%}
        {{- message['content'] + '<｜hy_User｜>' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- message['content'] + '<｜hy_Assistant｜>' -}}
    {%- endif -%}
{%- endfor -%}
)jinja"},
    // Kimi K2: a role it does not know gets no header, but its content and <|im_end|> stay.
    {"kimi-k2", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- '<|im_system|>system<|im_middle|>' -}}
    {%- elif message['role'] == 'user' -%}
        {{- '<|im_user|>user<|im_middle|>' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '<|im_assistant|>assistant<|im_middle|>' -}}
    {%- elif message['role'] == 'tool' -%}
        {{- '<|im_system|>tool<|im_middle|>' -}}
    {%- endif -%}
    {{- message['content'] + '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_assistant|>assistant<|im_middle|>' -}}
{%- endif -%}
)jinja"},
    // Seed-OSS: only the assistant's messages are trimmed.
    {"seed_oss", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'assistant' -%}
        {%- set content = message['content']|trim(' \t\n\v\f\r') -%}
    {%- else -%}
        {%- set content = message['content'] -%}
    {%- endif -%}
    {{- '<seed:bos>' + message['role'] + '\n' + content + '<seed:eos>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<seed:bos>assistant\n' -}}
{%- endif -%}
)jinja"},
    // Grok 2: system and user messages are trimmed, the assistant's are not.
    {"grok-2", R"jinja(
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- 'System: ' + message['content']|trim(' \t\n\v\f\r') + '<|separator|>\n\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- 'Human: ' + message['content']|trim(' \t\n\v\f\r') + '<|separator|>\n\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- 'Assistant: ' + message['content'] + '<|separator|>\n\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- 'Assistant:' -}}
{%- endif -%}
)jinja"},
    // openPangu Embedded: an empty system turn when the first message is not the system's.
    {"pangu-embedded", R"jinja(
{%- for message in messages -%}
    {%- if loop.first and message['role'] != 'system' -%}
        {{- '[unused9]系统：[unused10]' -}}
    {%- endif -%}
    {%- if message['role'] == 'system' -%}
        {{- '[unused9]系统：' + message['content'] + '[unused10]' -}}
    {%- elif message['role'] == 'user' -%}
        {{- '[unused9]用户：' + message['content'] + '[unused10]' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '[unused9]助手：' + message['content'] + '[unused10]' -}}
    {%- elif message['role'] == 'tool' -%}
        {{- '[unused9]工具：' + message['content'] + '[unused10]' -}}
    {%- elif message['role'] == 'function' -%}
        {{- '[unused9]方法：' + message['content'] + '[unused10]' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '[unused9]助手：' -}}
{%- endif -%}
)jinja"},
    {"solar-open", R"jinja(
{%- for message in messages -%}
    {{- '<|begin|>' + message['role'] + '<|content|>' + message['content'] + '<|end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|begin|>assistant' -}}
{%- endif -%}
)jinja"},
};

}  // namespace

std::optional<std::string> builtin_chat_template(std::string_view name) {
    for (const BuiltinTemplate& t : kBuiltinTemplates)
        if (name == t.name) return std::string(t.source);
    return std::nullopt;
}

std::vector<std::string> builtin_chat_template_names() {
    std::vector<std::string> names;
    for (const BuiltinTemplate& t : kBuiltinTemplates) names.emplace_back(t.name);
    std::sort(names.begin(), names.end());  // as llama.cpp lists them (a std::map)
    return names;
}

}  // namespace edgellm
