// Resumable streams without HTTP (X-Conversation-Id, GET and DELETE /v1/stream, POST
// /v1/streams/lookup): a session's bytes read back from any offset, a reader that attaches
// while the reply runs and follows it to its end, the cap that drops the oldest bytes,
// cancelling, replacing, evicting and looking up sessions, one writer with readers on other
// threads. Not covered: the expiry 5 minutes after the end (the class reads the wall clock).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "server/engine/stream_sessions.h"

using namespace edgellm::server;
using namespace std::chrono_literals;

namespace {

// What read_from delivers when nothing more will come (the session is done).
std::string read_all(StreamSession& s, size_t offset, bool* ok = nullptr) {
    std::string got;
    const bool r = s.read_from(
        offset,
        [&](std::string_view b) {
            got += b;
            return true;
        },
        nullptr);
    if (ok) *ok = r;
    return got;
}

// A client reading a session on its own thread, so that a test can wait for it with a
// deadline. On destruction it asks the read to stop (should_stop), so that a reader that
// would wait forever fails the test instead of hanging it.
class Reader {
  public:
    Reader(StreamSession& s, size_t offset, std::function<bool(std::string_view)> on_piece = {})
        : on_piece_(std::move(on_piece)) {
        thread_ = std::thread([this, &s, offset] {
            const bool r = s.read_from(
                offset,
                [this](std::string_view b) {
                    {
                        std::lock_guard<std::mutex> lock(mu_);
                        got_ += b;
                        ++pieces_;
                    }
                    return on_piece_ ? on_piece_(b) : true;
                },
                [this] { return give_up_.load(); });
            result_ = r;
            returned_ = true;
        });
    }
    ~Reader() { join(); }

    bool returns_within(std::chrono::milliseconds limit) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!returned_ && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(2ms);
        return returned_;
    }
    void give_up() { give_up_ = true; }
    void join() {
        give_up_ = true;
        if (thread_.joinable()) thread_.join();
    }
    std::string got() {
        std::lock_guard<std::mutex> lock(mu_);
        return got_;
    }
    int pieces() {
        std::lock_guard<std::mutex> lock(mu_);
        return pieces_;
    }
    bool result() const { return result_; }

  private:
    std::function<bool(std::string_view)> on_piece_;
    std::mutex mu_;
    std::string got_;
    int pieces_ = 0;
    std::atomic<bool> give_up_{false};
    std::atomic<bool> returned_{false};
    std::atomic<bool> result_{false};
    std::thread thread_;
};

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::vector<std::string> ids_of(const std::vector<std::shared_ptr<StreamSession>>& sessions) {
    std::vector<std::string> ids;
    for (const auto& s : sessions) ids.push_back(s->id());
    std::sort(ids.begin(), ids.end());
    return ids;
}

}  // namespace

// ---- one session ------------------------------------------------------------------------

TEST(StreamSession, TheBytesOfAFinishedReplyReadBackFromAnyOffset) {
    StreamSession s("conv");
    s.append("data: hello\n\n");
    s.append("data: world\n\n");
    s.finalize();
    EXPECT_EQ(s.total(), 26u);
    EXPECT_EQ(s.dropped(), 0u);
    bool ok = false;
    EXPECT_EQ(read_all(s, 0, &ok), "data: hello\n\ndata: world\n\n");
    EXPECT_TRUE(ok);
    EXPECT_EQ(read_all(s, 13), "data: world\n\n");
    EXPECT_EQ(read_all(s, 19), "world\n\n");
    EXPECT_EQ(read_all(s, 26, &ok), "");  // at the end: nothing more, and no wait
    EXPECT_TRUE(ok);
}

TEST(StreamSession, AReaderAttachedWhileTheReplyRunsFollowsItToItsEnd) {
    StreamSession s("conv");
    s.append("one ");
    Reader r(s, 0);
    // It has what was there when it attached ...
    for (int i = 0; i < 500 && r.got() != "one "; ++i) std::this_thread::sleep_for(2ms);
    ASSERT_EQ(r.got(), "one ");
    // ... gets what comes after, and waits for the end of the reply, not for more readers.
    s.append("two ");
    s.append("three");
    EXPECT_FALSE(r.returns_within(300ms));
    s.finalize();
    ASSERT_TRUE(r.returns_within(5s));
    EXPECT_TRUE(r.result());
    EXPECT_EQ(r.got(), "one two three");
}

