// The interpreter (interpreter.h): the globals, macros, statements, expressions and
// Python's operators, attribute and item access as Jinja2's sandbox does them, and
// render(), the entry point (text/jinja.h).
#include "text/jinja/interpreter.h"

#include "text/jinja.h"
#include "text/jinja/lexer.h"
#include "text/jinja/py_strings.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace edgellm::jinja::detail {

// Binds call arguments to named parameters the way Python does: positional first, then
// by keyword. One slot per parameter, empty when not given.
Slots bind(const std::string& what, Args& a, std::initializer_list<const char*> params) {
    Slots out(params.size());
    if (a.pos.size() > params.size())
        throw EvalError(what + "() takes at most " + std::to_string(params.size()) +
                        " argument(s) (" + std::to_string(a.pos.size()) + " given)");
    for (size_t k = 0; k < a.pos.size(); ++k) out[k] = std::move(a.pos[k]);
    for (auto& [key, value] : a.kw) {
        size_t idx = 0;
        for (const char* p : params) {
            if (key == p) break;
            ++idx;
        }
        if (idx == params.size())
            throw EvalError(what + "() got an unexpected keyword argument '" + key + "'");
        if (out[idx]) throw EvalError(what + "() got multiple values for argument '" + key + "'");
        out[idx] = std::move(value);
    }
    return out;
}

int64_t int_arg(const std::optional<Value>& v, const char* what, int64_t fallback) {
    if (!given(v)) return fallback;
    if (!is_integral(*v))
        throw EvalError(std::string(what) + " must be an integer, not " + type_name(*v));
    return int_of(*v);
}

bool bool_arg(const std::optional<Value>& v, bool fallback) {
    return v ? truthy(*v) : fallback;
}

std::string str_arg(const std::optional<Value>& v, const char* what) {
    if (!v || v->kind != Kind::String)
        throw EvalError(std::string(what) + " must be a string" +
                        (v ? ", not " + type_name(*v) : std::string()));
    return v->s;
}

Interpreter::Interpreter(const Value& context) {
    scopes_ = {std::make_shared<Frame>(), std::make_shared<Frame>()};
    Frame& globals = *scopes_[0];
    globals["range"] =
        make_callable("range", [](Interpreter&, Args& a) { return builtin_range(a); });
    globals["dict"] = make_callable("dict", [](Interpreter&, Args& a) {
        auto d = std::make_shared<ObjectData>();
        if (!a.pos.empty()) throw EvalError("dict() takes keyword arguments only here");
        for (auto& [k, v] : a.kw) d->set(Value::string(k), std::move(v));
        return make_dict(std::move(d));
    });
    globals["namespace"] =
        make_callable("namespace", [](Interpreter& in, Args& a) { return in.make_namespace(a); });
    globals["raise_exception"] =
        make_callable("raise_exception", [](Interpreter&, Args& a) -> Value {
            auto p = bind("raise_exception", a, {"message"});
            throw EvalError("raise_exception: " + (p[0] ? to_str(*p[0]) : std::string()));
        });
    globals["strftime_now"] = make_callable("strftime_now", [](Interpreter&, Args& a) {
        auto p = bind("strftime_now", a, {"format"});
        const std::string fmt = str_arg(p[0], "strftime_now format");
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        // strftime returns 0 when the buffer is too small (or the result is empty).
        for (size_t size = 256; size <= 65536; size *= 16) {
            std::string buf(size, '\0');
            const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
            if (n > 0 || fmt.empty()) return Value::string(buf.substr(0, n));
        }
        return Value::string("");
    });
    for (const auto& [k, v] : context.obj->items) globals[k.s] = v;
}

std::string Interpreter::run(const Body& body) {
    std::string result;
    out_ = &result;
    exec_body(body);
    return result;
}

// namespace() objects are the only mutable values, so the only way to a reference cycle
// (`set ns.me = ns`); emptying them all, whether the rendering succeeded or not, breaks any.
Interpreter::~Interpreter() {
    for (auto& ns : namespaces_) ns->items.clear();
}

