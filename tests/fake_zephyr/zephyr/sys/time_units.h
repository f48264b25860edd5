/* Stand-in for Zephyr's <zephyr/sys/time_units.h> (tests only; see
   zephyr/toolchain.h). Zephyr generates its k_<from>_to_<to>_<round><bits>
   conversions as macros over z_tmcvt_32/64; the one the sample uses is
   written out here for a fixed CONFIG_SYS_CLOCK_HW_CYCLES_PER_SEC. */
#ifndef ZEPHYR_INCLUDE_TIME_UNITS_H_
#define ZEPHYR_INCLUDE_TIME_UNITS_H_

#include <zephyr/toolchain.h>
#include <stdint.h>

#define sys_clock_hw_cycles_per_sec() CONFIG_SYS_CLOCK_HW_CYCLES_PER_SEC

#define Z_HZ_us 1000000
#define Z_HZ_cyc sys_clock_hw_cycles_per_sec()

/* hardware cycles -> microseconds, 32 bits, truncated; t is a uint64_t count */
#define k_cyc_to_us_floor32(t) ((uint32_t)(((uint64_t)(t) * Z_HZ_us) / (uint64_t)Z_HZ_cyc))

#endif
