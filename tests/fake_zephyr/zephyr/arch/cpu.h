/* Stand-in for Zephyr's <zephyr/arch/cpu.h> (tests only; see
   zephyr/toolchain.h): the architecture's arch.h, for CONFIG_ARM. */
#ifndef ZEPHYR_INCLUDE_ARCH_CPU_H_
#define ZEPHYR_INCLUDE_ARCH_CPU_H_

#include <zephyr/arch/arch_interface.h>

#if defined(CONFIG_ARM)
#include <zephyr/arch/arm/arch.h>
#else
#error "the stand-in <zephyr/arch/cpu.h> models CONFIG_ARM"
#endif

#endif
