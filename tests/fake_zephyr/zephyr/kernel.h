/* Stand-in for Zephyr's <zephyr/kernel.h> (tests only): the few kernel
   functions the cuvil-mcu sample uses, with Zephyr's signatures. */
#ifndef FAKE_ZEPHYR_KERNEL_H
#define FAKE_ZEPHYR_KERNEL_H

#include <stdint.h>

#include <zephyr/sys/printk.h>

uint32_t k_cycle_get_32(void);
int64_t k_uptime_get(void);
/* <zephyr/sys/time_units.h>, included by kernel.h */
uint32_t k_cyc_to_us_floor32(uint32_t t);

#endif
