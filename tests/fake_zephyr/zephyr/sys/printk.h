/* Stand-in for Zephyr's <zephyr/sys/printk.h> (tests only; see
   zephyr/toolchain.h): printk with CONFIG_PRINTK=y. */
#ifndef ZEPHYR_INCLUDE_SYS_PRINTK_H_
#define ZEPHYR_INCLUDE_SYS_PRINTK_H_

#include <zephyr/toolchain.h>
#include <stddef.h>
#include <stdarg.h>
#include <inttypes.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef CONFIG_PRINTK
extern __printf_like(1, 2) void printk(const char *fmt, ...);
#else
#error "the stand-in <zephyr/sys/printk.h> models CONFIG_PRINTK=y"
#endif

#ifdef __cplusplus
}
#endif

#endif
