/* Stand-in for Zephyr's <zephyr/arch/arch_interface.h> (tests only; see
   zephyr/toolchain.h): what every architecture implements. */
#ifndef ZEPHYR_INCLUDE_ARCH_ARCH_INTERFACE_H_
#define ZEPHYR_INCLUDE_ARCH_ARCH_INTERFACE_H_

#include <zephyr/toolchain.h>
#include <stddef.h>
#include <zephyr/types.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline uint32_t arch_k_cycle_get_32(void);

#ifdef __cplusplus
}
#endif

#endif
