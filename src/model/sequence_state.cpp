// What a context's sequences hold: each one's KV cache and, for a hybrid, its recurrent
// state (model/recurrent_state.h) — cut, saved, restored and checkpointed together, so the
// two always describe the same positions.
#include "model/model_impl.h"

namespace edgellm {

int64_t Context::Impl::cut(int seq, int64_t n_keep) {
    KvCache& cache = *kv[(size_t)seq];
    if (RecurrentState* r = rs_of(seq); r && (n_keep < cache.n_used() || n_keep <= 0)) {
        // (the state cannot go back: the sequence starts again)
        r->clear();
        return cache.truncate(0);
    }
    return cache.truncate(n_keep);
}

int64_t Context::n_past(int seq) const {
    EDGELLM_ASSERT(seq >= 0 && seq < n_seq(), "sequence index in range");
    return impl_->kv[(size_t)seq]->n_used();
}

int64_t Context::truncate(int64_t n_keep, int seq) {
    EDGELLM_ASSERT(seq >= 0 && seq < n_seq(), "sequence index in range");
    return impl_->cut(seq, n_keep);
}

size_t Context::recurrent_state_bytes() const {
    return impl_->rs.empty() ? 0 : impl_->rs[0]->bytes();
}

const char* Context::recurrent_reason() const {
    return impl_->recurrent_why.empty() ? nullptr : impl_->recurrent_why.c_str();
}

void Context::save_recurrent(RecurrentCheckpoint* into, int seq) const {
    EDGELLM_ASSERT(seq >= 0 && seq < n_seq(), "sequence index in range");
    into->n_past = n_past(seq);
    if (const RecurrentState* r = impl_->rs_of(seq))
        r->save(&into->state);
    else
        into->state.clear();
}

Result<int64_t> Context::restore_recurrent(const RecurrentCheckpoint& cp, int seq) {
    using R = Result<int64_t>;
    if (seq < 0 || seq >= n_seq()) return R::fail("sequence " + std::to_string(seq) + " does not exist");
    KvCache& cache = *impl_->kv[(size_t)seq];
    RecurrentState* r = impl_->rs_of(seq);
    if (cp.n_past < 0) return R::fail("the checkpoint was never taken");
    if (cp.state.size() != (r ? r->floats().size() : 0))
        return R::fail("the checkpoint is of another model's recurrent state");
    if (cp.n_past > cache.n_used())
        return R::fail("the sequence holds " + std::to_string(cache.n_used()) +
                       " positions, fewer than the checkpoint's " + std::to_string(cp.n_past));
    // (global layers' cells only: a sliding-window ring may not hold the window before
    // n_past any more)
    if (cache.truncate(cp.n_past) != cp.n_past) {
        if (r) r->clear();
        return R::fail("the KV cache's ring no longer holds the positions before the checkpoint");
    }
    if (r) r->load(cp.state);
    return cp.n_past;
}

std::vector<uint8_t> Context::snapshot(int seq) const {
    std::vector<uint8_t> out;
    if (seq < 0 || seq >= n_seq()) return out;
    impl_->kv[(size_t)seq]->snapshot(&out);
    if (const RecurrentState* r = impl_->rs_of(seq)) r->snapshot(&out);
    return out;
}

Result<int64_t> Context::restore(std::span<const uint8_t> blob, int seq) {
    using R = Result<int64_t>;
    if (seq < 0 || seq >= n_seq()) return R::fail("sequence " + std::to_string(seq) + " does not exist");
    KvCache& cache = *impl_->kv[(size_t)seq];
    RecurrentState* r = impl_->rs_of(seq);
    // (the recurrent state, of a fixed size, is last)
    const size_t rs_bytes = r ? r->snapshot_bytes() : 0;
    if (blob.size() < rs_bytes) {
        cache.truncate(0);
        r->clear();
        return R::fail("it is too short");
    }
    std::string err = cache.restore(blob.first(blob.size() - rs_bytes));
    if (err.empty() && r) err = r->restore(blob.last(rs_bytes));
    if (!err.empty()) {
        impl_->cut(seq, 0);
        return R::fail(err);
    }
    return cache.n_used();
}

}  // namespace edgellm
