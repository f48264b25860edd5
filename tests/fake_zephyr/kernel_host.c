/* Host implementation of the stand-in Zephyr kernel API (tests only). */
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

uint32_t k_cycle_get_32(void)
{
    return (uint32_t)clock(); /* CLOCKS_PER_SEC "cycles" per second */
}

int64_t k_uptime_get(void)
{
    return (int64_t)clock() * 1000 / CLOCKS_PER_SEC;
}

uint32_t k_cyc_to_us_floor32(uint32_t t)
{
    return (uint32_t)((uint64_t)t * 1000000u / CLOCKS_PER_SEC);
}
