/* Stand-in for Zephyr's <zephyr/arch/arm/misc.h> (tests only; see
   zephyr/toolchain.h): the cycle counter comes from the system timer
   driver (kernel_host.c here). */
#ifndef ZEPHYR_INCLUDE_ARCH_ARM_MISC_H_
#define ZEPHYR_INCLUDE_ARCH_ARM_MISC_H_

#ifdef __cplusplus
extern "C" {
#endif

extern uint32_t sys_clock_cycle_get_32(void);

static inline uint32_t arch_k_cycle_get_32(void)
{
	return sys_clock_cycle_get_32();
}

#ifdef __cplusplus
}
#endif

#endif
