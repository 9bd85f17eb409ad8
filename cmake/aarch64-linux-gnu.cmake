# Cross-compile for 64-bit ARM Linux with Debian's g++-aarch64-linux-gnu; run the result
# with qemu-aarch64-static (see DESIGN.md, "ARM without a board").
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# Static, so qemu-aarch64-static runs the binary without an aarch64 sysroot.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
# pkg-config: the target's .pc files (Debian multiarch), never the build machine's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# Tests run under qemu as a Raspberry Pi 5's CPU (Cortex-A76: dotprod, no i8mm); CTest and
# gtest_discover_tests prefix the test binaries with it, tests that start the edgellm binary
# themselves read EDGELLM_TEST_WRAPPER (tests/CMakeLists.txt). EDGELLM_QEMU_CPU picks another.
if(DEFINED ENV{EDGELLM_QEMU_CPU})
  set(EDGELLM_QEMU_CPU $ENV{EDGELLM_QEMU_CPU})
else()
  set(EDGELLM_QEMU_CPU cortex-a76)
endif()
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -cpu ${EDGELLM_QEMU_CPU})