// Runs with the scopes of the definition (not the caller's), plus its own.
Value Interpreter::call_macro(const Node& m, const Closure& closure, Args& a) {
    if (call_depth_ >= kMaxCallDepth)
        throw EvalError("macro calls nested too deeply (more than " +
                        std::to_string(kMaxCallDepth) + ")");
    if (a.pos.size() > m.targets.size() && !m.catch_varargs)
        throw EvalError("macro '" + m.name + "' takes not more than " +
                        std::to_string(m.targets.size()) + " argument(s)");
    auto frame = std::make_shared<Frame>();
    std::vector<bool> bound(m.targets.size(), false);
    std::vector<Value> varargs;
    auto kwargs = std::make_shared<ObjectData>();
    for (size_t k = 0; k < a.pos.size(); ++k) {
        if (k >= m.targets.size()) {
            varargs.push_back(std::move(a.pos[k]));
            continue;
        }
        (*frame)[m.targets[k]] = std::move(a.pos[k]);
        bound[k] = true;
    }
    for (auto& [key, v] : a.kw) {
        const auto it = std::find(m.targets.begin(), m.targets.end(), key);
        if (it == m.targets.end() && m.catch_kwargs) {
            kwargs->set(Value::string(key), std::move(v));
            continue;
        }
        if (it == m.targets.end())
            throw EvalError("macro '" + m.name + "' takes no keyword argument '" + key + "'");
        const size_t idx = static_cast<size_t>(it - m.targets.begin());
        if (bound[idx])
            throw EvalError("macro '" + m.name + "' got multiple values for '" + key + "'");
        (*frame)[key] = std::move(v);
        bound[idx] = true;
    }
    if (m.catch_varargs) (*frame)["varargs"] = make_list(std::move(varargs), true);
    if (m.catch_kwargs) (*frame)["kwargs"] = make_dict(std::move(kwargs));
    std::vector<std::shared_ptr<Frame>> saved_scopes = {scopes_[0], scopes_[1]};
    saved_scopes.swap(scopes_);
    for (const auto& weak : closure)
        if (auto f = weak.lock()) scopes_.push_back(std::move(f));
    scopes_.push_back(frame);
    std::string* saved_out = out_;
    std::string buffer;
    ++call_depth_;
    for (size_t k = 0; k < m.targets.size(); ++k) {
        if (bound[k]) continue;
        (*frame)[m.targets[k]] =
            m.defaults[k] ? eval(*m.defaults[k])
                          : Value::undefined("parameter '" + m.targets[k] + "' was not provided");
    }
    out_ = &buffer;
    exec_body(m.bodies[0]);
    out_ = saved_out;
    --call_depth_;
    scopes_.swap(saved_scopes);
    return Value::string(std::move(buffer));
}

Value Interpreter::make_namespace(Args& a) {
    auto d = std::make_shared<ObjectData>();
    if (a.pos.size() > 1) throw EvalError("namespace() takes at most one positional argument");
    if (!a.pos.empty()) {
        if (a.pos[0].kind != Kind::Object) throw EvalError("namespace() argument must be a dict");
        d->items = a.pos[0].obj->items;
    }
    for (auto& [k, v] : a.kw) d->set(Value::string(k), std::move(v));
    namespaces_.push_back(d);
    Value v;
    v.kind = Kind::Namespace;
    v.obj = std::move(d);
    return v;
}

// Counts one eval() or exec() frame: macros multiply the nesting of their bodies, so
// the stack is bounded here, across all of them.
struct Interpreter::RunDepth {
    explicit RunDepth(int& d) : depth(d) {
        if (++depth > kMaxRunDepth)
            throw EvalError("template nested too deeply at run time (more than " +
                            std::to_string(kMaxRunDepth) + " levels)");
    }
    ~RunDepth() { --depth; }
    int& depth;
};

Value Interpreter::builtin_range(Args& a) {
    auto p = bind("range", a, {"start", "stop", "step"});
    int64_t start = 0, stop, step = 1;
    if (!p[0]) throw EvalError("range expected at least 1 argument, got 0");
    if (!p[1]) {
        stop = int_arg(p[0], "range() argument", 0);
    } else {
        start = int_arg(p[0], "range() argument", 0);
        stop = int_arg(p[1], "range() argument", 0);
        step = int_arg(p[2], "range() argument", 1);
    }
    if (step == 0) throw EvalError("range() arg 3 must not be zero");
    // Python's length of a range, in 128 bits (stop - start overflows 64, doubles round).
    const __int128 span = static_cast<__int128>(stop) - start;
    __int128 n = 0;
    if (step > 0 && span > 0) n = (span - 1) / step + 1;
    if (step < 0 && span < 0) n = (-span - 1) / -static_cast<__int128>(step) + 1;
    if (n > kMaxListLength)
        throw EvalError("range() too long (more than " + std::to_string(kMaxListLength) +
                        " items)");
    std::vector<Value> items;
    items.reserve(static_cast<size_t>(n));
    for (int64_t k = 0; k < static_cast<int64_t>(n); ++k)
        items.push_back(
            Value::integer(static_cast<int64_t>(start + static_cast<__int128>(k) * step)));
    return make_list(std::move(items));
}

void Interpreter::step() {
    if (++steps_ > kMaxSteps)
        throw EvalError("template takes too long (more than " + std::to_string(kMaxSteps) +
                        " steps)");
}

