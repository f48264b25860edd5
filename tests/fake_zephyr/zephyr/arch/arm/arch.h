/* Stand-in for Zephyr's <zephyr/arch/arm/arch.h> (tests only; see
   zephyr/toolchain.h). */
#ifndef ZEPHYR_INCLUDE_ARCH_ARM_ARCH_H_
#define ZEPHYR_INCLUDE_ARCH_ARM_ARCH_H_

#include <zephyr/arch/arm/misc.h>

#endif
