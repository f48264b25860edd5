/* The tests' Zephyr "board" on the host (tests only): the console behind
   printk and the system timer driver behind k_cycle_get_32, counting
   CONFIG_SYS_CLOCK_HW_CYCLES_PER_SEC cycles per second of process time. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include <zephyr/kernel.h>

void printk(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
}

uint32_t sys_clock_cycle_get_32(void)
{
	return (uint32_t)((uint64_t)clock() * CONFIG_SYS_CLOCK_HW_CYCLES_PER_SEC / CLOCKS_PER_SEC);
}