void Interpreter::charge(size_t bytes) {
    built_bytes_ += bytes;
    if (built_bytes_ > kMaxBuiltBytes)
        throw EvalError("template builds too much data (more than 256 MiB of strings and lists)");
}

void Interpreter::emit(std::string_view s) {
    check_size(out_->size() + s.size());
    charge(s.size());
    out_->append(s);
}

Value Interpreter::lookup(const std::string& name) const {
    for (size_t k = scopes_.size(); k-- > 0;) {
        const auto it = scopes_[k]->find(name);
        if (it != scopes_[k]->end()) return it->second;
    }
    return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::assign(const std::string& name, Value v) {
    (*scopes_.back())[name] = std::move(v);
}

void Interpreter::push_scope() {
    scopes_.push_back(std::make_shared<Frame>());
}

// ---- statements ----

Flow Interpreter::exec_body(const Body& body) {
    for (const NodePtr& n : body) {
        const Flow f = exec(*n);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Flow Interpreter::exec(const Node& n) {
    try {
        RunDepth guard(run_depth_);
        step();
        return exec_node(n);
    } catch (const EvalError& e) {
        throw TemplateError(n.line, e.what());
    }
}

Flow Interpreter::exec_scoped(const Body& body) {
    push_scope();
    const Flow f = exec_body(body);
    scopes_.pop_back();
    return f;
}

std::string Interpreter::capture(const Body& body) {
    std::string* saved = out_;
    std::string buffer;
    out_ = &buffer;
    exec_scoped(body);
    out_ = saved;
    return buffer;
}

// Binds loop or set targets: one name takes the value, several unpack it.
void Interpreter::bind_targets(const Node& n, const Value& v) {
    if (n.targets.size() == 1 && !n.target_is_tuple) {
        assign(n.targets[0], v);
        return;
    }
    const std::vector<Value> parts = iterate(v);
    if (parts.size() != n.targets.size())
        throw EvalError(
            parts.size() > n.targets.size()
                ? "too many values to unpack (expected " + std::to_string(n.targets.size()) + ")"
                : "not enough values to unpack (expected " + std::to_string(n.targets.size()) +
                      ", got " + std::to_string(parts.size()) + ")");
    for (size_t k = 0; k < parts.size(); ++k) assign(n.targets[k], parts[k]);
}

Flow Interpreter::exec_node(const Node& n) {
    switch (n.kind) {
        case Node::Kind::Text:
            emit(n.text);
            return Flow::Normal;
        case Node::Kind::Output: {
            const Value v = eval(*n.exprs[0]);
            if (v.kind == Kind::String)
                emit(v.s);
            else
                emit(to_str(v));
            return Flow::Normal;
        }
        case Node::Kind::If: {
            for (size_t k = 0; k < n.exprs.size(); ++k)
                if (truthy(eval(*n.exprs[k]))) return exec_body(n.bodies[k]);
            if (n.bodies.size() > n.exprs.size()) return exec_body(n.bodies.back());
            return Flow::Normal;
        }
        case Node::Kind::For:
            return exec_for(n);
        case Node::Kind::Set: {
            Value v = eval(*n.exprs[0]);
            if (!n.ns_attr.empty()) {
                const Value ns = lookup(n.targets[0]);
                if (ns.kind != Kind::Namespace)
                    throw EvalError("cannot assign attribute on non-namespace object '" +
                                    n.targets[0] + "'");
                ns.obj->set(Value::string(n.ns_attr), std::move(v));
            } else {
                bind_targets(n, v);
            }
            return Flow::Normal;
        }
        case Node::Kind::SetBlock: {
            Value v = Value::string(capture(n.bodies[0]));
            if (!n.exprs.empty()) v = apply_filter_chain(*n.exprs[0], std::move(v));
            assign(n.targets[0], std::move(v));
            return Flow::Normal;
        }
        case Node::Kind::Macro: {
            const Node* m = &n;
            Closure closure(scopes_.begin() + 2, scopes_.end());
            assign(n.name, make_callable(n.name, [m, closure](Interpreter& in, Args& a) {
                       return in.call_macro(*m, closure, a);
                   }));
            return Flow::Normal;
        }
        case Node::Kind::Break:
            return Flow::Break;
        case Node::Kind::Continue:
            return Flow::Continue;
        case Node::Kind::With: {
            std::vector<Value> values;
            for (const ExprPtr& e : n.exprs) values.push_back(eval(*e));
            push_scope();
            for (size_t k = 0; k < values.size(); ++k) assign(n.targets[k], std::move(values[k]));
            const Flow f = exec_body(n.bodies[0]);
            scopes_.pop_back();
            return f;
        }
        case Node::Kind::FilterBlock: {
            const Value v = apply_filter_chain(*n.exprs[0], Value::string(capture(n.bodies[0])));
            emit(to_str(v));
            return Flow::Normal;
        }
    }
    return Flow::Normal;
}

// The `loop` variable: like Jinja2's LoopContext, one object per loop, advanced in
// place at each iteration (update_loop).
Value Interpreter::make_loop(size_t length) {
    auto d = std::make_shared<ObjectData>();
    for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                            "depth", "depth0", "previtem", "nextitem", "cycle"})
        d->items.emplace_back(Value::string(key), Value());
    d->items[6].second = Value::integer(static_cast<int64_t>(length));
    d->items[7].second = Value::integer(1);
    d->items[8].second = Value::integer(0);
    std::weak_ptr<ObjectData> self = d;
    d->items[11].second = make_callable("cycle", [self](Interpreter&, Args& a) {
        if (a.pos.empty()) throw EvalError("no items for cycling given");
        const auto loop = self.lock();
        const int64_t idx = loop ? loop->items[1].second.i : 0;
        return a.pos[static_cast<size_t>(idx) % a.pos.size()];
    });
    Value v;
    v.kind = Kind::Object;
    v.obj = std::move(d);
    return v;
}

void Interpreter::update_loop(ObjectData& loop, const std::vector<Value>& items, size_t k) {
    const auto n = static_cast<int64_t>(items.size());
    const auto idx = static_cast<int64_t>(k);
    loop.items[0].second = Value::integer(idx + 1);
    loop.items[1].second = Value::integer(idx);
    loop.items[2].second = Value::integer(n - idx);
    loop.items[3].second = Value::integer(n - idx - 1);
    loop.items[4].second = Value::boolean(idx == 0);
    loop.items[5].second = Value::boolean(idx == n - 1);
    loop.items[9].second = k > 0 ? items[k - 1] : Value::undefined("there is no previous item");
    loop.items[10].second =
        k + 1 < items.size() ? items[k + 1] : Value::undefined("there is no next item");
}

Flow Interpreter::exec_for(const Node& n) {
    std::vector<Value> items = iterate(eval(*n.exprs[0]));
    if (n.exprs.size() > 1) {  // for x in xs if cond: the loop only sees what passes
        std::vector<Value> kept;
        for (Value& item : items) {
            step();
            push_scope();
            bind_targets(n, item);
            const bool keep = truthy(eval(*n.exprs[1]));
            scopes_.pop_back();
            if (keep) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    if (items.empty()) return n.bodies.size() > 1 ? exec_scoped(n.bodies[1]) : Flow::Normal;
    const Value loop = make_loop(items.size());
    for (size_t k = 0; k < items.size(); ++k) {
        step();
        push_scope();  // each iteration has its own scope, as in Jinja2
        bind_targets(n, items[k]);
        update_loop(*loop.obj, items, k);
        assign("loop", loop);
        const Flow f = exec_body(n.bodies[0]);
        scopes_.pop_back();
        if (f == Flow::Break) break;
    }
    return Flow::Normal;
}

// ---- expressions ----

Value Interpreter::eval(const Expr& e) {
    try {
        RunDepth guard(run_depth_);
        step();
        Value v = eval_node(e);
        if (e.kind != Expr::Kind::Name && e.kind != Expr::Kind::Literal &&
            e.kind != Expr::Kind::GetAttr && e.kind != Expr::Kind::GetItem) {
            if (v.kind == Kind::String) {
                check_size(v.s.size());
                charge(v.s.size());
            } else if (v.kind == Kind::Array) {
                charge(v.arr->items.size() * sizeof(Value));
            }
        }
        return v;
    } catch (const EvalError& err) {
        throw TemplateError(e.line, err.what());
    }
}

Args Interpreter::eval_args(const Expr& e, size_t first) {
    Args a;
    for (size_t k = first; k < e.items.size(); ++k) a.pos.push_back(eval(*e.items[k]));
    for (const auto& [key, x] : e.kwargs) a.kw.emplace_back(key, eval(*x));
    return a;
}

Value Interpreter::apply_filter_chain(const Expr& f, Value v) {
    if (f.items[0]) v = apply_filter_chain(*f.items[0], std::move(v));
    Args a = eval_args(f, 1);
    return apply_filter(f.name, std::move(v), a);
}

Value Interpreter::eval_node(const Expr& e) {
    switch (e.kind) {
        case Expr::Kind::Literal:
            return e.literal;
        case Expr::Kind::Name:
            return lookup(e.name);
        case Expr::Kind::List:
        case Expr::Kind::Tuple: {
            std::vector<Value> items;
            items.reserve(e.items.size());
            for (const ExprPtr& x : e.items) items.push_back(eval(*x));
            return make_list(std::move(items), e.kind == Expr::Kind::Tuple);
        }
        case Expr::Kind::Dict: {
            auto d = std::make_shared<ObjectData>();
            for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
                Value key = eval(*e.items[k]);
                d->set(std::move(key), eval(*e.items[k + 1]));
            }
            return make_dict(std::move(d));
        }
        case Expr::Kind::GetAttr:
            return get_attr(eval(*e.items[0]), e.name);
        case Expr::Kind::GetItem: {
            const Value obj = eval(*e.items[0]);
            return get_item(obj, eval(*e.items[1]));
        }
        case Expr::Kind::Slice: {
            const Value obj = eval(*e.items[0]);
            std::optional<Value> bounds[3];
            for (size_t k = 0; k < 3; ++k)
                if (e.items[k + 1]) bounds[k] = eval(*e.items[k + 1]);
            return slice(obj, bounds);
        }
        case Expr::Kind::Call: {
            const Value f = eval(*e.items[0]);
            Args a = eval_args(e, 1);
            return call_value(f, a);
        }
        case Expr::Kind::Filter: {
            Value subject = eval(*e.items[0]);
            Args a = eval_args(e, 1);
            return apply_filter(e.name, std::move(subject), a);
        }
        case Expr::Kind::Test: {
            const Value subject = eval(*e.items[0]);
            Args a = eval_args(e, 1);
            return Value::boolean(apply_test(e.name, subject, a));
        }
        case Expr::Kind::Neg:
        case Expr::Kind::Pos: {
            const Value v = eval(*e.items[0]);
            if (v.kind == Kind::Undefined) throw EvalError(v.s);
            const bool neg = e.kind == Expr::Kind::Neg;
            if (v.kind == Kind::Float) return Value::real(neg ? -v.f : v.f);
            if (is_integral(v)) {
                const int64_t x = int_of(v);
                if (neg && x == INT64_MIN) throw EvalError("integer overflow");
                return Value::integer(neg ? -x : x);
            }
            throw EvalError(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" +
                            type_name(v) + "'");
        }
        case Expr::Kind::Not:
            return Value::boolean(!truthy(eval(*e.items[0])));
        case Expr::Kind::Binary: {
            const Value a = eval(*e.items[0]);
            const Value b = eval(*e.items[1]);
            return binary_op(e.name, a, b);
        }
        case Expr::Kind::Concat: {
            std::string s;
            for (const ExprPtr& x : e.items) {
                const Value v = eval(*x);
                s += v.kind == Kind::String ? v.s : to_str(v);
                check_size(s.size());
            }
            return Value::string(std::move(s));
        }
        case Expr::Kind::Compare: {
            Value left = eval(*e.items[0]);
            for (size_t k = 0; k < e.ops.size(); ++k) {
                Value right = eval(*e.items[k + 1]);
                if (!compare(e.ops[k], left, right)) return Value::boolean(false);
                left = std::move(right);
            }
            return Value::boolean(true);
        }
        case Expr::Kind::And: {
            Value a = eval(*e.items[0]);
            return truthy(a) ? eval(*e.items[1]) : a;
        }
        case Expr::Kind::Or: {
            Value a = eval(*e.items[0]);
            return truthy(a) ? a : eval(*e.items[1]);
        }
        case Expr::Kind::CondExpr: {
            if (truthy(eval(*e.items[1]))) return eval(*e.items[0]);
            if (e.items[2]) return eval(*e.items[2]);
            return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                    " evaluated to false and no else section was defined.");
        }
    }
    return Value::undefined("?");
}

bool Interpreter::contains(const Value& container, const Value& item) {
    switch (container.kind) {
        case Kind::Undefined:
            return false;
        case Kind::String:
            if (item.kind != Kind::String)
                throw EvalError("'in <string>' requires string as left operand, not " +
                                type_name(item));
            return find_text(container.s, item.s, 0) != std::string::npos;
        case Kind::Array:
            for (const Value& x : container.arr->items)
                if (py_equal(x, item)) return true;
            return false;
        case Kind::Object:
            if ((item.kind == Kind::Array && !item.arr->is_tuple) || item.kind == Kind::Object)
                throw EvalError("unhashable type: '" + type_name(item) + "'");
            return container.obj->find(item) != nullptr;
        default:
            throw EvalError("argument of type '" + type_name(container) + "' is not iterable");
    }
}

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return py_equal(a, b);
    if (op == "!=") return !py_equal(a, b);
    if (op == "in") return contains(b, a);
    if (op == "not in") return !contains(b, a);
    const int c = py_compare(a, b, op.c_str());
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
}

