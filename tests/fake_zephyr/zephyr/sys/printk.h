/* Stand-in for Zephyr's <zephyr/sys/printk.h> (tests only). */
#ifndef FAKE_ZEPHYR_SYS_PRINTK_H
#define FAKE_ZEPHYR_SYS_PRINTK_H

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void printk(const char *fmt, ...);

#endif
