/* Stand-in for Zephyr's <zephyr/toolchain.h> (tests only).

   Every stand-in header under tests/fake_zephyr/zephyr/ declares a subset of
   the real Zephyr header of the same path: only what the cuvil-mcu sample
   (firmware_examples/zephyr) and the PlatformIO example's Zephyr branch
   use, with the real names and signatures, written for these tests. The
   CONFIG_* values come from the autoconf.h the tests generate with
   kconfiglib, included with -imacros as Zephyr's build does. */
#ifndef ZEPHYR_INCLUDE_TOOLCHAIN_H_
#define ZEPHYR_INCLUDE_TOOLCHAIN_H_

#if defined(__GNUC__)
#include <zephyr/toolchain/gcc.h>
#else
#error "the stand-in <zephyr/toolchain.h> knows GCC-compatible compilers only"
#endif

#endif