Value Interpreter::int_result(bool overflow, int64_t r) {
    if (overflow)
        throw EvalError("integer overflow (Python's integers are unbounded, these are 64-bit)");
    return Value::integer(r);
}

Value Interpreter::repeat(const Value& seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.kind == Kind::String ? seq.s.empty() : seq.arr->items.empty())
        times = std::min<int64_t>(times, 1);  // nothing to repeat: no loop of `times`
    if (seq.kind == Kind::String) {
        const auto t = static_cast<size_t>(times);
        if (!seq.s.empty() && t > kMaxStringBytes / seq.s.size()) check_size(kMaxStringBytes + 1);
        std::string out;
        out.reserve(seq.s.size() * t);
        for (size_t k = 0; k < t; ++k) out += seq.s;
        return Value::string(std::move(out));
    }
    const auto& items = seq.arr->items;
    if (!items.empty() && times > kMaxListLength / static_cast<int64_t>(items.size()))
        throw EvalError("list too long (more than " + std::to_string(kMaxListLength) + " items)");
    std::vector<Value> out;
    for (int64_t k = 0; k < times; ++k) out.insert(out.end(), items.begin(), items.end());
    return make_list(std::move(out), seq.arr->is_tuple);
}

Value Interpreter::binary_op(const std::string& op, const Value& a, const Value& b) {
    if (a.kind == Kind::Undefined) throw EvalError(a.s);
    if (b.kind == Kind::Undefined) throw EvalError(b.s);
    const bool ints = is_integral(a) && is_integral(b);
    const bool nums = is_number(a) && is_number(b);
    int64_t r = 0;
    if (op == "+") {
        if (ints) {
            const bool overflow = __builtin_add_overflow(int_of(a), int_of(b), &r);
            return int_result(overflow, r);
        }
        if (nums) return Value::real(double_of(a) + double_of(b));
        if (a.kind == Kind::String && b.kind == Kind::String) {
            check_size(a.s.size() + b.s.size());
            work((a.s.size() + b.s.size()) / 8);
            return Value::string(a.s + b.s);
        }
        if (a.kind == Kind::Array && b.kind == Kind::Array && a.arr->is_tuple == b.arr->is_tuple &&
            !a.arr->is_generator && !b.arr->is_generator) {
            work(a.arr->items.size() + b.arr->items.size());  // the copy, before it is made
            std::vector<Value> items = a.arr->items;
            items.insert(items.end(), b.arr->items.begin(), b.arr->items.end());
            return make_list(std::move(items), a.arr->is_tuple);
        }
        if (a.kind == Kind::String && b.kind != Kind::String)
            throw EvalError("can only concatenate str (not \"" + type_name(b) + "\") to str");
    } else if (op == "-") {
        if (ints) {
            const bool overflow = __builtin_sub_overflow(int_of(a), int_of(b), &r);
            return int_result(overflow, r);
        }
        if (nums) return Value::real(double_of(a) - double_of(b));
    } else if (op == "*") {
        if (ints) {
            const bool overflow = __builtin_mul_overflow(int_of(a), int_of(b), &r);
            return int_result(overflow, r);
        }
        if (nums) return Value::real(double_of(a) * double_of(b));
        auto repeatable = [](const Value& x) {
            return x.kind == Kind::String || (x.kind == Kind::Array && !x.arr->is_generator);
        };
        if (repeatable(a) && is_integral(b)) return repeat(a, int_of(b));
        if (repeatable(b) && is_integral(a)) return repeat(b, int_of(a));
    } else if (op == "/") {
        if (nums) {
            if (double_of(b) == 0) throw EvalError("division by zero");
            return Value::real(double_of(a) / double_of(b));
        }
    } else if (op == "//" || op == "%") {
        if (ints) {
            const int64_t x = int_of(a), y = int_of(b);
            if (y == 0) throw EvalError("integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == "%") return Value::integer(0);
                throw EvalError("integer overflow");
            }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                m += y;
                --q;
            }
            return Value::integer(op == "//" ? q : m);
        }
        if (nums) {  // Python's float divmod
            const double x = double_of(a), y = double_of(b);
            if (y == 0) throw EvalError("float division by zero");
            double mod = std::fmod(x, y);
            double div = (x - mod) / y;
            if (mod != 0) {
                if ((y < 0) != (mod < 0)) {
                    mod += y;
                    div -= 1.0;
                }
            } else {
                mod = std::copysign(0.0, y);
            }
            double floordiv;
            if (div != 0) {
                floordiv = std::floor(div);
                if (div - floordiv > 0.5) floordiv += 1.0;
            } else {
                floordiv = std::copysign(0.0, x / y);
            }
            return Value::real(op == "//" ? floordiv : mod);
        }
        if (op == "%" && a.kind == Kind::String) return Value::string(percent_format(a.s, b));
    } else if (op == "**") {
        if (ints && int_of(b) >= 0) {
            int64_t base = int_of(a), e = int_of(b), result = 1;
            while (e > 0) {
                if (e & 1)
                    if (__builtin_mul_overflow(result, base, &result)) return int_result(true, 0);
                e >>= 1;
                if (e > 0 && __builtin_mul_overflow(base, base, &base)) return int_result(true, 0);
            }
            return Value::integer(result);
        }
        if (nums) {
            const double x = double_of(a), y = double_of(b);
            if (x == 0 && y < 0) throw EvalError("0.0 cannot be raised to a negative power");
            if (x < 0 && y != std::floor(y)) throw EvalError("unsupported: a complex result of **");
            const double r = std::pow(x, y);
            if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
                throw EvalError("OverflowError: numerical result out of range");
            return Value::real(r);
        }
    }
    throw EvalError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
}

