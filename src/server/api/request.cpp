// Requests of the OpenAI API and of llama.cpp's native API, validated into one typed
// request (GenRequest): messages or prompt, sampling, constraints, tools, logit bias.
#include "server/api/api.h"

#include <algorithm>
#include <cmath>

#include "edgellm/json_schema.h"
#include "edgellm/version.h"

namespace edgellm::server {

namespace {

// A field of the request object, checked for its type; errors name the field.
class Fields {
  public:
    explicit Fields(const json& obj) : obj_(obj) {}

    const json* get(const char* name) const {
        auto it = obj_.find(name);
        if (it == obj_.end() || it->is_null()) return nullptr;
        return &*it;
    }
    // Each reader leaves *out alone when the field is absent or null.
    void number(const char* name, double lo, double hi, float* out) {
        const json* v = get(name);
        if (!v || err) return;
        if (!v->is_number()) return fail(std::string(name) + " must be a number");
        const double x = v->get<double>();
        if (!std::isfinite(x) || x < lo || x > hi)
            return fail(std::string(name) + " must be between " + fmt(lo) + " and " + fmt(hi) +
                        ", got " + v->dump());
        *out = (float)x;
    }
    void integer(const char* name, int64_t lo, int64_t hi, int64_t* out) {
        const json* v = get(name);
        if (!v || err) return;
        // 5.0 is an integer to JavaScript clients.
        if (v->is_number_float()) {
            const double x = v->get<double>();
            if (std::floor(x) != x || !std::isfinite(x))
                return fail(std::string(name) + " must be an integer, got " + v->dump());
            if (x < (double)lo || x > (double)hi) return range(name, lo, hi, *v);
            *out = (int64_t)x;
            return;
        }
        if (!v->is_number_integer()) return fail(std::string(name) + " must be an integer");
        if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT64_MAX)
            return range(name, lo, hi, *v);
        const int64_t x = v->get<int64_t>();
        if (x < lo || x > hi) return range(name, lo, hi, *v);
        *out = x;
    }
    void boolean(const char* name, bool* out) {
        const json* v = get(name);
        if (!v || err) return;
        if (!v->is_boolean()) return fail(std::string(name) + " must be true or false");
        *out = v->get<bool>();
    }
    void string(const char* name, std::string* out) {
        const json* v = get(name);
        if (!v || err) return;
        if (!v->is_string()) return fail(std::string(name) + " must be a string");
        *out = v->get<std::string>();
    }
    void fail(std::string message) {
        if (!err) err = bad_request(std::move(message));
    }
    std::optional<ApiError> err;

  private:
    static std::string fmt(double x) {
        if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string((int64_t)x);
        std::string s = std::to_string(x);
        while (!s.empty() && s.back() == '0') s.pop_back();
        return s;
    }
    void range(const char* name, int64_t lo, int64_t hi, const json& v) {
        fail(std::string(name) + " must be between " + std::to_string(lo) + " and " +
             std::to_string(hi) + ", got " + v.dump());
    }
    const json& obj_;
};

// The text of a message's content: a string, or a list of text parts (joined as llama.cpp
// does for a text-only model).
bool content_text(const json& c, std::string* out, std::string* why) {
    if (c.is_string()) {
        *out = c.get<std::string>();
        return true;
    }
    if (!c.is_array()) {
        *why = "must be a string or an array of content parts";
        return false;
    }
    out->clear();
    for (const json& part : c) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
            *why = "has a part that is not an object with a \"type\"";
            return false;
        }
        const std::string type = part["type"].get<std::string>();
        if (type != "text") {
            *why = "has a part of type \"" + type + "\"; this model takes text only";
            return false;
        }
        if (!part.contains("text") || !part["text"].is_string()) {
            *why = "has a text part without a \"text\" string";
            return false;
        }
        if (!out->empty()) out->push_back('\n');
        *out += part["text"].get<std::string>();
    }
    return true;
}

