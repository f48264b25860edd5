/* Stand-in for Zephyr's <zephyr/kernel.h> (tests only; see
   zephyr/toolchain.h). */
#ifndef ZEPHYR_INCLUDE_KERNEL_H_
#define ZEPHYR_INCLUDE_KERNEL_H_

#include <zephyr/kernel_includes.h>
#include <limits.h>
#include <stdbool.h>
#include <zephyr/toolchain.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the hardware clock's up-counter, in cycles */
static inline uint32_t k_cycle_get_32(void)
{
	return arch_k_cycle_get_32();
}

#ifdef __cplusplus
}
#endif

#endif