Value Interpreter::call_value(const Value& f, Args& a) {
    if (f.kind == Kind::Callable) {
        const std::shared_ptr<Callable> fn = f.fn;  // keeps it alive through the call
        return fn->call(*this, a);
    }
    if (f.kind == Kind::Undefined) throw EvalError(f.s);
    throw EvalError("'" + type_name(f) + "' object is not callable");
}

// ---- attribute and item access (Jinja2's sandboxed getattr / getitem) ----

Value Interpreter::missing_attr(const Value& obj, const std::string& name) {
    return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
}

Value Interpreter::missing_item(const Value& obj, const Value& key) {
    if (key.kind == Kind::String) return missing_attr(obj, key.s);
    return Value::undefined(object_type_repr(obj) + " has no element " + to_repr(key));
}

Value Interpreter::unsafe(const Value& obj, const std::string& name) {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) +
                            "' object is unsafe.");
}

bool Interpreter::one_of(const std::string& name, std::initializer_list<const char*> names) {
    for (const char* n : names)
        if (name == n) return true;
    return false;
}

bool Interpreter::is_str_method(const std::string& n) {
    return one_of(
        n,
        {"capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
         "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
         "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
         "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
         "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
         "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
         "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
         "swapcase",     "title",       "translate", "upper",      "zfill"});
}

