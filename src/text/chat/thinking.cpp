#include "text/chat/thinking.h"

#include "text/chat/text_scan.h"

namespace edgellm {

namespace {

// Blanks after a close that a grammar lets by: the blank lines a model writes between its
// reasoning and its answer (one token in the models seen, "\n\n"), no more, so a grammar
// cannot be kept waiting.
constexpr int kBlanksAfterClose = 2;

bool all_blank(const std::string& piece) {
    if (piece.empty()) return false;
    for (char c : piece)
        if (!is_blank(c)) return false;
    return true;
}

}  // namespace

int32_t chat_thinking_budget(std::string_view prompt, bool template_has_switch, bool enabled,
                             int32_t budget) {
    if (prompt_closes_thinking(prompt) || (!template_has_switch && !enabled)) return 0;
    return budget;
}

ThinkingBudget::ThinkingBudget(const ThinkingParams& p, std::shared_ptr<const GrammarVocab> vocab)
    : params_(p), vocab_(std::move(vocab)), stream_(p.opened) {
    // A close is forced only by tokens that write exactly it, so the block surely ends.
    std::erase_if(params_.closes, [&](const auto& c) {
        std::string text;
        for (int32_t t : c.second) {
            if (t < 0 || t >= vocab_->n_vocab()) return true;
            text += vocab_->piece(t);
        }
        return c.second.empty() || text != c.first;
    });
    reset();
}

void ThinkingBudget::reset() {
    stream_ = ReasoningStream(params_.opened);
    mode_ = Mode::Free;
    used_ = total_ = 0;
    utf8_need_ = 0;
    force_ = 0;
    force_at_ = 0;
    blanks_left_ = 0;
    if (params_.opened) enter_block();
}

int32_t ThinkingBudget::forced() const {
    return mode_ == Mode::Forcing ? params_.closes[force_].second[force_at_] : -1;
}

bool ThinkingBudget::passes_grammar(int32_t token) const {
    if (mode_ != Mode::Free) return true;
    if (token < 0 || token >= vocab_->n_vocab()) return false;
    const std::string& piece = vocab_->piece(token);
    if (blanks_left_ > 0 && all_blank(piece)) return true;
    return params_.budget != 0 && stream_.would_open(piece);
}

void ThinkingBudget::enter_block() {
    mode_ = Mode::Counting;
    used_ = 0;
    utf8_need_ = 0;
    if (params_.budget == 0) start_forcing();
}

void ThinkingBudget::start_forcing() {
    for (size_t i = 0; i < params_.closes.size(); ++i)
        if (params_.closes[i].first == stream_.closing()) {
            force_ = i;
            force_at_ = 0;
            mode_ = Mode::Forcing;
            return;
        }
    // (no tokens for this close: the block runs its course)
}

void ThinkingBudget::count(const std::string& piece) {
    ++used_;
    ++total_;
    // The block's text is cut only between characters (a budget that ends inside one waits
    // for its last byte), and not while the model is writing its close ("</think" waits for
    // its ">" or for what shows it was no close).
    for (unsigned char b : piece) {
        if (utf8_need_ > 0 && (b & 0xC0) == 0x80)
            --utf8_need_;
        else
            utf8_need_ = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
    }
    if (params_.budget >= 0 && used_ >= params_.budget && utf8_need_ == 0 && !stream_.may_close())
        start_forcing();
}

ThinkingBudget::Step ThinkingBudget::accept(int32_t token) {
    if (token < 0 || token >= vocab_->n_vocab()) return Step::Answer;
    const std::string& piece = vocab_->piece(token);
    scratch_.clear();
    const Mode was = mode_;
    stream_.push(piece, &scratch_, &scratch_);
    if (was == Mode::Forcing) {
        // (another token than the forced one ends the forcing: the caller chose it)
        const std::vector<int32_t>& close = params_.closes[force_].second;
        force_at_ = token == close[force_at_] ? force_at_ + 1 : close.size();
        if (force_at_ < close.size()) return Step::Block;
        mode_ = stream_.thinking() ? Mode::Counting : Mode::Free;
        blanks_left_ = mode_ == Mode::Free ? kBlanksAfterClose : 0;
        return Step::Block;
    }
    if (stream_.thinking()) {
        if (was == Mode::Free) {
            enter_block();
            return Step::Opened;
        }
        count(piece);
        return Step::Block;
    }
    if (was == Mode::Counting) {  // its close
        mode_ = Mode::Free;
        blanks_left_ = kBlanksAfterClose;
        return Step::Block;
    }
    if (blanks_left_ > 0) {
        if (all_blank(piece)) {
            --blanks_left_;
            return Step::Blank;
        }
        blanks_left_ = 0;
    }
    return stream_.may_open() ? Step::MayOpen : Step::Answer;
}

}  // namespace edgellm
