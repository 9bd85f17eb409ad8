// llama.cpp's built-in chat templates as Jinja (src/text/chat_builtin.cpp) against what
// llama.cpp's C++ formatter (src/llama-chat.cpp, llm_chat_apply_template) writes for the
// same name. Every expected string below was written by hand from reading that C++; the
// templates are rendered with the context chat_prompt gives them (messages, add_generation_
// prompt, bos_token, eos_token).
//
//  - Each name renders a conversation with a system message and one without, with the
//    generation prompt; without it the text loses exactly the name's generation prompt
//    (nothing, for the names whose C++ ignores add_ass).
//  - Whitespace: where llama.cpp trims (C's isspace) and where it does not.
//  - Other roles, empty conversations, and the name list.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "edgellm/chat.h"
#include "text/jinja.h"

using edgellm::builtin_chat_template;
using edgellm::builtin_chat_template_names;
using edgellm::ChatMessage;
using ojson = nlohmann::ordered_json;

namespace {

// Render NAME's template as chat_prompt would (an error is returned as the text, so that it
// shows in the failure).
std::string render(const std::string& name, const std::vector<ChatMessage>& messages,
                   bool add_generation_prompt) {
    const auto source = builtin_chat_template(name);
    if (!source) return "<no template " + name + ">";
    ojson ctx = ojson::object();
    ojson msgs = ojson::array();
    for (const ChatMessage& m : messages)
        msgs.push_back({{"role", m.role}, {"content", m.content}});
    ctx["messages"] = msgs;
    ctx["add_generation_prompt"] = add_generation_prompt;
    // (none of llama.cpp's formatters uses the model's BOS or EOS: a template that did would
    // show these)
    ctx["bos_token"] = "<BOS>";
    ctx["eos_token"] = "<EOS>";
    auto r = edgellm::jinja::render(*source, ctx);
    return r.ok() ? *r : "<error: " + r.error() + ">";
}

const std::vector<ChatMessage> kWithSystem = {{"system", "You are a test."},
                                              {"user", "Hi there"},
                                              {"assistant", "How can I help?"},
                                              {"user", "Who are you"}};
const std::vector<ChatMessage> kWithoutSystem = {
    {"user", "Hi there"}, {"assistant", "How can I help?"}, {"user", "Who are you"}};

struct Case {
    const char* name;
    const char* with_system;        // kWithSystem, add_generation_prompt
    const char* without_system;     // kWithoutSystem, add_generation_prompt
    const char* generation_prompt;  // what add_generation_prompt appends ("": ignored)
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << c.name;
}

// The names in llama.cpp's LLM_CHAT_TEMPLATES but chatml, llama3 and gemma.
const Case kCases[] = {
    // Llama 2: no generation prompt (the text ends in " [/INST]"); without <<SYS>> the
    // system message is only followed by "\n" inside the first [INST].
    {"llama2",
     "[INST] You are a test.\nHi there [/INST]How can I help?</s>[INST] Who are you [/INST]",
     "[INST] Hi there [/INST]How can I help?</s>[INST] Who are you [/INST]", ""},
    {"llama2-sys",
     "[INST] <<SYS>>\nYou are a test.\n<</SYS>>\n\nHi there [/INST]How can I help?</s>"
     "[INST] Who are you [/INST]",
     "[INST] Hi there [/INST]How can I help?</s>[INST] Who are you [/INST]", ""},
    // (the first turn has no <s>, later ones do)
    {"llama2-sys-bos",
     "[INST] <<SYS>>\nYou are a test.\n<</SYS>>\n\nHi there [/INST]How can I help?</s>"
     "<s>[INST] Who are you [/INST]",
     "[INST] Hi there [/INST]How can I help?</s><s>[INST] Who are you [/INST]", ""},
    {"llama2-sys-strip",
     "[INST] <<SYS>>\nYou are a test.\n<</SYS>>\n\nHi there [/INST]How can I help?</s>"
     "[INST] Who are you [/INST]",
     "[INST] Hi there [/INST]How can I help?</s>[INST] Who are you [/INST]", ""},
    // Mistral: the system message sits inside the first [INST]; v1 has a space before
    // [INST] and [/INST], v3 only after [INST] and before the assistant, tekken none.
    {"mistral-v1",
     " [INST] You are a test.\n\nHi there [/INST] How can I help?</s> [INST] Who are you [/INST]",
     " [INST] Hi there [/INST] How can I help?</s> [INST] Who are you [/INST]", ""},
    {"mistral-v3",
     "[INST] You are a test.\n\nHi there[/INST] How can I help?</s>[INST] Who are you[/INST]",
     "[INST] Hi there[/INST] How can I help?</s>[INST] Who are you[/INST]", ""},
    {"mistral-v3-tekken",
     "[INST]You are a test.\n\nHi there[/INST]How can I help?</s>[INST]Who are you[/INST]",
     "[INST]Hi there[/INST]How can I help?</s>[INST]Who are you[/INST]", ""},
    {"mistral-v7",
     "[SYSTEM_PROMPT] You are a test.[/SYSTEM_PROMPT][INST] Hi there[/INST] How can I "
     "help?</s>[INST] Who are you[/INST]",
     "[INST] Hi there[/INST] How can I help?</s>[INST] Who are you[/INST]", ""},
    {"mistral-v7-tekken",
     "[SYSTEM_PROMPT]You are a test.[/SYSTEM_PROMPT][INST]Hi there[/INST]How can I "
     "help?</s>[INST]Who are you[/INST]",
     "[INST]Hi there[/INST]How can I help?</s>[INST]Who are you[/INST]", ""},
    {"phi3",
     "<|system|>\nYou are a test.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\nHow can I "
     "help?<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n",
     "<|user|>\nHi there<|end|>\n<|assistant|>\nHow can I help?<|end|>\n<|user|>\nWho are "
     "you<|end|>\n<|assistant|>\n",
     "<|assistant|>\n"},
    {"phi4",
     "<|im_start|>system<|im_sep|>You are a test.<|im_end|><|im_start|>user<|im_sep|>Hi "
     "there<|im_end|><|im_start|>assistant<|im_sep|>How can I help?<|im_end|>"
     "<|im_start|>user<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>",
     "<|im_start|>user<|im_sep|>Hi there<|im_end|><|im_start|>assistant<|im_sep|>How can I "
     "help?<|im_end|><|im_start|>user<|im_sep|>Who are you<|im_end|>"
     "<|im_start|>assistant<|im_sep|>",
     "<|im_start|>assistant<|im_sep|>"},
    {"falcon3",
     "<|system|>\nYou are a test.\n<|user|>\nHi there\n<|assistant|>\nHow can I help?\n"
     "<|user|>\nWho are you\n<|assistant|>\n",
     "<|user|>\nHi there\n<|assistant|>\nHow can I help?\n<|user|>\nWho are you\n"
     "<|assistant|>\n",
     "<|assistant|>\n"},
    {"zephyr",
     "<|system|>\nYou are a test.<|endoftext|>\n<|user|>\nHi there<|endoftext|>\n"
     "<|assistant|>\nHow can I help?<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n"
     "<|assistant|>\n",
     "<|user|>\nHi there<|endoftext|>\n<|assistant|>\nHow can I help?<|endoftext|>\n"
     "<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n",
     "<|assistant|>\n"},
    // (<s> before every message but the first, and before the generation prompt)
    {"monarch",
     "system\nYou are a test.</s>\n<s>user\nHi there</s>\n<s>assistant\nHow can I help?</s>\n"
     "<s>user\nWho are you</s>\n<s>assistant\n",
     "user\nHi there</s>\n<s>assistant\nHow can I help?</s>\n<s>user\nWho are you</s>\n"
     "<s>assistant\n",
     "<s>assistant\n"},
    // Orion: the system message is held for the next user message; each user message ends
    // in "Assistant: </s>", so there is no generation prompt.
    {"orion",
     "Human: You are a test.\n\nHi there\n\nAssistant: </s>How can I help?</s>Human: Who are "
     "you\n\nAssistant: </s>",
     "Human: Hi there\n\nAssistant: </s>How can I help?</s>Human: Who are you\n\nAssistant: </s>",
     ""},
    {"openchat",
     "You are a test.<|end_of_turn|>GPT4 Correct User: Hi there<|end_of_turn|>GPT4 Correct "
     "Assistant: How can I help?<|end_of_turn|>GPT4 Correct User: Who are you<|end_of_turn|>"
     "GPT4 Correct Assistant:",
     "GPT4 Correct User: Hi there<|end_of_turn|>GPT4 Correct Assistant: How can I "
     "help?<|end_of_turn|>GPT4 Correct User: Who are you<|end_of_turn|>GPT4 Correct Assistant:",
     "GPT4 Correct Assistant:"},
    {"vicuna",
     "You are a test.\n\nUSER: Hi there\nASSISTANT: How can I help?</s>\nUSER: Who are you\n"
     "ASSISTANT:",
     "USER: Hi there\nASSISTANT: How can I help?</s>\nUSER: Who are you\nASSISTANT:", "ASSISTANT:"},
    {"vicuna-orca",
     "SYSTEM: You are a test.\nUSER: Hi there\nASSISTANT: How can I help?</s>\nUSER: Who are "
     "you\nASSISTANT:",
     "USER: Hi there\nASSISTANT: How can I help?</s>\nUSER: Who are you\nASSISTANT:", "ASSISTANT:"},
    // (the system message runs into "### Instruction:" without a newline)
    {"deepseek",
     "You are a test.### Instruction:\nHi there\n### Response:\nHow can I help?\n<|EOT|>\n"
     "### Instruction:\nWho are you\n### Response:\n",
     "### Instruction:\nHi there\n### Response:\nHow can I help?\n<|EOT|>\n### Instruction:\n"
     "Who are you\n### Response:\n",
     "### Response:\n"},
    {"deepseek2",
     "You are a test.\n\nUser: Hi there\n\nAssistant: How can I "
     "help?<｜end▁of▁sentence｜>User: Who are you\n\nAssistant:",
     "User: Hi there\n\nAssistant: How can I help?<｜end▁of▁sentence｜>User: Who are "
     "you\n\nAssistant:",
     "Assistant:"},
    {"deepseek3",
     "You are a test.\n\n<｜User｜>Hi there<｜Assistant｜>How can I "
     "help?<｜end▁of▁sentence｜><｜User｜>Who are you<｜Assistant｜>",
     "<｜User｜>Hi there<｜Assistant｜>How can I help?<｜end▁of▁sentence｜><｜User｜>Who are "
     "you<｜Assistant｜>",
     "<｜Assistant｜>"},
    {"deepseek-ocr", "You are a test.Hi thereHow can I help?Who are you",
     "Hi thereHow can I help?Who are you", ""},
    {"command-r",
     "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>How can I help?<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
     "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>How can I help?<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    // (a space after each role's newline)
    {"chatglm3",
     "[gMASK]sop<|system|>\n You are a test.<|user|>\n Hi there<|assistant|>\n How can I "
     "help?<|user|>\n Who are you<|assistant|>",
     "[gMASK]sop<|user|>\n Hi there<|assistant|>\n How can I help?<|user|>\n Who are "
     "you<|assistant|>",
     "<|assistant|>"},
    {"chatglm4",
     "[gMASK]<sop><|system|>\nYou are a test.<|user|>\nHi there<|assistant|>\nHow can I "
     "help?<|user|>\nWho are you<|assistant|>\n",
     "[gMASK]<sop><|user|>\nHi there<|assistant|>\nHow can I help?<|user|>\nWho are "
     "you<|assistant|>\n",
     "<|assistant|>\n"},
    {"glmedge",
     "<|system|>\nYou are a test.<|user|>\nHi there<|assistant|>\nHow can I help?<|user|>\nWho "
     "are you<|assistant|>",
     "<|user|>\nHi there<|assistant|>\nHow can I help?<|user|>\nWho are you<|assistant|>",
     "<|assistant|>"},
    // (only the user is marked; "<AI>" closes each user message, so no generation prompt)
    {"minicpm", "You are a test.<用户>Hi there<AI>How can I help?<用户>Who are you<AI>",
     "<用户>Hi there<AI>How can I help?<用户>Who are you<AI>", ""},
    // (the user's turn ends in "\n" without [|endofturn|])
    {"exaone3",
     "[|system|]You are a test.[|endofturn|]\n[|user|]Hi there\n[|assistant|]How can I "
     "help?[|endofturn|]\n[|user|]Who are you\n[|assistant|]",
     "[|user|]Hi there\n[|assistant|]How can I help?[|endofturn|]\n[|user|]Who are "
     "you\n[|assistant|]",
     "[|assistant|]"},
    {"exaone4",
     "[|system|]You are a test.[|endofturn|]\n[|user|]Hi there\n[|assistant|]How can I "
     "help?[|endofturn|]\n[|user|]Who are you\n[|assistant|]",
     "[|user|]Hi there\n[|assistant|]How can I help?[|endofturn|]\n[|user|]Who are "
     "you\n[|assistant|]",
     "[|assistant|]"},
    {"exaone-moe",
     "<|system|>\nYou are a test.<|endofturn|>\n<|user|>\nHi there<|endofturn|>\n"
     "<|assistant|>\nHow can I help?<|endofturn|>\n<|user|>\nWho are you<|endofturn|>\n"
     "<|assistant|>\n",
     "<|user|>\nHi there<|endofturn|>\n<|assistant|>\nHow can I help?<|endofturn|>\n"
     "<|user|>\nWho are you<|endofturn|>\n<|assistant|>\n",
     "<|assistant|>\n"},
    // ("Assistant:" after a last user message whatever add_generation_prompt says)
    {"rwkv-world",
     "System: You are a test.\n\nUser: Hi there\n\nAssistant: How can I help?\n\nUser: Who are "
     "you\n\nAssistant:",
     "User: Hi there\n\nAssistant: How can I help?\n\nUser: Who are you\n\nAssistant:", ""},
    {"granite",
     "<|start_of_role|>system<|end_of_role|>You are a test.<|end_of_text|>\n"
     "<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>How can I help?<|end_of_text|>\n"
     "<|start_of_role|>user<|end_of_role|>Who are you<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>",
     "<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>How can I help?<|end_of_text|>\n"
     "<|start_of_role|>user<|end_of_role|>Who are you<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>",
     "<|start_of_role|>assistant<|end_of_role|>"},
    {"granite-4.0",
     "<|start_of_role|>system<|end_of_role|>You are a test.<|end_of_text|>\n"
     "<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>How can I help?<|end_of_text|>\n"
     "<|start_of_role|>user<|end_of_role|>Who are you<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>",
     "<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>How can I help?<|end_of_text|>\n"
     "<|start_of_role|>user<|end_of_role|>Who are you<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>",
     "<|start_of_role|>assistant<|end_of_role|>"},
    {"granite-4.1",
     "<|start_of_role|>system<|end_of_role|>You are a test.<|end_of_text|>\n"
     "<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>How can I help?<|end_of_text|>\n"
     "<|start_of_role|>user<|end_of_role|>Who are you<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>",
     "<|start_of_role|>user<|end_of_role|>Hi there<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>How can I help?<|end_of_text|>\n"
     "<|start_of_role|>user<|end_of_role|>Who are you<|end_of_text|>\n"
     "<|start_of_role|>assistant<|end_of_role|>",
     "<|start_of_role|>assistant<|end_of_role|>"},
    // (the system message follows <s> with no role; every user turn lists no functions)
    {"gigachat",
     "<s>You are a test.<|message_sep|>user<|role_sep|>Hi there<|message_sep|>available "
     "functions<|role_sep|>[]<|message_sep|>assistant<|role_sep|>How can I "
     "help?<|message_sep|>user<|role_sep|>Who are you<|message_sep|>available "
     "functions<|role_sep|>[]<|message_sep|>assistant<|role_sep|>",
     "<s>user<|role_sep|>Hi there<|message_sep|>available functions<|role_sep|>[]"
     "<|message_sep|>assistant<|role_sep|>How can I help?<|message_sep|>user<|role_sep|>Who "
     "are you<|message_sep|>available functions<|role_sep|>[]<|message_sep|>"
     "assistant<|role_sep|>",
     "assistant<|role_sep|>"},
    {"megrez",
     "<|role_start|>system<|role_end|>You are a test.<|turn_end|><|role_start|>user<|role_end|>"
     "Hi there<|turn_end|><|role_start|>assistant<|role_end|>How can I help?<|turn_end|>"
     "<|role_start|>user<|role_end|>Who are you<|turn_end|><|role_start|>assistant<|role_end|>",
     "<|role_start|>user<|role_end|>Hi there<|turn_end|><|role_start|>assistant<|role_end|>How "
     "can I help?<|turn_end|><|role_start|>user<|role_end|>Who are you<|turn_end|>"
     "<|role_start|>assistant<|role_end|>",
     "<|role_start|>assistant<|role_end|>"},
    // (the system message is dropped: both conversations render the same)
    {"yandex",
     " Пользователь: Hi there\n\n Ассистент: How can I help?\n\n Пользователь: Who are you\n\n"
     " Ассистент:[SEP]",
     " Пользователь: Hi there\n\n Ассистент: How can I help?\n\n Пользователь: Who are you\n\n"
     " Ассистент:[SEP]",
     " Ассистент:[SEP]"},
    {"bailing",
     "<role>SYSTEM</role>You are a test.<role>HUMAN</role>Hi there<role>ASSISTANT</role>How "
     "can I help?<role>HUMAN</role>Who are you<role>ASSISTANT</role>",
     "<role>HUMAN</role>Hi there<role>ASSISTANT</role>How can I help?<role>HUMAN</role>Who are "
     "you<role>ASSISTANT</role>",
     "<role>ASSISTANT</role>"},
    {"bailing-think",
     "<role>SYSTEM</role>You are a test.<role>HUMAN</role>Hi there<role>ASSISTANT</role>How "
     "can I help?<role>HUMAN</role>Who are you<role>ASSISTANT</role><think>",
     "<role>HUMAN</role>Hi there<role>ASSISTANT</role>How can I help?<role>HUMAN</role>Who are "
     "you<role>ASSISTANT</role><think>",
     "<role>ASSISTANT</role><think>"},
    // (without a system message, one that turns thinking off)
    {"bailing2",
     "<role>SYSTEM</role>You are a test.<|role_end|><role>HUMAN</role>Hi there<|role_end|>"
     "<role>ASSISTANT</role>How can I help?<|role_end|><role>HUMAN</role>Who are "
     "you<|role_end|><role>ASSISTANT</role>",
     "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Hi "
     "there<|role_end|><role>ASSISTANT</role>How can I help?<|role_end|><role>HUMAN</role>Who "
     "are you<|role_end|><role>ASSISTANT</role>",
     "<role>ASSISTANT</role>"},
    {"llama4",
     "<|header_start|>system<|header_end|>\n\nYou are a test.<|eot|><|header_start|>user"
     "<|header_end|>\n\nHi there<|eot|><|header_start|>assistant<|header_end|>\n\nHow can I "
     "help?<|eot|><|header_start|>user<|header_end|>\n\nWho are you<|eot|><|header_start|>"
     "assistant<|header_end|>\n\n",
     "<|header_start|>user<|header_end|>\n\nHi there<|eot|><|header_start|>assistant"
     "<|header_end|>\n\nHow can I help?<|eot|><|header_start|>user<|header_end|>\n\nWho are "
     "you<|eot|><|header_start|>assistant<|header_end|>\n\n",
     "<|header_start|>assistant<|header_end|>\n\n"},
    {"smolvlm",
     "<|im_start|>You are a test.\n\nUser: Hi there<end_of_utterance>\nAssistant: How can I "
     "help?<end_of_utterance>\nUser: Who are you<end_of_utterance>\nAssistant:",
     "<|im_start|>User: Hi there<end_of_utterance>\nAssistant: How can I "
     "help?<end_of_utterance>\nUser: Who are you<end_of_utterance>\nAssistant:",
     "Assistant:"},
    {"hunyuan-moe",
     "<|startoftext|>You are a test.<|extra_4|><|startoftext|>Hi there<|extra_0|>How can I "
     "help?<|eos|><|startoftext|>Who are you<|extra_0|>",
     "<|startoftext|>Hi there<|extra_0|>How can I help?<|eos|><|startoftext|>Who are "
     "you<|extra_0|>",
     ""},
    {"gpt-oss",
     "<|start|>system<|message|>You are a test.<|end|><|start|>user<|message|>Hi "
     "there<|end|><|start|>assistant<|message|>How can I help?<|return|><|start|>user"
     "<|message|>Who are you<|end|><|start|>assistant",
     "<|start|>user<|message|>Hi there<|end|><|start|>assistant<|message|>How can I "
     "help?<|return|><|start|>user<|message|>Who are you<|end|><|start|>assistant",
     "<|start|>assistant"},
    // (a user message ends in <｜hy_Assistant｜> and the assistant's starts with it: twice)
    {"hunyuan-dense",
     "You are a test.<｜hy_place▁holder▁no▁3｜><｜hy_User｜>Hi there<｜hy_Assistant｜>"
     "<｜hy_Assistant｜>How can I help?<｜hy_place▁holder▁no▁2｜><｜hy_User｜>Who are "
     "you<｜hy_Assistant｜>",
     "<｜hy_User｜>Hi there<｜hy_Assistant｜><｜hy_Assistant｜>How can I "
     "help?<｜hy_place▁holder▁no▁2｜><｜hy_User｜>Who are you<｜hy_Assistant｜>",
     ""},
    // (each marker after its message)
    {"hunyuan-vl",
     "<｜hy_begin▁of▁sentence｜>You are a test.<｜hy_place▁holder▁no▁3｜>Hi "
     "there<｜hy_User｜>How can I help?<｜hy_Assistant｜>Who are you<｜hy_User｜>",
     "<｜hy_begin▁of▁sentence｜>Hi there<｜hy_User｜>How can I help?<｜hy_Assistant｜>Who are "
     "you<｜hy_User｜>",
     ""},
    {"kimi-k2",
     "<|im_system|>system<|im_middle|>You are a test.<|im_end|><|im_user|>user<|im_middle|>Hi "
     "there<|im_end|><|im_assistant|>assistant<|im_middle|>How can I help?<|im_end|>"
     "<|im_user|>user<|im_middle|>Who are you<|im_end|><|im_assistant|>assistant<|im_middle|>",
     "<|im_user|>user<|im_middle|>Hi there<|im_end|><|im_assistant|>assistant<|im_middle|>How "
     "can I help?<|im_end|><|im_user|>user<|im_middle|>Who are you<|im_end|>"
     "<|im_assistant|>assistant<|im_middle|>",
     "<|im_assistant|>assistant<|im_middle|>"},
    {"seed_oss",
     "<seed:bos>system\nYou are a test.<seed:eos><seed:bos>user\nHi there<seed:eos>"
     "<seed:bos>assistant\nHow can I help?<seed:eos><seed:bos>user\nWho are you<seed:eos>"
     "<seed:bos>assistant\n",
     "<seed:bos>user\nHi there<seed:eos><seed:bos>assistant\nHow can I help?<seed:eos>"
     "<seed:bos>user\nWho are you<seed:eos><seed:bos>assistant\n",
     "<seed:bos>assistant\n"},
    {"grok-2",
     "System: You are a test.<|separator|>\n\nHuman: Hi there<|separator|>\n\nAssistant: How "
     "can I help?<|separator|>\n\nHuman: Who are you<|separator|>\n\nAssistant:",
     "Human: Hi there<|separator|>\n\nAssistant: How can I help?<|separator|>\n\nHuman: Who "
     "are you<|separator|>\n\nAssistant:",
     "Assistant:"},
    // (an empty system turn when the conversation has none)
    {"pangu-embedded",
     "[unused9]系统：You are a test.[unused10][unused9]用户：Hi there[unused10]"
     "[unused9]助手：How can I help?[unused10][unused9]用户：Who are you[unused10]"
     "[unused9]助手：",
     "[unused9]系统：[unused10][unused9]用户：Hi there[unused10][unused9]助手：How can I "
     "help?[unused10][unused9]用户：Who are you[unused10][unused9]助手：",
     "[unused9]助手："},
    {"solar-open",
     "<|begin|>system<|content|>You are a test.<|end|><|begin|>user<|content|>Hi "
     "there<|end|><|begin|>assistant<|content|>How can I help?<|end|><|begin|>user<|content|>"
     "Who are you<|end|><|begin|>assistant",
     "<|begin|>user<|content|>Hi there<|end|><|begin|>assistant<|content|>How can I "
     "help?<|end|><|begin|>user<|content|>Who are you<|end|><|begin|>assistant",
     "<|begin|>assistant"},
};

class BuiltinTemplate : public ::testing::TestWithParam<Case> {};

TEST_P(BuiltinTemplate, RendersAsLlamaCppWithASystemMessage) {
    const Case& c = GetParam();
    EXPECT_EQ(render(c.name, kWithSystem, true), c.with_system);
}

TEST_P(BuiltinTemplate, RendersAsLlamaCppWithoutASystemMessage) {
    const Case& c = GetParam();
    EXPECT_EQ(render(c.name, kWithoutSystem, true), c.without_system);
}

TEST_P(BuiltinTemplate, WithoutTheGenerationPromptLosesExactlyIt) {
    const Case& c = GetParam();
    for (const auto* conversation : {&kWithSystem, &kWithoutSystem})
        EXPECT_EQ(render(c.name, *conversation, false) + c.generation_prompt,
                  render(c.name, *conversation, true));
}

TEST_P(BuiltinTemplate, RendersAnEmptyConversation) {
    const Case& c = GetParam();
    EXPECT_EQ(render(c.name, {}, false).find("<error"), std::string::npos);
    EXPECT_EQ(render(c.name, {}, true).find("<error"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(LlamaCppNames, BuiltinTemplate, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                             std::string n = info.param.name;
                             std::replace_if(
                                 n.begin(), n.end(), [](char ch) { return !std::isalnum(ch); },
                                 '_');
                             return n;
                         });

TEST(BuiltinChatTemplate, CommandRSystemAndUser) {
    EXPECT_EQ(render("command-r", {{"system", "You are a test."}, {"user", "Hi there"}}, true),
              "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
}

// llama.cpp's trim() strips C's isspace (" \t\n\v\f\r") from both ends and nothing else: a
// no-break space (U+00A0) or an ideographic space (U+3000) stays, as Python's str.strip
// (a plain |trim) would not have it.
TEST(BuiltinChatTemplate, TrimsWhereLlamaCppTrimsAndOnlyCsSpaces) {
    const std::vector<ChatMessage> padded = {{"system", " \t You are a test.\n"},
                                             {"user", "\v\fHi there \r\n"},
                                             {"assistant", "\n How can I help? "},
                                             {"user", "\u00a0Who are you\u3000"}};
    // every message trimmed
    EXPECT_EQ(render("command-r", padded, true),
              "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>How can I help?<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>\u00a0Who are you\u3000<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
    EXPECT_EQ(render("llama2-sys-strip", padded, true),
              "[INST] <<SYS>>\nYou are a test.\n<</SYS>>\n\nHi there [/INST]How can I help?</s>"
              "[INST] \u00a0Who are you\u3000 [/INST]");
    // llama2-sys does not trim
    EXPECT_EQ(render("llama2-sys", padded, true),
              "[INST] <<SYS>>\n \t You are a test.\n\n<</SYS>>\n\n\v\fHi there \r\n [/INST]\n How "
              "can I help? </s>[INST] \u00a0Who are you\u3000 [/INST]");
    // mistral-v3 trims the assistant only, v1 trims nothing
    EXPECT_EQ(render("mistral-v3", padded, true),
              "[INST]  \t You are a test.\n\n\n\v\fHi there \r\n[/INST] How can I help?</s>"
              "[INST] \u00a0Who are you\u3000[/INST]");
    EXPECT_EQ(render("mistral-v1", padded, true),
              " [INST]  \t You are a test.\n\n\n\v\fHi there \r\n [/INST] \n How can I help? </s>"
              " [INST] \u00a0Who are you\u3000 [/INST]");
    // seed_oss trims the assistant only, grok-2 everyone but the assistant
    EXPECT_EQ(render("seed_oss", padded, false),
              "<seed:bos>system\n \t You are a test.\n<seed:eos><seed:bos>user\n\v\fHi there "
              "\r\n<seed:eos><seed:bos>assistant\nHow can I help?<seed:eos><seed:bos>user\n"
              "\u00a0Who are you\u3000<seed:eos>");
    EXPECT_EQ(render("grok-2", padded, false),
              "System: You are a test.<|separator|>\n\nHuman: Hi there<|separator|>\n\n"
              "Assistant: \n How can I help? <|separator|>\n\nHuman: \u00a0Who are "
              "you\u3000<|separator|>\n\n");
    // minicpm and llama4 trim everyone
    EXPECT_EQ(render("minicpm", padded, true),
              "You are a test.<用户>Hi there<AI>How can I help?<用户>\u00a0Who are you\u3000<AI>");
    EXPECT_EQ(render("llama4", padded, false),
              "<|header_start|>system<|header_end|>\n\nYou are a test.<|eot|><|header_start|>user"
              "<|header_end|>\n\nHi there<|eot|><|header_start|>assistant<|header_end|>\n\nHow "
              "can I help?<|eot|><|header_start|>user<|header_end|>\n\n\u00a0Who are "
              "you\u3000<|eot|>");
    // a message of spaces only trims to nothing
    EXPECT_EQ(render("exaone3", {{"user", " \n\t "}}, true), "[|user|]\n[|assistant|]");
}

// What the C++ does with a role other than system, user and assistant (a tool result):
// drops it, renders it as one of the three, or writes its name.
TEST(BuiltinChatTemplate, OtherRolesAsLlamaCppHandlesThem) {
    const std::vector<ChatMessage> tool = {{"user", "Hi"}, {"tool", "42"}};
    // dropped
    EXPECT_EQ(render("vicuna", tool, true), "USER: Hi\nASSISTANT:");
    EXPECT_EQ(render("command-r", tool, false),
              "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|>");
    EXPECT_EQ(render("exaone3", tool, false), "[|user|]Hi\n");
    EXPECT_EQ(render("yandex", tool, false), " Пользователь: Hi\n\n");
    // known to the newer formatters
    EXPECT_EQ(render("exaone4", tool, false), "[|user|]Hi\n[|tool|]42[|endofturn|]\n");
    EXPECT_EQ(render("exaone-moe", tool, false),
              "<|user|>\nHi<|endofturn|>\n<|tool|>\n42<|endofturn|>\n");
    EXPECT_EQ(render("kimi-k2", tool, false),
              "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_system|>tool<|im_middle|>42<|im_end|>");
    EXPECT_EQ(render("pangu-embedded", tool, false),
              "[unused9]系统：[unused10][unused9]用户：Hi[unused10][unused9]工具：42[unused10]");
    // rendered as the assistant (and closing the [INST] turn)
    EXPECT_EQ(render("llama2", tool, true), "[INST] Hi [/INST]42</s>");
    EXPECT_EQ(render("mistral-v7", tool, true), "[INST] Hi[/INST] 42</s>");
    EXPECT_EQ(render("smolvlm", tool, false),
              "<|im_start|>User: Hi<end_of_utterance>\nAssistant: 42<end_of_utterance>\n");
    EXPECT_EQ(render("orion", tool, false), "Human: Hi\n\nAssistant: </s>42</s>");
    // rendered as the user
    EXPECT_EQ(render("hunyuan-moe", tool, false),
              "<|startoftext|>Hi<|extra_0|><|startoftext|>42<|extra_0|>");
    // its name written (capitalized, upper-cased)
    EXPECT_EQ(render("phi3", tool, false), "<|user|>\nHi<|end|>\n<|tool|>\n42<|end|>\n");
    EXPECT_EQ(render("openchat", tool, false),
              "GPT4 Correct User: Hi<|end_of_turn|>GPT4 Correct Tool: 42<|end_of_turn|>");
    EXPECT_EQ(render("bailing", tool, false), "<role>HUMAN</role>Hi<role>TOOL</role>42");
    // kimi-k2: an unknown role gets no header but keeps its content and end
    EXPECT_EQ(render("kimi-k2", {{"user", "Hi"}, {"critic", "no"}}, false),
              "<|im_user|>user<|im_middle|>Hi<|im_end|>no<|im_end|>");
    // granite's pseudo-role for a tool call
    EXPECT_EQ(render("granite", {{"assistant_tool_call", "[{}]"}}, false),
              "<|start_of_role|>assistant_tool_call<|end_of_role|><|tool_call|>[{}]"
              "<|end_of_text|>\n");
    EXPECT_EQ(render("granite-4.0", {{"assistant_tool_call", "[{}]"}}, false),
              "<|start_of_role|>assistant<|end_of_role|><|tool_call|>[{}]<|end_of_text|>\n");
}

// Where the position of a system message matters.
TEST(BuiltinChatTemplate, SystemMessagesAfterTheFirst) {
    const std::vector<ChatMessage> late = {
        {"user", "Hi"}, {"system", "Be brief."}, {"system", " Be kind."}, {"user", "Bye"}};
    // orion holds system messages (joined as they are) for the next user message
    EXPECT_EQ(render("orion", late, true),
              "Human: Hi\n\nAssistant: </s>Human: Be brief. Be kind.\n\nBye\n\nAssistant: </s>");
    // gigachat, hunyuan-dense and hunyuan-vl only take a first system message
    EXPECT_EQ(render("gigachat", late, false),
              "<s>user<|role_sep|>Hi<|message_sep|>available functions<|role_sep|>[]"
              "<|message_sep|>user<|role_sep|>Bye<|message_sep|>available functions"
              "<|role_sep|>[]<|message_sep|>");
    EXPECT_EQ(render("hunyuan-dense", late, false),
              "<｜hy_User｜>Hi<｜hy_Assistant｜><｜hy_User｜>Bye<｜hy_Assistant｜>");
    EXPECT_EQ(render("hunyuan-vl", late, false),
              "<｜hy_begin▁of▁sentence｜>Hi<｜hy_User｜>Bye<｜hy_User｜>");
    // bailing2 only looks at the first message for its default system turn
    EXPECT_EQ(render("bailing2", late, false),
              "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Hi"
              "<|role_end|><role>SYSTEM</role>Be brief.<|role_end|><role>SYSTEM</role> Be "
              "kind.<|role_end|><role>HUMAN</role>Bye<|role_end|>");
    // a system message in the middle of a Llama 2 or Mistral turn stays in that turn
    EXPECT_EQ(render("llama2-sys", late, false),
              "[INST] Hi [/INST]<<SYS>>\nBe brief.\n<</SYS>>\n\n<<SYS>>\n Be kind.\n<</SYS>>\n\n"
              "Bye [/INST]");
    // rwkv-world: "Assistant:" only after a user message that is the last
    EXPECT_EQ(render("rwkv-world", {{"user", "Hi"}, {"system", "S"}}, true),
              "User: Hi\n\nSystem: S\n\n");
}

TEST(BuiltinChatTemplate, EmptyConversations) {
    EXPECT_EQ(render("llama2", {}, true), "[INST] ");
    EXPECT_EQ(render("gigachat", {}, true), "<s>assistant<|role_sep|>");
    EXPECT_EQ(render("bailing2", {}, true),
              "<role>SYSTEM</role>detailed thinking off<|role_end|><role>ASSISTANT</role>");
    EXPECT_EQ(render("chatglm3", {}, true), "[gMASK]sop<|assistant|>");
    EXPECT_EQ(render("mistral-v3", {}, true), "");
}

TEST(BuiltinChatTemplate, UnknownNamesHaveNone) {
    // (the native formats are chat_format_from_name's, not templates)
    for (const char* name : {"", "chatml", "llama3", "gemma", "Llama2", "llama2 ", "mistral",
                             "deepseek-r1", "{{ messages }}"})
        EXPECT_FALSE(builtin_chat_template(name).has_value()) << '"' << name << '"';
}

TEST(BuiltinChatTemplate, NamesListsEveryNameOnceInOrder) {
    const std::vector<std::string> names = builtin_chat_template_names();
    std::set<std::string> expected;
    for (const Case& c : kCases) expected.insert(c.name);
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expected);
    EXPECT_EQ(names.size(), expected.size());  // no name twice
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    for (const std::string& n : names) EXPECT_TRUE(builtin_chat_template(n).has_value()) << n;
    for (const char* required : {"llama2",
                                 "llama2-sys",
                                 "llama2-sys-bos",
                                 "llama2-sys-strip",
                                 "mistral-v1",
                                 "mistral-v3",
                                 "mistral-v3-tekken",
                                 "mistral-v7",
                                 "mistral-v7-tekken",
                                 "phi3",
                                 "phi4",
                                 "falcon3",
                                 "zephyr",
                                 "monarch",
                                 "orion",
                                 "openchat",
                                 "vicuna",
                                 "vicuna-orca",
                                 "deepseek",
                                 "deepseek2",
                                 "deepseek3",
                                 "command-r",
                                 "chatglm3",
                                 "chatglm4",
                                 "glmedge",
                                 "minicpm",
                                 "exaone3",
                                 "exaone4",
                                 "granite",
                                 "gigachat",
                                 "megrez",
                                 "yandex",
                                 "bailing",
                                 "llama4",
                                 "smolvlm",
                                 "hunyuan-dense",
                                 "kimi-k2",
                                 "seed_oss",
                                 "grok-2"})
        EXPECT_EQ(expected.count(required), 1u) << required;
}

}  // namespace