Value Interpreter::bound_method(const Value& self, const std::string& name) {
    return make_callable(
        name, [self, name](Interpreter& in, Args& a) { return in.call_method(self, name, a); });
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
    switch (obj.kind) {
        case Kind::Undefined:
            throw EvalError(obj.s);
        case Kind::String:
            return is_str_method(name) ? bound_method(obj, name) : missing_attr(obj, name);
        case Kind::Array:
            if (one_of(name, {"count", "index", "copy"})) return bound_method(obj, name);
            if (!obj.arr->is_tuple && one_of(name, {"append", "clear", "extend", "insert", "pop",
                                                    "remove", "reverse", "sort"}))
                return unsafe(obj, name);
            return missing_attr(obj, name);
        case Kind::Object: {
            if (one_of(name, {"get", "items", "keys", "values", "copy"}))
                return bound_method(obj, name);
            if (one_of(name, {"clear", "pop", "popitem", "setdefault", "update", "fromkeys"}))
                return unsafe(obj, name);
            const Value* v = obj.obj->find(std::string_view(name));
            return v ? *v : missing_attr(obj, name);
        }
        case Kind::Namespace: {
            const Value* v = obj.obj->find(std::string_view(name));
            return v ? *v : missing_attr(obj, name);
        }
        default:
            return missing_attr(obj, name);
    }
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
    switch (obj.kind) {
        case Kind::Undefined:
            throw EvalError(obj.s);
        case Kind::Array:
        case Kind::String:
            if (obj.kind == Kind::Array && obj.arr->is_generator) return missing_item(obj, key);
            if (is_integral(key)) {
                int64_t idx = int_of(key);
                if (obj.kind == Kind::Array) {
                    const auto n = static_cast<int64_t>(obj.arr->items.size());
                    if (idx < 0) idx += n;
                    if (idx >= 0 && idx < n) return obj.arr->items[static_cast<size_t>(idx)];
                } else {
                    const std::vector<uint32_t> cps = code_points(obj.s);
                    const auto n = static_cast<int64_t>(cps.size());
                    if (idx < 0) idx += n;
                    if (idx >= 0 && idx < n) {
                        std::string c;
                        append_utf8(c, cps[static_cast<size_t>(idx)]);
                        return Value::string(std::move(c));
                    }
                }
                return missing_item(obj, key);
            }
            break;
        case Kind::Object: {
            const Value* v = obj.obj->find(key);
            if (v) return *v;
            if (key.kind == Kind::String &&
                one_of(key.s, {"get", "items", "keys", "values", "copy"}))
                return bound_method(obj, key.s);
            return missing_item(obj, key);
        }
        default:
            break;
    }
    if (key.kind == Kind::String) return get_attr(obj, key.s);
    return missing_item(obj, key);
}

