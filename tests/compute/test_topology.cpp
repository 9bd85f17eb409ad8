// CPU lists and masks, big-core detection from sysfs, and thread pinning that reports
// whether the OS applied it.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "compute/cpu_topology.h"
#include "compute/thread_pool.h"

using namespace edgellm;
namespace fs = std::filesystem;

TEST(CpuList, ParsesRangesAndLists) {
    EXPECT_EQ(parse_cpu_list("0-3,6"), (std::vector<int>{0, 1, 2, 3, 6}));
    EXPECT_EQ(parse_cpu_list("4"), (std::vector<int>{4}));
    EXPECT_EQ(parse_cpu_list("6,4-5,4"), (std::vector<int>{4, 5, 6}));
    for (const char* bad : {"", "-1", "3-1", "a", "1,", ",1", "1--2", "99999"})
        EXPECT_FALSE(parse_cpu_list(bad).has_value()) << bad;
    EXPECT_EQ(cpu_list_string({0, 1, 2, 3, 6}), "0-3,6");
}

TEST(CpuMask, ParsesHex) {
    EXPECT_EQ(parse_cpu_mask("0xF0"), (std::vector<int>{4, 5, 6, 7}));
    EXPECT_EQ(parse_cpu_mask("5"), (std::vector<int>{0, 2}));
    EXPECT_EQ(parse_cpu_mask("0x100"), (std::vector<int>{8}));
    for (const char* bad : {"", "0x", "0", "xyz", "0xG"})
        EXPECT_FALSE(parse_cpu_mask(bad).has_value()) << bad;
}

namespace {

// A fake /sys with the given capacity (or max frequency) per CPU.
fs::path fake_sysfs(const std::vector<long>& values, const char* file) {
    const fs::path root =
        fs::temp_directory_path() / ("edgellm_sysfs_" + std::to_string(getpid()) + file[0]);
    fs::remove_all(root);
    for (size_t i = 0; i < values.size(); ++i) {
        const fs::path f = root / "devices/system/cpu" / ("cpu" + std::to_string(i)) / file;
        fs::create_directories(f.parent_path());
        std::ofstream(f) << values[i] << "\n";
    }
    fs::create_directories(root / "devices/system/cpu/cpufreq");  // not a CPU
    return root;
}

}  // namespace

TEST(BigCores, FromCapacityOrMaxFrequency) {
    // SA8295-like: four little (capacity 446) and four big (1024) cores.
    auto root = fake_sysfs({446, 446, 446, 446, 1024, 1024, 1024, 1024}, "cpu_capacity");
    EXPECT_EQ(big_cores(root.string()), (std::vector<int>{4, 5, 6, 7}));
    fs::remove_all(root);
    // RK3588-like through frequencies: 4 x A55 1.8 GHz, 2 + 2 A76 at 2.4 / 2.256 GHz: all
    // four A76 are big.
    root = fake_sysfs({1800000, 1800000, 1800000, 1800000, 2400000, 2400000, 2256000, 2256000},
                      "cpufreq/cpuinfo_max_freq");
    EXPECT_EQ(big_cores(root.string()), (std::vector<int>{4, 5, 6, 7}));
    fs::remove_all(root);
    // All alike: nothing to choose.
    root = fake_sysfs({1024, 1024}, "cpu_capacity");
    EXPECT_TRUE(big_cores(root.string()).empty());
    fs::remove_all(root);
    EXPECT_TRUE(big_cores("/nonexistent").empty());
}

TEST(ThreadPoolPinning, EveryThreadRunsWhereAsked) {
    ThreadPool pool(2, {0});
    EXPECT_TRUE(pool.affinity_ok());
    std::atomic<int> on_cpu0{0};
    pool.run([&](int, int) {
        cpu_set_t set;
        CPU_ZERO(&set);
        ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof set, &set), 0);
        if (CPU_COUNT(&set) == 1 && CPU_ISSET(0, &set)) on_cpu0++;
    });
    EXPECT_EQ(on_cpu0.load(), 2);
    // Restore the test thread's affinity for the tests that follow.
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
    sched_setaffinity(0, sizeof all, &all);
}

TEST(ThreadPoolPinning, ReportsWhenTheOsRefuses) {
    ThreadPool pool(1, {1000});  // no such CPU
    EXPECT_FALSE(pool.affinity_ok());
    int ran = 0;
    pool.run([&](int, int) { ++ran; });
    EXPECT_EQ(ran, 1);
}