TEST(StreamSession, EndingIsFinalNothingIsAppendedAfterIt) {
    StreamSession s("conv");
    const int64_t before = unix_now();
    EXPECT_GE(s.started_at(), before - 1);
    EXPECT_LE(s.started_at(), unix_now());
    EXPECT_FALSE(s.done());
    EXPECT_EQ(s.completed_at(), 0);  // 0 while it runs
    s.append("abc");
    s.finalize();
    EXPECT_TRUE(s.done());
    const int64_t completed = s.completed_at();
    EXPECT_GE(completed, s.started_at());
    s.append("def");  // (a late write of the generation loop)
    EXPECT_EQ(s.total(), 3u);
    EXPECT_EQ(read_all(s, 0), "abc");
    // Ending again (idempotent) keeps the time it ended: wait for the clock's next second.
    while (unix_now() == completed) std::this_thread::sleep_for(10ms);
    s.finalize();
    EXPECT_EQ(s.completed_at(), completed);
}

TEST(StreamSession, CancellingAsksTheReplyToStopButDoesNotEndIt) {
    StreamSession s("conv");
    EXPECT_FALSE(s.cancelled());
    s.cancel();
    EXPECT_TRUE(s.cancelled());  // the generation loop sees it at its next step ...
    EXPECT_FALSE(s.done());      // ... and ends the reply itself
    s.append("last");
    s.finalize();
    EXPECT_EQ(read_all(s, 0), "last");
}

TEST(StreamSession, ABufferOverItsCapDropsItsOldestBytes) {
    StreamSession s("conv", 8);
    s.append("0123");
    s.append("456789");
    EXPECT_EQ(s.total(), 10u);  // offsets count every byte ever written
    EXPECT_EQ(s.dropped(), 2u);
    s.finalize();
    // An offset before the kept bytes is lost: false, and nothing is sent.
    for (size_t offset : {0u, 1u}) {
        bool ok = true;
        EXPECT_EQ(read_all(s, offset, &ok), "");
        EXPECT_FALSE(ok) << offset;
    }
    bool ok = false;
    EXPECT_EQ(read_all(s, 2, &ok), "23456789");
    EXPECT_TRUE(ok);
    EXPECT_EQ(read_all(s, 7), "789");
}

TEST(StreamSession, TheCapKeepsTheNewestBytesAsTheReplyGoesOn) {
    StreamSession s("conv", 4);
    s.append("ab");
    s.append("cd");
    EXPECT_EQ(s.dropped(), 0u);  // exactly at the cap: all kept
    s.append("e");
    s.append("fgh");
    s.finalize();
    EXPECT_EQ(s.dropped(), 4u);
    EXPECT_EQ(s.total(), 8u);
    EXPECT_EQ(read_all(s, 4), "efgh");
}

TEST(StreamSession, AReaderStopsWhenItsClientIsGone) {
    StreamSession s("conv");
    s.append("abc");
    // The sink fails (the client's connection closed): the read ends although the reply runs.
    Reader r(s, 0, [](std::string_view) { return false; });
    EXPECT_TRUE(r.returns_within(5s));
    s.append("def");
    s.finalize();
    r.join();
    EXPECT_TRUE(r.result());
    EXPECT_EQ(r.got(), "abc");
    EXPECT_EQ(r.pieces(), 1);
}

TEST(StreamSession, AWaitingReaderGivesUpWhenAsked) {
    StreamSession s("conv");
    Reader r(s, 0);
    EXPECT_FALSE(r.returns_within(300ms));  // nothing to send: it waits
    r.give_up();                            // (the peer is gone, the server stops)
    EXPECT_TRUE(r.returns_within(5s));      // polled every 200 ms
    EXPECT_TRUE(r.result());
    s.finalize();
}

TEST(StreamSession, AReaderOvertakenByTheCapEndsWithWhatItWasSent) {
    StreamSession s("conv", 4);
    s.append("abcd");
    Reader r(s, 0);
    for (int i = 0; i < 500 && r.got() != "abcd"; ++i) std::this_thread::sleep_for(2ms);
    ASSERT_EQ(r.got(), "abcd");
    // More than the cap arrives at once: the bytes after offset 4 are gone before it reads.
    s.append("efghijkl");
    EXPECT_TRUE(r.returns_within(5s));
    s.finalize();
    r.join();
    EXPECT_TRUE(r.result());  // what it sent stays sent
    EXPECT_EQ(r.got(), "abcd");
}

