/* Stand-in for Zephyr's <zephyr/kernel_includes.h> (tests only; see
   zephyr/toolchain.h): the headers kernel.h brings that the sample's
   calls need. */
#ifndef ZEPHYR_INCLUDE_KERNEL_INCLUDES_H_
#define ZEPHYR_INCLUDE_KERNEL_INCLUDES_H_

#ifndef ZEPHYR_INCLUDE_KERNEL_H_
#error Please do not include kernel-specific headers directly, use <zephyr/kernel.h> instead
#endif

#include <stddef.h>
#include <limits.h>
#include <zephyr/toolchain.h>
#include <zephyr/sys/printk.h>
#include <zephyr/arch/cpu.h>

#endif
