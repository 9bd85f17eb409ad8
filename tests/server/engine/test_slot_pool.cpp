// The slot pool without HTTP: first come first served, the best-scoring idle slot, a bounded
// queue, waiters that give up, and holding a slot for maintenance.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "server/engine/slot_pool.h"

using namespace edgellm::server;
using namespace std::chrono_literals;

TEST(SlotPool, TakesTheIdleSlotThatScoresHighestThenTheLeastRecentlyUsed) {
    SlotPool pool(3, 4);
    auto a = pool.acquire(-1, [](int s) { return s == 2 ? 10 : 0; }, nullptr);
    ASSERT_EQ(a.outcome, SlotPool::Outcome::Acquired);
    EXPECT_EQ(a.slot, 2);
    auto b = pool.acquire(-1, nullptr, nullptr);
    EXPECT_EQ(b.slot, 0);
    auto c = pool.acquire(-1, nullptr, nullptr);
    EXPECT_EQ(c.slot, 1);
    pool.release(0);
    pool.release(1);
    // Equal scores: slot 0 was used before slot 1.
    auto d = pool.acquire(-1, nullptr, nullptr);
    EXPECT_EQ(d.slot, 0);
    EXPECT_TRUE(pool.busy(2));
    EXPECT_FALSE(pool.busy(1));
}

TEST(SlotPool, WaitersGetSlotsInArrivalOrder) {
    SlotPool pool(1, 4);
    ASSERT_EQ(pool.acquire(-1, nullptr, nullptr).slot, 0);
    std::vector<int> order;
    std::mutex mu;
    std::vector<std::thread> ts;
    for (int i = 0; i < 3; ++i) {
        ts.emplace_back([&, i] {
            auto r = pool.acquire(-1, nullptr, nullptr);
            {
                std::lock_guard<std::mutex> lock(mu);
                order.push_back(i);
            }
            std::this_thread::sleep_for(5ms);
            pool.release(r.slot);
        });
        while (pool.queued() < i + 1) std::this_thread::sleep_for(1ms);  // arrives in order
    }
    pool.release(0);
    for (auto& t : ts) t.join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

TEST(SlotPool, AFullQueueIsRefusedAndAWaiterCanGiveUp) {
    SlotPool pool(1, 1);
    ASSERT_EQ(pool.acquire(-1, nullptr, nullptr).outcome, SlotPool::Outcome::Acquired);
    std::atomic<bool> give_up{false};
    SlotPool::Acquired waiting;
    std::thread t([&] { waiting = pool.acquire(-1, nullptr, [&] { return give_up.load(); }); });
    while (pool.queued() < 1) std::this_thread::sleep_for(1ms);
    auto full = pool.acquire(-1, nullptr, nullptr);
    EXPECT_EQ(full.outcome, SlotPool::Outcome::QueueFull);
    EXPECT_EQ(full.queued_ahead, 1);
    give_up = true;
    t.join();
    EXPECT_EQ(waiting.outcome, SlotPool::Outcome::Stopped);
    EXPECT_EQ(pool.queued(), 0);
}

TEST(SlotPool, AskingForASlotWaitsForThatOne) {
    SlotPool pool(2, 4);
    ASSERT_EQ(pool.acquire(1, nullptr, nullptr).slot, 1);
    std::atomic<int> got{-1};
    std::thread t([&] { got = pool.acquire(1, nullptr, nullptr).slot; });
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(got.load(), -1) << "slot 0 is idle but slot 1 was asked for";
    pool.release(1);
    t.join();
    EXPECT_EQ(got.load(), 1);
}

TEST(SlotPool, HoldCancelsTheRequestOnTheSlotAndWaitsForIt) {
    SlotPool pool(1, 4);
    ASSERT_EQ(pool.acquire(-1, nullptr, nullptr).slot, 0);
    std::atomic<bool> cancel{false};
    std::thread gen([&] {
        while (!cancel) std::this_thread::sleep_for(1ms);
        pool.release(0);  // the generation stops and gives the slot back
    });
    EXPECT_TRUE(pool.hold(0, 2s, [&] { cancel = true; }));
    gen.join();
    EXPECT_TRUE(pool.busy(0));
    EXPECT_FALSE(pool.hold(0, 20ms, nullptr)) << "still held";
    pool.release(0);
    EXPECT_FALSE(pool.busy(0));
}