// Python's slice semantics on lists, tuples and strings.
Value Interpreter::slice(const Value& obj, const std::optional<Value> (&bounds)[3]) {
    if (obj.kind == Kind::Undefined) throw EvalError(obj.s);
    for (const auto& b : bounds)
        if (b && b->kind != Kind::None && !is_integral(*b))
            throw EvalError("slice indices must be integers or None");
    int64_t step = given(bounds[2]) ? int_of(*bounds[2]) : 1;
    if (step == 0) throw EvalError("slice step cannot be zero");
    std::vector<uint32_t> cps;
    int64_t len;
    if (obj.kind == Kind::String) {
        cps = code_points(obj.s);
        len = static_cast<int64_t>(cps.size());
    } else if (obj.kind == Kind::Array && !obj.arr->is_generator) {
        len = static_cast<int64_t>(obj.arr->items.size());
    } else {  // Jinja2 slices with Python's [] directly, not through its getitem
        throw EvalError("'" + type_name(obj) + "' object is not subscriptable");
    }
    const int64_t lower = step < 0 ? -1 : 0, upper = step < 0 ? len - 1 : len;
    auto adjust = [&](const std::optional<Value>& b, int64_t dflt) {
        if (!given(b)) return dflt;
        int64_t x = int_of(*b);
        if (x < 0) {
            x += len;
            if (x < lower) x = lower;
        } else if (x > upper) {
            x = upper;
        }
        return x;
    };
    const int64_t start = adjust(bounds[0], step < 0 ? upper : lower);
    const int64_t stop = adjust(bounds[1], step < 0 ? lower : upper);
    // start + k * step for k < count: never an index past the end (start + step can
    // overflow when the step is huge).
    int64_t count = 0;
    if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
    if (step < 0 && start > stop)
        count = (start - stop - 1) / (step == INT64_MIN ? INT64_MAX : -step) + 1;
    if (obj.kind == Kind::String) {
        std::string out;
        for (int64_t k = 0; k < count; ++k)
            append_utf8(out, cps[static_cast<size_t>(start + k * step)]);
        return Value::string(std::move(out));
    }
    std::vector<Value> out;
    for (int64_t k = 0; k < count; ++k)
        out.push_back(obj.arr->items[static_cast<size_t>(start + k * step)]);
    return make_list(std::move(out), obj.arr->is_tuple);
}

