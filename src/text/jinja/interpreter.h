// The tree-walking interpreter: interpreter.cpp runs statements and expressions,
// builtins_filters.cpp and builtins_methods.cpp hold what templates call by name.
#pragma once

#include "text/jinja/internal.h"
#include "text/jinja/parser.h"
#include "text/jinja/value.h"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace edgellm::jinja::detail {

enum class Flow { Normal, Break, Continue };

// One scope: the template's top level, a loop iteration, a macro call, a with block.
using Frame = std::unordered_map<std::string, Value>;
// The scopes a macro was defined in (it is a closure over them, as in Jinja2), held
// weakly: a macro stored in its own scope makes no reference cycle.
using Closure = std::vector<std::weak_ptr<Frame>>;

using Slots = std::vector<std::optional<Value>>;

// ---- call arguments of the built-ins (interpreter.cpp) ----
Slots bind(const std::string& what, Args& a, std::initializer_list<const char*> params);
inline bool given(const std::optional<Value>& v) {
    return v && v->kind != Kind::None;
}

int64_t int_arg(const std::optional<Value>& v, const char* what, int64_t fallback);
bool bool_arg(const std::optional<Value>& v, bool fallback);
std::string str_arg(const std::optional<Value>& v, const char* what);

class Interpreter {
  public:
    explicit Interpreter(const Value& context);

    std::string run(const Body& body);

    ~Interpreter();
    Interpreter(const Interpreter&) = delete;
    Interpreter& operator=(const Interpreter&) = delete;

    Value call_macro(const Node& m, const Closure& closure, Args& a);
    Value call_method(const Value& self, const std::string& name, Args& a);
    Value make_namespace(Args& a);

  private:
    std::vector<std::shared_ptr<Frame>> scopes_;  // [0] globals and context, [1] top level, ...
    std::string* out_ = nullptr;
    int64_t steps_ = 0;
    size_t built_bytes_ = 0;
    int call_depth_ = 0;
    int run_depth_ = 0;  // eval() and exec() frames on the stack
    struct RunDepth;     // counts eval() and exec() frames (interpreter.cpp)
    std::vector<std::shared_ptr<ObjectData>> namespaces_;

    // ---- the globals, the step and size budgets, scopes (interpreter.cpp) ----
    static Value builtin_range(Args& a);
    void step();
    void charge(size_t bytes);
    static void check_size(size_t bytes) {
        if (bytes > kMaxStringBytes) throw EvalError("string too long (more than 32 MiB)");
    }

    void emit(std::string_view s);
    Value lookup(const std::string& name) const;
    void assign(const std::string& name, Value v);
    void push_scope();

    // ---- statements (interpreter.cpp) ----
    Flow exec_body(const Body& body);
    Flow exec(const Node& n);
    Flow exec_scoped(const Body& body);
    std::string capture(const Body& body);
    void bind_targets(const Node& n, const Value& v);
    Flow exec_node(const Node& n);
    static Value make_loop(size_t length);
    static void update_loop(ObjectData& loop, const std::vector<Value>& items, size_t k);
    Flow exec_for(const Node& n);

    // ---- expressions and operators (interpreter.cpp) ----
    Value eval(const Expr& e);
    Args eval_args(const Expr& e, size_t first);
    Value apply_filter_chain(const Expr& f, Value v);
    Value eval_node(const Expr& e);
    static bool contains(const Value& container, const Value& item);
    static bool compare(const std::string& op, const Value& a, const Value& b);
    static Value int_result(bool overflow, int64_t r);
    Value repeat(const Value& seq, int64_t times);
    Value binary_op(const std::string& op, const Value& a, const Value& b);
    Value call_value(const Value& f, Args& a);

    // ---- attribute and item access, slices, iteration (interpreter.cpp) ----
    static Value missing_attr(const Value& obj, const std::string& name);
    static Value missing_item(const Value& obj, const Value& key);
    static Value unsafe(const Value& obj, const std::string& name);
    static bool one_of(const std::string& name, std::initializer_list<const char*> names);
    static bool is_str_method(const std::string& n);
    static Value bound_method(const Value& self, const std::string& name);
    Value get_attr(const Value& obj, const std::string& name);
    Value get_item(const Value& obj, const Value& key);
    static Value slice(const Value& obj, const std::optional<Value> (&bounds)[3]);
    static std::vector<Value> iterate(const Value& v);

    // ---- filters and tests (builtins_filters.cpp) ----
    Value attr_path(const Value& item, const Value& attribute);
    static Value lowered(const Value& v);
    static int64_t length_of(const Value& v);
    Value to_int(const Value& v, const Value& fallback, int base);
    static Value float_to_int(double d, const Value& fallback);
    Value sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive);
    Value apply_filter(const std::string& name, Value v, Args& a);
    bool apply_test(const std::string& name, const Value& v, Args& a);
    Value call_test_by_name(const Value& name, const Value& item, const std::vector<Value>& args,
                            const std::vector<std::pair<std::string, Value>>& kw);
    Value select_or_reject(const std::string& name, const Value& v, Args& a, bool select,
                           bool by_attr);
};

}  // namespace edgellm::jinja::detail