void parse_messages(const json& body, Fields& f, GenRequest* out) {
    const json* msgs = f.get("messages");
    if (!msgs) return f.fail("messages is required");
    if (!msgs->is_array()) return f.fail("messages must be an array");
    if (msgs->empty()) return f.fail("messages must not be empty");
    for (size_t i = 0; i < msgs->size(); ++i) {
        const json& m = (*msgs)[i];
        const std::string at = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) return f.fail(at + " must be an object");
        if (!m.contains("role") || !m["role"].is_string())
            return f.fail(at + ".role must be a string");
        ChatMessage cm;
        cm.role = m["role"].get<std::string>();
        if (cm.role == "developer") cm.role = "system";  // OpenAI's newer name
        if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" &&
            cm.role != "tool")
            return f.fail(at + ".role \"" + m["role"].get<std::string>() +
                          "\" is not one of system, developer, user, assistant, tool");
        json extra = json::object();
        const bool has_tool_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
        if (!m.contains("content") || m["content"].is_null()) {
            if (cm.role != "assistant")
                return f.fail(at + ".content is required for role " + cm.role);
            // (as llama.cpp gives templates: an empty string, never null, which templates
            // such as Qwen3's would call string methods on)
            if (has_tool_calls) extra["content"] = "";
        } else {
            std::string why;
            if (!content_text(m["content"], &cm.content, &why))
                return f.fail(at + ".content " + why);
        }
        if (has_tool_calls) {
            if (!m["tool_calls"].is_array()) return f.fail(at + ".tool_calls must be an array");
            json calls = m["tool_calls"];
            // Templates print arguments as an object; OpenAI sends them as a JSON string.
            for (json& c : calls)
                if (c.is_object() && c.contains("function") && c["function"].is_object()) {
                    json& fn = c["function"];
                    if (fn.contains("arguments") && fn["arguments"].is_string()) {
                        json parsed = json::parse(fn["arguments"].get<std::string>(), nullptr, false);
                        if (!parsed.is_discarded()) fn["arguments"] = parsed;
                    }
                }
            extra["tool_calls"] = calls;
        }
        for (const char* key : {"tool_call_id", "name", "reasoning_content"})
            if (m.contains(key) && !m[key].is_null()) {
                if (!m[key].is_string()) return f.fail(at + "." + key + " must be a string");
                extra[key] = m[key];
            }
        if (!extra.empty()) cm.extra_json = extra.dump();
        out->messages.push_back(std::move(cm));
    }
    // OpenAI fields that ask for what this server cannot give: refused, never dropped.
    if (const json* mod = f.get("modalities")) {
        if (!mod->is_array()) return f.fail("modalities must be an array");
        for (const json& m : *mod)
            if (m != "text")
                return f.fail("modalities: only \"text\" is supported (this server generates no audio), got " +
                              m.dump());
    }
    if (f.get("audio")) return f.fail("audio output is not supported by this server");
    if (f.get("web_search_options")) return f.fail("web_search_options: this server does not search the web");
    if (const json* tools = f.get("tools")) {
        if (!tools->is_array()) return f.fail("tools must be an array");
        for (size_t i = 0; i < tools->size(); ++i) {
            const json& t = (*tools)[i];
            const std::string at = "tools[" + std::to_string(i) + "]";
            if (!t.is_object()) return f.fail(at + " must be an object");
            if (t.contains("type") && t["type"] != "function")
                return f.fail(at + ".type must be \"function\"");
            if (!t.contains("function") || !t["function"].is_object())
                return f.fail(at + ".function must be an object");
            const json& fn = t["function"];
            if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
                return f.fail(at + ".function.name must be a non-empty string");
            if (fn.contains("parameters") && !fn["parameters"].is_null() &&
                !fn["parameters"].is_object())
                return f.fail(at + ".function.parameters must be a JSON schema object");
        }
        out->tools = *tools;
    }
    if (const json* tc = f.get("tool_choice")) {
        if (tc->is_string()) {
            out->tool_choice = tc->get<std::string>();
            if (out->tool_choice != "auto" && out->tool_choice != "none" &&
                out->tool_choice != "required")
                return f.fail("tool_choice must be \"auto\", \"none\", \"required\" or "
                              "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
                   (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
            out->tool_choice = (*tc)["function"]["name"].get<std::string>();
            out->tool_choice_named = true;
        } else {
            return f.fail("tool_choice must be \"auto\", \"none\", \"required\" or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        if (out->tool_choice != "none" && out->tool_choice != "auto" && out->tools.empty())
            return f.fail("tool_choice \"" + out->tool_choice + "\" needs tools");
        if (out->tool_choice_named) {
            const auto names = tool_names(out->tools);
            if (std::find(names.begin(), names.end(), out->tool_choice) == names.end())
                return f.fail("tool_choice names the function \"" + out->tool_choice +
                              "\", which is not among the tools");
        }
    }
    f.boolean("parallel_tool_calls", &out->parallel_tool_calls);
    if (out->tool_choice != "none" && !out->tools.empty()) {
        out->tools_json = out->tools.dump();
        out->tool_names = tool_names(out->tools);
    }
    if (const json* kw = f.get("chat_template_kwargs")) {
        if (!kw->is_object()) return f.fail("chat_template_kwargs must be an object");
        if (kw->contains("enable_thinking") && !(*kw)["enable_thinking"].is_boolean())
            return f.fail("chat_template_kwargs.enable_thinking must be true or false, got " +
                          (*kw)["enable_thinking"].dump());
        out->template_kwargs_json = kw->dump();
    }
    if (const json* e = f.get("reasoning_effort")) {
        if (!reasoning_effort_known(*e))
            return f.fail("reasoning_effort must be one of " + std::string(kReasoningEfforts) +
                          ", got " + e->dump());
        out->reasoning_effort = e->get<std::string>();
    }
    // Continuing the last message (llama.cpp's assistant prefill, vLLM's
    // continue_final_message).
    bool agp_given = false;
    if (const json* agp = f.get("add_generation_prompt")) {
        if (!agp->is_boolean()) return f.fail("add_generation_prompt must be true or false");
        out->add_generation_prompt = agp->get<bool>();
        agp_given = true;
    }
    if (const json* cfm = f.get("continue_final_message")) {
        if (!cfm->is_boolean()) return f.fail("continue_final_message must be true or false");
        out->continue_final = cfm->get<bool>();
        if (out->continue_final && agp_given && out->add_generation_prompt)
            return f.fail("add_generation_prompt and continue_final_message cannot both be true: "
                          "the prompt either opens a new reply or continues the last message");
        if (out->continue_final) out->add_generation_prompt = false;
    }
    const size_t n = out->messages.size();
    const bool last_is_assistant = n > 0 && out->messages[n - 1].role == "assistant";
    if (!out->continue_final && out->prefill_assistant && last_is_assistant) {
        if (n >= 2 && out->messages[n - 2].role == "assistant")
            return f.fail("the messages end with two assistant messages: only the last one can "
                          "be continued");
        out->continue_final = true;
        out->add_generation_prompt = false;
    }
    if (out->continue_final) {
        if (!last_is_assistant)
            return f.fail("continue_final_message needs an assistant message last");
        const json& last = (*msgs)[n - 1];
        if (last.contains("tool_calls") && !last["tool_calls"].is_null())
            return f.fail("an assistant message with tool_calls cannot be continued");
        // Its text parts joined as llama.cpp renders a continued message.
        std::string text;
        if (last.contains("content") && last["content"].is_array()) {
            for (const json& part : last["content"]) {
                if (!text.empty()) text += "\n\n";
                text += part["text"].get<std::string>();
            }
        } else {
            text = out->messages[n - 1].content;
        }
        out->continue_text = std::move(text);
        out->messages.pop_back();
    }
    (void)body;
}

// A prompt given as token ids: every element an integer id.
bool token_array(const json& a, std::vector<int32_t>* out) {
    out->clear();
    for (const json& t : a) {
        if (!t.is_number_integer()) return false;
        const int64_t id = t.get<int64_t>();
        if (id < 0 || id > INT32_MAX) return false;
        out->push_back((int32_t)id);
    }
    return true;
}

void parse_prompt(Fields& f, GenRequest* out) {
    const json* p = f.get("prompt");
    if (!p) return f.fail("prompt is required");
    if (p->is_string()) {
        out->prompt = p->get<std::string>();
        return;
    }
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
        out->prompt = (*p)[0].get<std::string>();
        return;
    }
    if (p->is_array() && !p->empty() && token_array(*p, &out->prompt_tokens)) {
        out->prompt_is_tokens = true;
        return;
    }
    // ids and strings mixed in one array: one prompt made of both
    if (p->is_array() && std::all_of(p->begin(), p->end(), [](const json& e) { return e.is_number_integer() || e.is_string(); }) &&
        std::any_of(p->begin(), p->end(), [](const json& e) { return e.is_number_integer(); })) {
        for (const json& e : *p) {
            if (e.is_string()) {
                out->prompt_mixed.push_back({e.get<std::string>(), {}});
                continue;
            }
            const int64_t id = e.get<int64_t>();
            if (id < 0 || id > INT32_MAX) return f.fail("prompt: token id " + e.dump() + " out of range");
            if (out->prompt_mixed.empty() || !out->prompt_mixed.back().first.empty() ||
                out->prompt_mixed.back().second.empty())
                out->prompt_mixed.push_back({"", {}});
            out->prompt_mixed.back().second.push_back((int32_t)id);
        }
        return;
    }
    if (p->is_object()) {  // llama.cpp's JSON prompt
        if (p->contains("multimodal_data"))
            return f.fail("prompt.multimodal_data: this model has no image or audio encoder");
        if (!p->contains("prompt_string") || !(*p)["prompt_string"].is_string())
            return f.fail("a prompt object needs \"prompt_string\" (a string)");
        out->prompt = (*p)["prompt_string"].get<std::string>();
        return;
    }
    f.fail("prompt must be a string or an array of token ids");
}


// The schema refusal as a 400 that names the keyword and its JSON path.
ApiError schema_error(const std::string& field, const SchemaRefusal& why) {
    std::string where;
    if (!why.keyword.empty()) where = " (keyword \"" + why.keyword + "\"";
    if (!why.path.empty()) where += (where.empty() ? " (at " : " at ") + why.path;
    if (!where.empty()) where += ")";
    ApiError e = bad_request(field + ": " + why.message + where);
    e.extra["param"] = field;
    if (!why.keyword.empty()) e.extra["keyword"] = why.keyword;
    if (!why.path.empty()) e.extra["path"] = why.path;
    return e;
}

std::optional<ApiError> compile_grammar(const std::string& field, const std::string& gbnf,
                                        GenRequest* out) {
    auto g = Grammar::parse(gbnf);
    if (!g) {
        ApiError e = bad_request(field + ": " + g.error());
        e.extra["param"] = field;
        return e;
    }
    out->grammar = std::move(*g);
    out->grammar_source = field;
    return std::nullopt;
}

std::optional<ApiError> compile_schema(const std::string& field, const json& schema,
                                       GenRequest* out) {
    SchemaRefusal why;
    auto gbnf = json_schema_to_gbnf(schema, &why);
    if (!gbnf) return schema_error(field, why);
    out->answer_schema = schema;
    return compile_grammar(field, *gbnf, out);
}

// grammar, json_schema, response_format: at most one of them.
std::optional<ApiError> parse_constraint(const json& j, Fields& f, GenRequest* out) {
    (void)j;
    int given = 0;
    for (const char* k : {"grammar", "json_schema"}) given += f.get(k) != nullptr;
    const json* rf = f.get("response_format");
    bool rf_constrains = false;
    if (rf) {
        if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
            return bad_request("response_format must be an object with a \"type\"");
        const std::string t = (*rf)["type"].get<std::string>();
        if (t != "text" && t != "json_object" && t != "json_schema")
            return bad_request("response_format.type must be \"text\", \"json_object\" or "
                               "\"json_schema\", got \"" + t + "\"");
        rf_constrains = t != "text";
    }
    given += rf_constrains;
    if (given > 1)
        return bad_request("give only one of grammar, json_schema and response_format");
    // (a schema with tools is one grammar of calls or answer, built by the server; a raw GBNF
    // grammar cannot be joined to the calls' grammar: its rules could be anything)
    if (f.get("grammar") && !out->tool_names.empty())
        return bad_request("grammar together with tools is not supported (a GBNF grammar cannot be "
                           "joined to the tool calls' grammar): give the answer's form as "
                           "response_format (json_schema), tool_choice \"none\", or leave the tools out");
    if (const json* g = f.get("grammar")) {
        if (!g->is_string()) return bad_request("grammar must be a string (GBNF)");
        if (!g->get<std::string>().empty()) return compile_grammar("grammar", *g, out);
    }
    if (const json* s = f.get("json_schema")) {
        if (!s->is_object() && !s->is_boolean())
            return bad_request("json_schema must be a JSON schema object");
        return compile_schema("json_schema", *s, out);
    }
    if (!rf_constrains) return std::nullopt;
    const std::string t = (*rf)["type"].get<std::string>();
    if (t == "json_object") {
        // llama.cpp also takes a schema here
        if (rf->contains("schema") && !(*rf)["schema"].is_null())
            return compile_schema("response_format.schema", (*rf)["schema"], out);
        JsonSchemaGrammar b;
        const std::string root = b.add_any_object();
        out->answer_schema = json{{"type", "object"}};
        return compile_grammar("response_format", b.gbnf(root), out);
    }
    // json_schema: OpenAI's {"json_schema": {"name", "schema", "strict"}}; llama.cpp's
    // {"schema": ...} too
    const json* schema = nullptr;
    if (rf->contains("json_schema") && (*rf)["json_schema"].is_object()) {
        const json& js = (*rf)["json_schema"];
        if (js.contains("schema")) schema = &js["schema"];
        if (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null())
            return bad_request("response_format.json_schema.strict must be true or false");
    } else if (rf->contains("schema")) {
        schema = &(*rf)["schema"];
    }
    if (!schema || !(schema->is_object() || schema->is_boolean()))
        return bad_request("response_format of type json_schema needs json_schema.schema, a "
                           "JSON schema object");
    return compile_schema("response_format.json_schema.schema", *schema, out);
}

// logit_bias as OpenAI ({"id": bias}) and llama.cpp ([[id or text, bias or false], ...])
// send it.
std::optional<ApiError> parse_logit_bias(const json& lb, bool openai, GenRequest* out) {
    auto add = [&](const json& key, const json& val, const std::string& at) -> std::optional<ApiError> {
        float bias = 0.0f;
        if (val.is_boolean()) {
            if (val.get<bool>()) return bad_request(at + ": a bias of true means nothing; give a number or false");
            bias = -INFINITY;  // llama.cpp: false = never
        } else if (val.is_number()) {
            const double b = val.get<double>();
            if (!std::isfinite(b) || (openai && (b < -100 || b > 100)))
                return bad_request(at + ": a bias must be a number" +
                                   std::string(openai ? " between -100 and 100" : ""));
            bias = (float)b;
        } else {
            return bad_request(at + ": a bias must be a number or false");
        }
        if (key.is_number_integer()) {
            out->bias_ids.push_back({key.get<int64_t>(), bias});
        } else if (key.is_string()) {
            const std::string k = key.get<std::string>();
            char* end = nullptr;
            const long long id = std::strtoll(k.c_str(), &end, 10);
            if (!k.empty() && *end == '\0')
                out->bias_ids.push_back({(int64_t)id, bias});
            else
                out->bias_texts.push_back({k, bias});
        } else {
            return bad_request(at + ": a token must be an id or a string");
        }
        return std::nullopt;
    };
    if (lb.is_object()) {
        for (const auto& [k, v] : lb.items())
            if (auto e = add(json(k), v, "logit_bias[\"" + k + "\"]")) return e;
        return std::nullopt;
    }
    if (lb.is_array()) {
        for (size_t i = 0; i < lb.size(); ++i) {
            const json& pair = lb[i];
            const std::string at = "logit_bias[" + std::to_string(i) + "]";
            if (!pair.is_array() || pair.size() != 2)
                return bad_request(at + " must be a pair [token, bias]");
            if (auto e = add(pair[0], pair[1], at)) return e;
        }
        return std::nullopt;
    }
    return bad_request("logit_bias must be an object {\"token id\": bias} or an array of "
                       "[token, bias] pairs");
}

// The sampling fields beyond llama.cpp's basic ones, and the probabilities.
std::optional<ApiError> parse_sampling_extras(Api api, Fields& f, GenRequest* out) {
    SamplerParams& s = out->gen.sampling;
    f.number("typical_p", 0.0, 1.0, &s.typical_p);
    f.number("top_n_sigma", -1.0, 1e6, &s.top_n_sigma);
    f.number("xtc_probability", 0.0, 1.0, &s.xtc_probability);
    f.number("xtc_threshold", 0.0, 1.0, &s.xtc_threshold);
    f.number("mirostat_tau", 0.0, 1e6, &s.mirostat_tau);
    f.number("mirostat_eta", 0.0, 1e6, &s.mirostat_eta);
    int64_t mirostat = s.mirostat, n = 1, min_keep = 0, n_probs = 0, top_lp = 0;
    f.integer("mirostat", 0, 2, &mirostat);
    s.mirostat = (int32_t)mirostat;
    f.integer("n", 1, 16, &n);
    out->n_choices = (int)n;
    f.integer("min_keep", 0, INT32_MAX, &min_keep);
    f.integer("n_probs", 0, 100, &n_probs);
    f.boolean("constrain", &out->constrain);
    // llama-server's context shift: tokens kept at the start (-1: the prompt) and dropped.
    f.integer("n_keep", -1, INT32_MAX, &out->gen.n_keep);
    f.integer("n_discard", 0, INT32_MAX, &out->gen.n_discard);
    // llama-server's per-request speculative decoding limits (the server checks them
    // against its own).
    int64_t spec_n_max = -1, spec_n_min = -1;
    f.integer("speculative.n_max", 0, 1024, &spec_n_max);
    f.integer("speculative.n_min", 0, 1024, &spec_n_min);
    f.number("speculative.p_min", 0.0, 1.0, &out->spec_p_min);
    out->spec_n_max = (int)spec_n_max;
    out->spec_n_min = (int)spec_n_min;
    if (f.err) return f.err;
    if (min_keep > 1)
        return bad_request("min_keep above 1 is not supported (every filter keeps at least one "
                           "token)");
    float dry = 0.0f;
    f.number("dry_multiplier", 0.0, 1e6, &dry);
    if (f.err) return f.err;
    if (dry > 0.0f)
        return bad_request("dry_multiplier: DRY sampling is not implemented; use repeat_penalty, "
                           "presence_penalty or frequency_penalty");
    if (const json* post = f.get("post_sampling_probs")) {
        if (!post->is_boolean()) return bad_request("post_sampling_probs must be true or false");
        out->gen.post_sampling_probs = post->get<bool>();
    }
    if (const json* t = f.get("t_max_predict_ms"); t && !(t->is_number() && t->get<double>() <= 0))
        return bad_request("t_max_predict_ms is not supported; use n_predict");
    if (const json* sm = f.get("samplers")) {
        s.order.clear();
        if (sm->is_string()) {
            for (char c : sm->get<std::string>()) {
                const auto k = sampler_stage_from_letter(c);
                if (!k || *k == SamplerStageKind::Dry)
                    return bad_request(std::string("samplers: unknown or unsupported stage '") + c + "'");
                s.order.push_back(*k);
            }
        } else if (sm->is_array()) {
            for (const json& x : *sm) {
                const auto k = x.is_string() ? sampler_stage_from_name(x.get<std::string>()) : std::nullopt;
                if (!k || *k == SamplerStageKind::Dry)
                    return bad_request("samplers: unknown or unsupported stage " + x.dump() +
                                       " (penalties, top_n_sigma, top_k, typ_p, top_p, min_p, "
                                       "xtc, temperature)");
                s.order.push_back(*k);
            }
        } else {
            return bad_request("samplers must be an array of stage names");
        }
    }
    if (const json* lb = f.get("logit_bias"))
        if (auto e = parse_logit_bias(*lb, api != Api::Native, out)) return e;
    // Probabilities: chat's logprobs (bool) + top_logprobs; completions' logprobs (an int,
    // the legacy API); the native API's n_probs.
    if (const json* lp = f.get("logprobs")) {
        if (api == Api::Completions && lp->is_number_integer()) {
            f.integer("logprobs", 0, 20, &top_lp);
            out->logprobs = true;
        } else if (lp->is_boolean()) {
            out->logprobs = lp->get<bool>();
        } else {
            return bad_request(api == Api::Completions ? "logprobs must be an integer 0..20"
                                                       : "logprobs must be true or false");
        }
    }
    if (api != Api::Completions) f.integer("top_logprobs", 0, 20, &top_lp);
    if (f.err) return f.err;
    if (api == Api::Chat && top_lp > 0 && !out->logprobs)
        return bad_request("top_logprobs needs logprobs: true");
    if (api == Api::Native && n_probs > 0) {
        out->logprobs = true;
        top_lp = n_probs;
    }
    out->top_logprobs = (int)top_lp;
    if (out->n_choices > 1 && api == Api::Native)
        return bad_request("n: the native API gives one completion per request");
    return std::nullopt;
}

// llama-server's budget of a thinking block, by either of its names (-1: the server's).
std::optional<ApiError> parse_thinking_budget(Api api, Fields& f, GenRequest* out) {
    int64_t reasoning = -1, thinking = -1;
    f.integer("reasoning_budget_tokens", -1, INT32_MAX, &reasoning);
    f.integer("thinking_budget_tokens", -1, INT32_MAX, &thinking);
    if (f.err) return f.err;
    if (reasoning >= 0 && thinking >= 0 && reasoning != thinking)
        return bad_request("reasoning_budget_tokens " + std::to_string(reasoning) +
                           " and thinking_budget_tokens " + std::to_string(thinking) +
                           " disagree (they are two names of one budget)");
    out->reasoning_budget = (int32_t)std::max(reasoning, thinking);
    if (api != Api::Chat && f.get("reasoning_effort"))
        return bad_request("reasoning_effort applies to chat completions (it reaches the model "
                           "through its chat template)");
    return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_lora_list(const json& j, std::vector<std::pair<int, float>>* out) {
    const char* shape = "\"lora\" must be an array of {\"id\": N, \"scale\": X}";
    if (!j.is_array()) return bad_request(shape);
    out->clear();
    for (const json& e : j) {
        if (!e.is_object() || !e.contains("id") || !e["id"].is_number_integer() ||
            (e.contains("scale") && !e["scale"].is_number()))
            return bad_request(shape);
        const int64_t id = e["id"].get<int64_t>();
        const double scale = e.value("scale", 0.0);
        if (id < 0 || id > 1 << 20) return bad_request("lora id " + std::to_string(id) + " does not exist");
        if (!std::isfinite(scale) || std::fabs(scale) > 1e4) return bad_request("lora scale must be a finite number");
        out->emplace_back((int)id, (float)scale);
    }
    return std::nullopt;
}

bool reasoning_effort_known(const json& effort) {
    for (const char* k : {"none", "minimal", "low", "medium", "high", "xhigh", "max"})
        if (effort == k) return true;
    return false;
}

std::string build_info() { return std::string("b") + EDGELLM_VERSION + "-edgellm"; }

std::optional<ApiError> parse_gen_request(Api api, const std::string& body,
                                          const GenerateParams& defaults, GenRequest* out) {
    const json j = json::parse(body, nullptr, false);
    if (j.is_discarded()) {
        const GenRequest keep = *out;  // (the server's defaults, as parsing a body keeps them)
        *out = GenRequest{};
        out->prefill_assistant = keep.prefill_assistant;
        out->cache_prompt = keep.cache_prompt;
        out->api = api;
        out->gen = defaults;
        return bad_request("the request body is not valid JSON");
    }
    return parse_gen_json(api, j, defaults, out);
}

std::optional<ApiError> parse_gen_json(Api api, const json& j, const GenerateParams& defaults,
                                       GenRequest* out) {
    // (the server's defaults for these, set before the call)
    const bool prefill = out->prefill_assistant, cache = out->cache_prompt;
    *out = GenRequest{};
    out->prefill_assistant = prefill;
    out->cache_prompt = cache;
    out->api = api;
    out->gen = defaults;
    if (!j.is_object()) return bad_request("the request body must be a JSON object");
    Fields f(j);
    const bool openai = api != Api::Native;
    f.string("model", &out->model);
    if (api == Api::Chat)
        parse_messages(j, f, out);
    else
        parse_prompt(f, out);
    if (f.err) return f.err;

    int64_t n_predict = out->gen.n_predict;
    f.integer("n_predict", -1, INT32_MAX, &n_predict);
    f.integer("max_tokens", -1, INT32_MAX, &n_predict);
    f.integer("max_completion_tokens", -1, INT32_MAX, &n_predict);
    out->gen.n_predict = (int32_t)n_predict;

    SamplerParams& s = out->gen.sampling;
    if (openai)
        f.number("temperature", 0.0, 2.0, &s.temperature);
    else
        f.number("temperature", -1e9, 1e9, &s.temperature);
    f.number("top_p", 0.0, 1.0, &s.top_p);
    f.number("min_p", 0.0, 1.0, &s.min_p);
    int64_t top_k = s.top_k, last_n = s.repeat_last_n;
    f.integer("top_k", -1, INT32_MAX, &top_k);
    f.integer("repeat_last_n", -1, INT32_MAX, &last_n);
    s.top_k = (int32_t)top_k;
    s.repeat_last_n = (int32_t)last_n;
    f.number("repeat_penalty", 0.0, 1e9, &s.repeat_penalty);
    f.number("presence_penalty", -2.0, 2.0, &s.presence_penalty);
    f.number("frequency_penalty", -2.0, 2.0, &s.frequency_penalty);
    if (const json* seed = f.get("seed")) {
        int64_t v = -1;
        f.integer("seed", INT64_MIN, INT64_MAX, &v);
        (void)seed;
        s.seed = v < 0 ? kRandomSeed : (uint64_t)v;
    }
    f.boolean("stream", &out->stream);
    f.boolean("verbose", &out->verbose);
    f.boolean("timings_per_token", &out->timings_per_token);
    f.boolean("return_progress", &out->return_progress);
    f.boolean("ignore_eos", &out->gen.ignore_eos);
    f.boolean("cache_prompt", &out->cache_prompt);
    f.boolean("return_tokens", &out->return_tokens);
    int64_t slot = -1;
    f.integer("id_slot", -1, 1 << 20, &slot);
    out->id_slot = (int)slot;
    if (f.err) return f.err;
    if (const json* l = f.get("lora"); l && !l->is_null()) {
        out->lora.emplace();
        if (auto e = parse_lora_list(*l, &*out->lora)) return e;
    }

    if (const json* so = f.get("stream_options")) {
        if (!so->is_object()) return bad_request("stream_options must be an object");
        Fields g(*so);
        g.boolean("include_usage", &out->include_usage);
        if (g.err) return g.err;
    }
    if (const json* stop = f.get("stop")) {
        out->gen.stop.clear();
        if (stop->is_string()) {
            out->gen.stop.push_back(stop->get<std::string>());
        } else if (stop->is_array()) {
            for (const json& x : *stop) {
                if (!x.is_string()) return bad_request("stop must be a string or an array of strings");
                out->gen.stop.push_back(x.get<std::string>());
            }
            if (out->gen.stop.size() > 16) return bad_request("stop takes at most 16 strings");
        } else {
            return bad_request("stop must be a string or an array of strings");
        }
        std::erase_if(out->gen.stop, [](const std::string& x) { return x.empty(); });
    }
    if (auto e = parse_sampling_extras(api, f, out)) return e;
    if (auto e = parse_thinking_budget(api, f, out)) return e;
    if (auto e = parse_constraint(j, f, out)) return e;
    return std::nullopt;
}

}  // namespace edgellm::server
