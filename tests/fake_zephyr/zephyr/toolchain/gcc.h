/* Stand-in for Zephyr's <zephyr/toolchain/gcc.h> (tests only; see
   zephyr/toolchain.h). */
#ifndef ZEPHYR_INCLUDE_TOOLCHAIN_GCC_H_
#define ZEPHYR_INCLUDE_TOOLCHAIN_GCC_H_

#ifndef __printf_like
#define __printf_like(f, a) __attribute__((format (printf, f, a)))
#endif

#endif
