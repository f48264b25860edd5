/* Stand-in for Zephyr's <zephyr/types.h> (tests only; see zephyr/toolchain.h). */
#ifndef ZEPHYR_INCLUDE_TYPES_H_
#define ZEPHYR_INCLUDE_TYPES_H_

#include <stdint.h>

#endif
