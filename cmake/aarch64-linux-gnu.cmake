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
