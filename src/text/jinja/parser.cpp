// The parser (parser.h), after Jinja2's parser.py: the same precedence and the same quirks.
#include "text/jinja/parser.h"

#include "text/jinja/internal.h"

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::jinja::detail {
namespace {

ExprPtr make_expr(Expr::Kind k, int line) {
    return std::make_unique<Expr>(k, line);
}

// Every node is finished here once its children are in: loops in the parser (a + b + c,
// long filter chains, x.a.b.c) build deep trees without recursing, and evaluating or
// destroying a tree recurses, so its depth is bounded where it is built.
constexpr int kMaxExprDepth = 200;

ExprPtr finish(ExprPtr e) {
    int depth = 0;
    for (const ExprPtr& c : e->items)
        if (c) depth = std::max(depth, c->depth);
    for (const auto& kv : e->kwargs) depth = std::max(depth, kv.second->depth);
    e->depth = depth + 1;
    if (e->depth > kMaxExprDepth)
        throw TemplateError(e->line, "expression nested too deeply (more than " +
                                         std::to_string(kMaxExprDepth) + " levels)");
    return e;
}

NodePtr make_node(Node::Kind k, int line) {
    return std::make_unique<Node>(k, line);
}

class Parser {
  public:
    explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

    Body parse_template() {
        std::string found;
        return subparse({}, nullptr, 0, &found);
    }

  private:
    std::vector<Token> toks_;
    size_t i_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;
    bool saw_varargs_ = false;  // the names `varargs` and `kwargs` were read (macro bodies)
    bool saw_kwargs_ = false;

    struct DepthGuard {
        DepthGuard(int& d, int line) : depth(d) {
            if (++depth > kMaxParseDepth)
                throw TemplateError(line, "template nested too deeply (more than " +
                                              std::to_string(kMaxParseDepth) + " levels)");
        }
        ~DepthGuard() { --depth; }
        int& depth;
    };

    const Token& cur() const { return toks_[i_]; }
    const Token& peek() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
    void advance() {
        if (i_ + 1 < toks_.size()) ++i_;
    }
    bool at_op(std::string_view op) const { return cur().type == Tok::Op && cur().text == op; }
    bool at_name(std::string_view n) const { return cur().type == Tok::Name && cur().text == n; }
    bool skip_op(std::string_view op) {
        if (!at_op(op)) return false;
        advance();
        return true;
    }
    bool skip_name(std::string_view n) {
        if (!at_name(n)) return false;
        advance();
        return true;
    }
    [[noreturn]] void fail_expected(const std::string& what) const {
        throw TemplateError(cur().line, "expected " + what + ", got " + describe(cur()));
    }
    void expect_op(std::string_view op) {
        if (!skip_op(op)) fail_expected("'" + std::string(op) + "'");
    }
    std::string expect_name() {
        if (cur().type != Tok::Name) fail_expected("a name");
        std::string n = cur().text;
        advance();
        return n;
    }
    void expect(Tok type, const char* what) {
        if (cur().type != type) fail_expected(what);
        advance();
    }
    void expect_block_end() { expect(Tok::BlockEnd, "end of statement block '%}'"); }

    // Statements until one of `ends` (the end name is consumed and stored in *found).
    Body subparse(std::initializer_list<const char*> ends, const char* opener, int opener_line,
                  std::string* found) {
        Body body;
        for (;;) {
            const Token& t = cur();
            switch (t.type) {
                case Tok::Eof: {
                    if (!opener) return body;
                    std::string want;
                    for (const char* e : ends)
                        want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
                    throw TemplateError(t.line, std::string("unexpected end of template: '") +
                                                    opener + "' from line " +
                                                    std::to_string(opener_line) +
                                                    " is not closed (expected " + want + ")");
                }
                case Tok::Text: {
                    auto n = make_node(Node::Kind::Text, t.line);
                    n->text = t.text;
                    body.push_back(std::move(n));
                    advance();
                    break;
                }
                case Tok::VarBegin: {
                    auto n = make_node(Node::Kind::Output, t.line);
                    advance();
                    n->exprs.push_back(parse_tuple(true, nullptr, false));
                    expect(Tok::VarEnd, "end of print statement '}}'");
                    body.push_back(std::move(n));
                    break;
                }
                case Tok::BlockBegin: {
                    advance();
                    if (cur().type == Tok::Name) {
                        for (const char* e : ends) {
                            if (cur().text == e) {
                                *found = e;
                                advance();
                                return body;
                            }
                        }
                    }
                    body.push_back(parse_statement());
                    expect_block_end();
                    break;
                }
                default:
                    fail_expected("template text or a tag");
            }
        }
    }

    NodePtr parse_statement() {
        if (cur().type != Tok::Name) fail_expected("a statement name");
        const std::string name = cur().text;
        const int line = cur().line;
        DepthGuard guard(depth_, line);
        advance();
        if (name == "for") return parse_for(line);
        if (name == "if") return parse_if(line);
        if (name == "set") return parse_set(line);
        if (name == "macro") return parse_macro(line);
        if (name == "with") return parse_with(line);
        if (name == "filter") return parse_filter_block(line);
        if (name == "generation") {  // transformers' AssistantTracker: renders its body
            auto n = make_node(Node::Kind::With, line);
            expect_block_end();
            std::string found;
            n->bodies.push_back(subparse({"endgeneration"}, "generation", line, &found));
            return n;
        }
        if (name == "print") {
            auto n = make_node(Node::Kind::Output, line);
            n->exprs.push_back(parse_tuple(true, nullptr, false));
            return n;
        }
        if (name == "break" || name == "continue") {
            if (loop_depth_ == 0) throw TemplateError(line, "'" + name + "' outside of a for loop");
            return make_node(name == "break" ? Node::Kind::Break : Node::Kind::Continue, line);
        }
        static const char* const ends[] = {"endfor",        "endif",    "elif",    "else",
                                           "endset",        "endmacro", "endwith", "endfilter",
                                           "endgeneration", "endraw"};
        for (const char* e : ends)
            if (name == e)
                throw TemplateError(line, "unexpected '" + name + "' (no block to close)");
        throw TemplateError(line, "unsupported statement '" + name + "'");
    }

    // Names separated by commas (optionally in parentheses), or name.attr when allowed.
    void parse_assign_target(Node& n, bool allow_ns) {
        if (allow_ns && cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
            n.targets.push_back(expect_name());
            advance();
            n.ns_attr = expect_name();
            return;
        }
        const bool parens = skip_op("(");
        for (;;) {
            n.targets.push_back(expect_name());
            if (!skip_op(",")) break;
            n.target_is_tuple = true;
            if (cur().type != Tok::Name) break;  // trailing comma
        }
        if (parens) {
            n.target_is_tuple = true;
            expect_op(")");
        }
    }

    NodePtr parse_for(int line) {
        auto n = make_node(Node::Kind::For, line);
        parse_assign_target(*n, false);
        if (!skip_name("in")) fail_expected("'in'");
        n->exprs.push_back(parse_tuple(false, "recursive", false));
        if (skip_name("if")) n->exprs.push_back(parse_expression(true));
        if (at_name("recursive"))
            throw TemplateError(cur().line, "unsupported: recursive for loops");
        expect_block_end();
        std::string found;
        ++loop_depth_;
        n->bodies.push_back(subparse({"endfor", "else"}, "for", line, &found));
        --loop_depth_;
        if (found == "else") {
            expect_block_end();
            n->bodies.push_back(subparse({"endfor"}, "for", line, &found));
        }
        return n;
    }

    NodePtr parse_if(int line) {
        auto n = make_node(Node::Kind::If, line);
        for (;;) {
            n->exprs.push_back(parse_tuple(false, nullptr, false));
            expect_block_end();
            std::string found;
            n->bodies.push_back(subparse({"elif", "else", "endif"}, "if", line, &found));
            if (found == "elif") continue;
            if (found == "else") {
                expect_block_end();
                n->bodies.push_back(subparse({"endif"}, "if", line, &found));
            }
            return n;
        }
    }

    NodePtr parse_set(int line) {
        auto n = make_node(Node::Kind::Set, line);
        parse_assign_target(*n, true);
        if (skip_op("=")) {
            n->exprs.push_back(parse_tuple(true, nullptr, false));
            return n;
        }
        if (!n->ns_attr.empty() || n->target_is_tuple)
            throw TemplateError(line, "a block 'set' takes a single name");
        n->kind = Node::Kind::SetBlock;
        if (at_op("|")) n->exprs.push_back(parse_filter(nullptr, false));
        expect_block_end();
        std::string found;
        n->bodies.push_back(subparse({"endset"}, "set", line, &found));
        return n;
    }

    NodePtr parse_macro(int line) {
        auto n = make_node(Node::Kind::Macro, line);
        n->name = expect_name();
        expect_op("(");
        while (!at_op(")")) {
            if (!n->targets.empty()) {
                expect_op(",");
                if (at_op(")")) break;
            }
            n->targets.push_back(expect_name());
            if (skip_op("=")) {
                n->defaults.push_back(parse_expression(true));
            } else {
                if (!n->defaults.empty() && n->defaults.back())
                    throw TemplateError(cur().line,
                                        "non-default argument follows default argument");
                n->defaults.push_back(nullptr);
            }
        }
        advance();
        expect_block_end();
        const int saved_loops = loop_depth_;
        const bool saved_varargs = saw_varargs_, saved_kwargs = saw_kwargs_;
        loop_depth_ = 0;
        saw_varargs_ = saw_kwargs_ = false;
        std::string found;
        n->bodies.push_back(subparse({"endmacro"}, "macro", line, &found));
        loop_depth_ = saved_loops;
        n->catch_varargs = saw_varargs_;
        n->catch_kwargs = saw_kwargs_;
        saw_varargs_ = saw_varargs_ || saved_varargs;
        saw_kwargs_ = saw_kwargs_ || saved_kwargs;
        return n;
    }

    NodePtr parse_with(int line) {
        auto n = make_node(Node::Kind::With, line);
        while (cur().type != Tok::BlockEnd) {
            if (!n->targets.empty()) expect_op(",");
            n->targets.push_back(expect_name());
            expect_op("=");
            n->exprs.push_back(parse_expression(true));
        }
        expect_block_end();
        std::string found;
        n->bodies.push_back(subparse({"endwith"}, "with", line, &found));
        return n;
    }

    NodePtr parse_filter_block(int line) {
        auto n = make_node(Node::Kind::FilterBlock, line);
        n->exprs.push_back(parse_filter(nullptr, true));
        expect_block_end();
        std::string found;
        n->bodies.push_back(subparse({"endfilter"}, "filter", line, &found));
        return n;
    }

    // ---- expressions ----

    bool is_tuple_end(const char* extra_end) const {
        return cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || at_op(")") ||
               (extra_end && at_name(extra_end));
    }

    ExprPtr parse_tuple(bool with_condexpr, const char* extra_end, bool explicit_parens) {
        const int line = cur().line;
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        for (;;) {
            if (!items.empty()) expect_op(",");
            if (is_tuple_end(extra_end)) break;
            items.push_back(parse_expression(with_condexpr));
            if (at_op(","))
                is_tuple = true;
            else
                break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) fail_expected("an expression");
        }
        auto e = make_expr(Expr::Kind::Tuple, line);
        e->items = std::move(items);
        return finish(std::move(e));
    }

    ExprPtr parse_expression(bool with_condexpr) {
        return with_condexpr ? parse_condexpr() : parse_or();
    }

    ExprPtr parse_condexpr() {
        int line = cur().line;
        ExprPtr expr1 = parse_or();
        while (skip_name("if")) {
            ExprPtr cond = parse_or();
            ExprPtr expr3;
            if (skip_name("else")) {  // a if b else c if d else ...: recursion
                DepthGuard guard(depth_, cur().line);
                expr3 = parse_condexpr();
            }
            auto e = make_expr(Expr::Kind::CondExpr, line);
            e->items.push_back(std::move(expr1));
            e->items.push_back(std::move(cond));
            e->items.push_back(std::move(expr3));
            expr1 = finish(std::move(e));
            line = cur().line;
        }
        return expr1;
    }

    ExprPtr binary(Expr::Kind k, int line, ExprPtr a, ExprPtr b, std::string op = {}) {
        auto e = make_expr(k, line);
        e->name = std::move(op);
        e->items.push_back(std::move(a));
        e->items.push_back(std::move(b));
        return finish(std::move(e));
    }

    ExprPtr parse_or() {
        const int line = cur().line;
        ExprPtr left = parse_and();
        while (skip_name("or")) left = binary(Expr::Kind::Or, line, std::move(left), parse_and());
        return left;
    }

    ExprPtr parse_and() {
        const int line = cur().line;
        ExprPtr left = parse_not();
        while (skip_name("and")) left = binary(Expr::Kind::And, line, std::move(left), parse_not());
        return left;
    }

    ExprPtr parse_not() {
        if (at_name("not")) {
            const int line = cur().line;
            DepthGuard guard(depth_, line);
            advance();
            auto e = make_expr(Expr::Kind::Not, line);
            e->items.push_back(parse_not());
            return finish(std::move(e));
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const int line = cur().line;
        ExprPtr first = parse_math1();
        std::vector<std::string> ops;
        std::vector<ExprPtr> operands;
        for (;;) {
            if (cur().type == Tok::Op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                 cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
                ops.push_back(cur().text);
                advance();
            } else if (skip_name("in")) {
                ops.emplace_back("in");
            } else if (at_name("not") && peek().type == Tok::Name && peek().text == "in") {
                advance();
                advance();
                ops.emplace_back("not in");
            } else {
                break;
            }
            operands.push_back(parse_math1());
        }
        if (ops.empty()) return first;
        auto e = make_expr(Expr::Kind::Compare, line);
        e->items.push_back(std::move(first));
        for (auto& o : operands) e->items.push_back(std::move(o));
        e->ops = std::move(ops);
        return finish(std::move(e));
    }

    ExprPtr parse_math1() {
        const int line = cur().line;
        ExprPtr left = parse_concat();
        while (at_op("+") || at_op("-")) {
            std::string op = cur().text;
            advance();
            left = binary(Expr::Kind::Binary, line, std::move(left), parse_concat(), op);
        }
        return left;
    }

    ExprPtr parse_concat() {
        const int line = cur().line;
        ExprPtr first = parse_math2();
        if (!at_op("~")) return first;
        auto e = make_expr(Expr::Kind::Concat, line);
        e->items.push_back(std::move(first));
        while (skip_op("~")) e->items.push_back(parse_math2());
        return finish(std::move(e));
    }

    ExprPtr parse_math2() {
        const int line = cur().line;
        ExprPtr left = parse_pow();
        while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
            std::string op = cur().text;
            advance();
            left = binary(Expr::Kind::Binary, line, std::move(left), parse_pow(), op);
        }
        return left;
    }

    ExprPtr parse_pow() {  // left-associative in Jinja2: 2**3**2 == 64
        const int line = cur().line;
        ExprPtr left = parse_unary(true);
        while (skip_op("**"))
            left = binary(Expr::Kind::Binary, line, std::move(left), parse_unary(true), "**");
        return left;
    }

    ExprPtr parse_unary(bool with_filter) {
        const int line = cur().line;
        DepthGuard guard(depth_, line);
        ExprPtr node;
        if (at_op("-") || at_op("+")) {
            const bool neg = at_op("-");
            advance();
            node = make_expr(neg ? Expr::Kind::Neg : Expr::Kind::Pos, line);
            node->items.push_back(parse_unary(false));
            node = finish(std::move(node));
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_expr(std::move(node));
        return node;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        const int line = t.line;
        if (t.type == Tok::Name) {
            const std::string n = t.text;
            advance();
            auto e = make_expr(Expr::Kind::Literal, line);
            if (n == "true" || n == "True") {
                e->literal = Value::boolean(true);
            } else if (n == "false" || n == "False") {
                e->literal = Value::boolean(false);
            } else if (n == "none" || n == "None") {
                e->literal = Value::none();
            } else {
                e->kind = Expr::Kind::Name;
                e->name = n;
                saw_varargs_ = saw_varargs_ || n == "varargs";
                saw_kwargs_ = saw_kwargs_ || n == "kwargs";
            }
            return e;
        }
        if (t.type == Tok::String) {
            std::string s;
            while (cur().type == Tok::String) {  // adjacent literals concatenate
                s += cur().text;
                advance();
            }
            auto e = make_expr(Expr::Kind::Literal, line);
            e->literal = Value::string(std::move(s));
            return e;
        }
        if (t.type == Tok::Int || t.type == Tok::Float) {
            auto e = make_expr(Expr::Kind::Literal, line);
            e->literal =
                t.type == Tok::Int ? Value::integer(t.int_value) : Value::real(t.float_value);
            advance();
            return e;
        }
        if (skip_op("(")) {
            ExprPtr e = parse_tuple(true, nullptr, true);
            expect_op(")");
            return e;
        }
        if (skip_op("[")) {
            auto e = make_expr(Expr::Kind::List, line);
            while (!at_op("]")) {
                if (!e->items.empty()) {
                    expect_op(",");
                    if (at_op("]")) break;
                }
                e->items.push_back(parse_expression(true));
            }
            advance();
            return finish(std::move(e));
        }
        if (skip_op("{")) {
            auto e = make_expr(Expr::Kind::Dict, line);
            while (!at_op("}")) {
                if (!e->items.empty()) {
                    expect_op(",");
                    if (at_op("}")) break;
                }
                e->items.push_back(parse_expression(true));
                expect_op(":");
                e->items.push_back(parse_expression(true));
            }
            advance();
            return finish(std::move(e));
        }
        throw TemplateError(line, "unexpected " + describe(t));
    }

    ExprPtr parse_postfix(ExprPtr node) {
        for (;;) {
            const int line = cur().line;
            if (skip_op(".")) {
                if (cur().type == Tok::Name) {
                    auto e = make_expr(Expr::Kind::GetAttr, line);
                    e->name = cur().text;
                    advance();
                    e->items.push_back(std::move(node));
                    node = finish(std::move(e));
                } else if (cur().type == Tok::Int) {
                    auto key = make_expr(Expr::Kind::Literal, line);
                    key->literal = Value::integer(cur().int_value);
                    advance();
                    node = binary(Expr::Kind::GetItem, line, std::move(node), std::move(key));
                } else {
                    fail_expected("a name or a number after '.'");
                }
            } else if (skip_op("[")) {
                node = parse_subscript(std::move(node), line);
            } else if (at_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr node, int line) {
        // One subscript: an expression or a slice; several make a tuple key.
        std::vector<ExprPtr> keys;
        ExprPtr slice;
        while (!at_op("]")) {
            if (!keys.empty() || slice) expect_op(",");
            ExprPtr start;
            if (!at_op(":")) {
                start = parse_expression(true);
                if (!at_op(":")) {
                    keys.push_back(std::move(start));
                    continue;
                }
            }
            advance();  // ':'
            auto s = make_expr(Expr::Kind::Slice, line);
            s->items.push_back(nullptr);  // the object, filled below
            s->items.push_back(std::move(start));
            s->items.push_back(at_op(":") || at_op("]") || at_op(",") ? nullptr
                                                                      : parse_expression(true));
            ExprPtr step;
            if (skip_op(":") && !at_op("]") && !at_op(",")) step = parse_expression(true);
            s->items.push_back(std::move(step));
            if (slice || !keys.empty()) throw TemplateError(line, "unsupported: tuples of slices");
            slice = std::move(s);
        }
        advance();  // ']'
        if (slice) {
            if (!keys.empty()) throw TemplateError(line, "unsupported: tuples of slices");
            slice->items[0] = std::move(node);
            return finish(std::move(slice));
        }
        if (keys.empty()) throw TemplateError(line, "expected a subscript expression");
        ExprPtr key;
        if (keys.size() == 1) {
            key = std::move(keys[0]);
        } else {
            key = make_expr(Expr::Kind::Tuple, line);
            key->items = std::move(keys);
            key = finish(std::move(key));
        }
        return binary(Expr::Kind::GetItem, line, std::move(node), std::move(key));
    }

    void parse_call_args(Expr& e) {
        expect_op("(");
        bool any = false;
        while (!at_op(")")) {
            if (any) {
                expect_op(",");
                if (at_op(")")) break;
            }
            any = true;
            if (at_op("*") || at_op("**"))
                throw TemplateError(cur().line, "unsupported: *args and **kwargs in calls");
            if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
                std::string key = cur().text;
                advance();
                advance();
                e.kwargs.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (!e.kwargs.empty())
                    throw TemplateError(cur().line, "positional argument follows keyword argument");
                e.items.push_back(parse_expression(true));
            }
        }
        advance();
    }

    ExprPtr parse_call(ExprPtr callee) {
        auto e = make_expr(Expr::Kind::Call, cur().line);
        e->items.push_back(std::move(callee));
        parse_call_args(*e);
        return finish(std::move(e));
    }

    std::string parse_dotted_name() {
        std::string n = expect_name();
        while (skip_op(".")) n += "." + expect_name();
        return n;
    }

    // `| name(args)` chains; with `start_inline` the first filter has no pipe.
    ExprPtr parse_filter(ExprPtr subject, bool start_inline) {
        while (at_op("|") || start_inline) {
            const int line = cur().line;
            if (!start_inline) advance();
            start_inline = false;
            auto e = make_expr(Expr::Kind::Filter, line);
            e->name = parse_dotted_name();
            e->items.push_back(std::move(subject));
            if (at_op("(")) parse_call_args(*e);
            subject = finish(std::move(e));
        }
        return subject;
    }

    ExprPtr parse_test(ExprPtr subject) {
        const int line = cur().line;
        advance();  // 'is'
        const bool negated = skip_name("not");
        auto e = make_expr(Expr::Kind::Test, line);
        e->name = parse_dotted_name();
        e->items.push_back(std::move(subject));
        if (at_op("(")) {
            parse_call_args(*e);
        } else if ((cur().type == Tok::Name || cur().type == Tok::String ||
                    cur().type == Tok::Int || cur().type == Tok::Float || at_op("(") ||
                    at_op("[") || at_op("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and")) {
            if (at_name("is"))
                throw TemplateError(cur().line, "you cannot chain multiple tests with is");
            e->items.push_back(parse_postfix(parse_primary()));
        }
        e = finish(std::move(e));
        if (!negated) return e;
        auto n = make_expr(Expr::Kind::Not, line);
        n->items.push_back(std::move(e));
        return finish(std::move(n));
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        for (;;) {
            if (at_op("|"))
                node = parse_filter(std::move(node), false);
            else if (at_name("is"))
                node = parse_test(std::move(node));
            else if (at_op("("))
                node = parse_call(std::move(node));
            else
                return node;
        }
    }
};

}  // namespace

Body parse(std::vector<Token> tokens) {
    return Parser(std::move(tokens)).parse_template();
}

}  // namespace edgellm::jinja::detail