TEST(StreamSession, OneWriterAndReadersOnOtherThreadsSeeTheSameBytesInOrder) {
    StreamSession s("conv");
    constexpr int kChunks = 600;
    std::string expected;
    for (int i = 0; i < kChunks; ++i) expected += "data: " + std::to_string(i) + "\n\n";
    // Slow clients: the writer appends while they are sending what they took.
    auto slow = [](std::string_view) {
        std::this_thread::sleep_for(50us);
        return true;
    };
    Reader from_start(s, 0, slow);
    std::thread writer([&] {
        for (int i = 0; i < kChunks; ++i) {
            s.append("data: " + std::to_string(i) + "\n\n");
            if (i == 0)  // the first client is reading before the rest comes
                while (from_start.got().empty()) std::this_thread::sleep_for(100us);
            else if (i % 4 == 0)
                std::this_thread::sleep_for(10us);
        }
        s.finalize();
    });
    // A second client re-attaches in the middle, at the offset it had reached.
    while (s.total() < expected.size() / 3) std::this_thread::sleep_for(100us);
    const size_t late_offset = s.total();
    Reader late(s, late_offset, slow);
    writer.join();
    ASSERT_TRUE(from_start.returns_within(30s));
    ASSERT_TRUE(late.returns_within(30s));
    EXPECT_EQ(from_start.got(), expected);
    EXPECT_EQ(late.got(), expected.substr(late_offset));
}

// ---- the sessions of a server -----------------------------------------------------------

TEST(StreamSessions, ASessionIsFoundByItsConversationId) {
    StreamSessions sessions;
    auto a = sessions.create("conv-a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->id(), "conv-a");
    EXPECT_EQ(sessions.get("conv-a"), a);
    EXPECT_EQ(sessions.get("conv-b"), nullptr);
    EXPECT_EQ(sessions.get(""), nullptr);
}

TEST(StreamSessions, ANewReplyInAConversationCancelsAndEndsTheOneBefore) {
    StreamSessions sessions;
    auto first = sessions.create("conv");
    first->append("old");
    Reader r(*first, 0);
    auto second = sessions.create("conv");
    EXPECT_NE(second, first);
    EXPECT_EQ(sessions.get("conv"), second);  // one live session per conversation
    EXPECT_TRUE(first->cancelled());
    EXPECT_TRUE(first->done());
    EXPECT_TRUE(r.returns_within(5s));  // its reader is released
    EXPECT_EQ(r.got(), "old");
    EXPECT_FALSE(second->cancelled());
    EXPECT_FALSE(second->done());
}

TEST(StreamSessions, EvictingForgetsASessionAndEndsItCancellingOnlyWhenAsked) {
    StreamSessions sessions;
    auto deleted = sessions.create("deleted");
    auto finished = sessions.create("finished");
    sessions.evict("deleted", true);  // DELETE /v1/stream
    EXPECT_EQ(sessions.get("deleted"), nullptr);
    EXPECT_TRUE(deleted->cancelled());
    EXPECT_TRUE(deleted->done());
    sessions.evict("finished", false);
    EXPECT_EQ(sessions.get("finished"), nullptr);
    EXPECT_FALSE(finished->cancelled());
    EXPECT_TRUE(finished->done());
    sessions.evict("unknown", true);  // nothing to do
    EXPECT_TRUE(sessions.lookup({"deleted", "finished", "unknown"}).empty());
}

TEST(StreamSessions, LookupFindsAConversationAndItsSubStreams) {
    StreamSessions sessions;
    for (const char* id : {"conv", "conv::1", "conv::2", "conv2", "conv:x", "xconv", "other"})
        sessions.create(id);
    EXPECT_EQ(ids_of(sessions.lookup({"conv"})),
              (std::vector<std::string>{"conv", "conv::1", "conv::2"}));
    EXPECT_EQ(ids_of(sessions.lookup({"conv::1"})), (std::vector<std::string>{"conv::1"}));
    EXPECT_EQ(ids_of(sessions.lookup({"other", "missing", "conv2"})),
              (std::vector<std::string>{"conv2", "other"}));
    EXPECT_TRUE(sessions.lookup({"con"}).empty());
    EXPECT_TRUE(sessions.lookup({}).empty());
}

TEST(StreamSessions, AFinishedSessionIsKeptForAWhileARunningOneAlways) {
    StreamSessions sessions;
    auto finished = sessions.create("finished");
    auto running = sessions.create("running");
    finished->append("reply");
    finished->finalize();
    // Creating, getting and looking up expire old sessions: these two are not old.
    sessions.create("another");
    ASSERT_EQ(sessions.get("finished"), finished);
    ASSERT_EQ(sessions.get("running"), running);
    EXPECT_EQ(ids_of(sessions.lookup({"finished", "running"})),
              (std::vector<std::string>{"finished", "running"}));
    EXPECT_EQ(read_all(*finished, 0), "reply");  // a reload still replays it
}

TEST(StreamSessions, StoppingTheServerEndsEverySessionAndReleasesItsReaders) {
    StreamSessions sessions;
    auto a = sessions.create("a");
    auto b = sessions.create("b");
    Reader r(*a, 0);
    EXPECT_FALSE(r.returns_within(200ms));
    sessions.finalize_all();
    EXPECT_TRUE(r.returns_within(5s));
    EXPECT_TRUE(a->done());
    EXPECT_TRUE(b->done());
    EXPECT_FALSE(a->cancelled());
}