// What a for loop (or list(), join, ...) goes through.
std::vector<Value> Interpreter::iterate(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined:
            return {};
        case Kind::Array:
            work(v.arr->items.size());
            return v.arr->items;
        case Kind::String: {
            work(v.s.size());
            if (v.s.size() > static_cast<size_t>(kMaxListLength) &&
                count_code_points(v.s) > static_cast<size_t>(kMaxListLength))
                throw EvalError("string too long to iterate (more than " +
                                std::to_string(kMaxListLength) + " characters)");
            std::vector<Value> out;
            for (size_t i = 0; i < v.s.size();) {
                const size_t start = i;
                next_code_point(v.s, i);
                out.push_back(Value::string(v.s.substr(start, i - start)));
            }
            return out;
        }
        case Kind::Object: {
            work(v.obj->items.size());
            std::vector<Value> out;
            for (const auto& kv : v.obj->items) out.push_back(kv.first);
            return out;
        }
        default:
            throw EvalError("'" + type_name(v) + "' object is not iterable");
    }
}

namespace {

template <class Json>
Result<std::string> render_impl(const std::string& source, const Json& context) {
    try {
        if (!context.is_object())
            return Result<std::string>::fail("the template context must be a JSON object");
        t_work = 0;
        Body body = parse(tokenize(source));
        const Value ctx = from_json(context, 0);
        Interpreter interp(ctx);
        return interp.run(body);
    } catch (const TemplateError& e) {
        return Result<std::string>::fail("line " + std::to_string(e.line) + ": " + e.what());
    } catch (const EvalError& e) {
        return Result<std::string>::fail(e.what());
    } catch (const std::bad_alloc&) {
        return Result<std::string>::fail("out of memory while rendering the template");
    } catch (const std::exception& e) {
        return Result<std::string>::fail(std::string("template error: ") + e.what());
    }
}

}  // namespace

}  // namespace edgellm::jinja::detail

namespace edgellm::jinja {

Result<std::string> render(const std::string& source, const nlohmann::json& context) {
    return detail::render_impl(source, context);
}

Result<std::string> render(const std::string& source, const nlohmann::ordered_json& context) {
    return detail::render_impl(source, context);
}

}  // namespace edgellm::jinja
